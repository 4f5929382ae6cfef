"""The fused kernel's first-use check (docs/design.md, "GPU kernels before a GPU").

No configuration of the compiled kernel is trusted before it has run on the device in
hand. The first time ``kernel="auto"`` meets a (device, dtype, head dim, flags)
configuration, :func:`first_use_check` runs the compiled kernel on a small random problem
of that configuration and compares it with a float64 evaluation of the exact path's
definition, within the kernel's derived bound (:func:`attncoda.capture.kernels.
fused_bounds`, compiled terms included). An exception on the way (Triton's
``CompilationError``, ``OutOfResources``, a launch error) or a value outside the bound sends
that configuration to the two-call SDPA path for the rest of the process, with one printed
line that names it. The ``triton`` kernel asked by name skips the check and raises what it
meets.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import torch

from attncoda.capture.stats import row_statistics

from ._bounds import fused_bounds
from ._configs import Refused, Variant
from ._masks import MaskShape
from ._triton import launch_for, triton_attention
from ._triton_jit import interpreting

__all__ = [
    "Configuration", "Problem", "checked_configurations", "first_use_check", "reference",
]  # fmt: skip

#: configuration -> None (passed) or why it failed, for this process.
_CHECKED: dict[tuple, str | None] = {}
#: The statistics the check compares.
_COMPARED = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")


@dataclass(frozen=True)
class Configuration:
    """A configuration of the compiled kernel: where it runs (``device``), the ``dtype`` of
    its inputs, its ``head_dim``, its compile-time ``variant``, and the layer's soft-cap
    value (None: none), which the check's problem takes."""

    device: Any
    dtype: torch.dtype
    head_dim: int
    variant: Variant
    softcap: float | None

    @property
    def key(self) -> tuple:
        """What the process remembers it by: device, dtype, head dim and the flags."""
        device = torch.device(self.device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        v = self.variant
        flags = (v.causal, v.window, v.softcap, v.aux_content, v.aux_sink, v.sparse)
        return (str(device), str(self.dtype).removeprefix("torch."), int(self.head_dim), *flags)


def checked_configurations() -> dict[tuple, str | None]:
    """What this process has checked: configuration -> None (passed) or why it failed."""
    return dict(_CHECKED)


@dataclass(frozen=True)
class Problem:
    """One attention problem as the fused kernel takes it: ``query`` ``(batch, head,
    query_pos, head_dim)``; ``key`` and ``value`` ``(batch, kv_head, key_pos, head_dim)``,
    unexpanded under grouped-query attention; the mask's ``shape``; ``sink`` bool ``(batch,
    key_pos)``; the score ``scaling`` and ``softcap`` (None: none); ``s_aux``, one learned
    sink logit per head (None: none), and whether it is in the sink set (``learned``)."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    shape: MaskShape
    sink: torch.Tensor
    scaling: float
    softcap: float | None = None
    s_aux: torch.Tensor | None = None
    learned: bool = False


def reference(problem: Problem) -> tuple:
    """The exact path's definition of ``problem`` in float64: ``(output, statistics, z,
    content, visible)``.

    Scores ``scaling q . k`` (soft-capped), any learned sink a last column of logit
    ``s_aux[head]`` and no value, a log-softmax and :func:`attncoda.capture.stats.
    row_statistics`, all in float64.
    """
    query, key, sink, s_aux = problem.query, problem.key, problem.sink, problem.s_aux
    b, h, length, d = query.shape
    k_len = key.shape[2]
    group = h // key.shape[1]
    keys = key.double().repeat_interleave(group, 1)
    values = problem.value.double().repeat_interleave(group, 1)
    z = torch.matmul(query.double(), keys.transpose(-1, -2)) * problem.scaling
    if problem.softcap is not None:
        z = torch.tanh(z / problem.softcap) * problem.softcap
    rows = torch.arange(length, device=query.device)
    visible = problem.shape.visible(rows, k_len, k_len - length)
    marks = sink
    if s_aux is not None:
        logit = s_aux.double()[None, :, None, None].expand(b, h, length, 1)
        z = torch.cat([z, logit], -1)
        visible = torch.cat([visible, visible.new_ones((b, 1, length, 1))], -1)
        marks = torch.cat([sink, sink.new_full((b, 1), problem.learned)], -1)
    logp = torch.log_softmax(z.masked_fill(~visible, -math.inf), -1)
    stats = row_statistics(logp.clone(), visible, marks)
    p = logp.exp()
    if s_aux is not None:
        p = p[..., :-1]
    output = torch.matmul(p, values)
    content = stats["n_keys"] - stats["n_sink"]
    return output, stats, z, content, visible


def _problem(config: Configuration, launch, seed=0) -> Problem:
    """A small random problem of one configuration: two documents (the second padded),
    two query heads on one key/value head, several query and key blocks of the ``launch``
    configuration; with a sparse variant, one more sink key in each document's middle,
    after its prefix."""
    device, head_dim, variant = config.device, config.head_dim, config.variant
    block = max(launch.block_m, launch.block_n)
    length = 2 * block + 19
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn((2, 2, length, head_dim), generator=generator)
    k = torch.randn((2, 1, length, head_dim), generator=generator)
    v = torch.randn((2, 1, length, head_dim), generator=generator)
    k[:, :, 0] = 3.0 * q.mean((1, 2))[:, None] / head_dim**0.5
    if config.softcap is not None:
        q = q * 3.0  # scores beyond the cap
    lo = torch.tensor([0, 5], dtype=torch.int32)
    hi = torch.tensor([length, length - 7], dtype=torch.int32)
    window = 37 if variant.window else None
    shape = MaskShape(lo.to(device), hi.to(device), variant.causal, window)
    sink = torch.zeros((2, length), dtype=torch.bool)
    sink[0, 0] = sink[1, 5] = True
    if variant.sparse:
        sink[:, length // 2] = True
    aux = variant.aux_content or variant.aux_sink
    s_aux = torch.tensor([1.5, -0.5]).to(device) if aux else None
    q, k, v = (t.to(device=device, dtype=config.dtype) for t in (q, k, v))
    cap = None if config.softcap is None else float(config.softcap)
    return Problem(q, k, v, shape, sink.to(device), head_dim**-0.5, cap, s_aux, variant.aux_sink)


def _compare(config: Configuration, launch) -> str | None:
    """Run the kernel on the configuration's problem: None when within the bound, else
    what was out of it."""
    p = _problem(config, launch)
    out, stats = triton_attention(
        p.query, p.key, p.value, scaling=p.scaling, sink=p.sink, shape=p.shape,
        softcap=p.softcap, s_aux=p.s_aux, learned=p.learned,
    )  # fmt: skip
    ref_out, ref, z, content, visible = reference(p)
    compiled = None if interpreting() else launch.precision
    limits = fused_bounds(p, z, content, visible, compiled=compiled)
    rows = visible.any(-1).expand_as(stats["sink_mass"])
    if not torch.equal(stats["n_keys"][rows], ref["n_keys"].expand_as(rows)[rows]):
        return "key counts differ from the reference"
    for name in _COMPARED:
        got = stats[name][rows]
        err = (got - ref[name].expand_as(rows)[rows]).abs()
        if not bool(torch.isfinite(got).all()) or bool((err > limits[name][rows]).any()):
            return f"{name} off the float64 reference by {float(err.max()):.3g}, beyond its bound"
    eps = torch.finfo(config.dtype).eps * float(p.value.double().abs().max())
    err = (out.double() - ref_out).abs().amax(-1)
    if not bool(torch.isfinite(out).all()) or bool(
        (err[rows] > limits["output"][rows] + 2 * eps).any()
    ):
        return f"the output off the float64 reference by {float(err.max()):.3g}, beyond its bound"
    return None


def first_use_check(  # params: a configuration's flags by keyword, as bench/gpu.py passes them
    device, dtype, head_dim, *, causal, window, softcap, aux_content, aux_sink=False,
    sparse=False, quiet=False,
) -> str | None:  # fmt: skip
    """Check the compiled kernel once per configuration: None when it may serve it, else
    why not (a printed line the first time, unless ``quiet``).

    Parameters
    ----------
    device : torch.device or str
        Where the layer runs.
    dtype : torch.dtype
        float32, bfloat16 or float16.
    head_dim : int
    causal : bool
    window, softcap : int or float or None
        The layer's window and soft-cap (only whether each is present selects the kernel).
    aux_content : bool
        Whether a learned sink seeds the content accumulators.
    aux_sink : bool
        Whether a learned sink is in the sink set (``sink="learned"``).
    sparse : bool
        Whether a document has sink keys after its sink prefix (masked in the key tiles
        that hold them).
    quiet : bool
        Print nothing (``bench/gpu.py`` reports every configuration itself).

    Returns
    -------
    str or None
        None when the kernel passed; ``"refused: ..."`` for a configuration the launch
        table refuses (not run, nothing printed); else the exception or the statistic that
        failed.
    """
    variant = Variant(
        causal=bool(causal), window=window is not None, softcap=softcap is not None,
        aux_content=bool(aux_content), aux_sink=bool(aux_sink), sparse=bool(sparse),
    )  # fmt: skip
    config = Configuration(device, dtype, head_dim, variant, softcap)
    key = config.key
    if key in _CHECKED:
        return _CHECKED[key]
    launch = launch_for(device, dtype, head_dim, variant.heavy)
    if isinstance(launch, Refused):  # the launch table's own refusal: no check, no line
        return f"refused: {launch.why}"
    try:
        with torch.inference_mode():
            why = _compare(config, launch)
    except Exception as err:  # CompilationError, OutOfResources, a launch error: all of them
        first = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
        why = f"{type(err).__name__}{': ' + first if first else ''}"
    _CHECKED[key] = why
    if why is not None and not quiet:
        print(f"note: the fused Triton kernel failed its first-use check on {_describe(key)}: "
              f"{why}; that configuration takes the two-call SDPA path for the rest of this "
              f"process", file=sys.stderr)  # fmt: skip
    return why


def _describe(key: tuple) -> str:
    device, dtype, head_dim, causal, window, softcap, aux, aux_sink, sparse = key
    flags = ["causal" if causal else "bidirectional"]
    named = (("window", window), ("softcap", softcap), ("sink", aux), ("learned", aux_sink))
    flags += [name for name, on in (*named, ("sparse", sparse)) if on]
    name = device
    if device.startswith("cuda") and torch.cuda.is_available():
        name = f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return f"{name}, {dtype}, head dim {head_dim}, {'+'.join(flags)}"
