"""The kernel registry of ``method="fast"``: what each kernel declares, and which serves.

A kernel is a module of this package named as users type it (``--kernel NAME``,
``kernel="NAME"``): :mod:`attncoda.capture.kernels.sdpa`,
:mod:`attncoda.capture.kernels.triton`. It declares itself as ``KERNEL``, an object of the
:class:`Kernel` protocol, free of torch at import; its implementation sits in the private
module of the same name (``_sdpa``, ``_triton``). :data:`ORDER` holds them in the order
``"auto"`` prefers them: adding a kernel is one module and one entry there (or one call of
:func:`register`, from anywhere). A kernel reads only the layer's
:class:`attncoda.capture.kernels.LayerCall` and returns its results.

Every choice of a kernel, and every check of what a kernel can do, is made here from those
declarations:

- :data:`KERNELS`, the choices (``"auto"`` and the kernels' names), read by the command
  line without importing torch; :func:`describe` says them in words;
- :func:`choose`: the kernel a pass asks for, its name checked once, into the pass's plan;
  :func:`resolve_kernel`: the kernel that serves a device (``"auto"``: the first in
  :data:`ORDER` that takes the device and can run there); :func:`passed_over` says why
  ``"auto"`` did not take the kernel it prefers there (said once per process, and recorded
  beside the kernel that served, in ``Capture.kernel`` and ``Capture.forward``);
- :func:`check_dtype`: ``method="fast"`` refused, before anything runs, in a dtype no
  kernel takes on the device (float64 on CUDA); :func:`takes_dtype`, where
  ``method="auto"`` takes the fast path;
- :func:`declines` and :func:`serve`: the kernel chosen for a routed layer, then those
  after it in :data:`ORDER` whose dtypes and attention keywords (:data:`KEYWORDS`) cover
  the layer and that take it (:meth:`Kernel.prepare`), else the exact path.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from attncoda._errors import AttncodaError, check_choice

from . import cpp, sdpa, triton

if TYPE_CHECKING:
    from ._call import LayerCall

__all__ = [
    "KERNELS",
    "KEYWORDS",
    "NAMES",
    "ORDER",
    "PORTABLE",
    "Choice",
    "Kernel",
    "check_dtype",
    "choose",
    "declines",
    "describe",
    "dtype_name",
    "lookup",
    "passed_over",
    "register",
    "resolve_kernel",
    "serve",
    "takes_dtype",
]

#: The attention keywords a layer may pass that a kernel must model to serve it (Gemma 2's
#: ``softcap``, a ``sliding_window``, GPT-OSS's learned sink logits ``s_aux``).
KEYWORDS = ("softcap", "sliding_window", "s_aux")


class Kernel(Protocol):
    """What a kernel of the fast path declares (one module per kernel, ``KERNEL``)."""

    @property
    def name(self) -> str:
        """The name users type: the name of the module that declares it."""

    @property
    def title(self) -> str:
        """How notes name it (``"the two-call SDPA path"``)."""

    @property
    def summary(self) -> str:
        """What it does, in a few words, for the option's help."""

    @property
    def covers(self) -> frozenset[str]:
        """The attention keywords (of :data:`KEYWORDS`) it models."""

    @property
    def dtypes(self) -> Mapping[str, tuple[str, ...]]:
        """Per device type, the input dtypes it takes (``"float32"``, ...)."""

    @property
    def auto_devices(self) -> tuple[str, ...] | None:
        """The device types where ``"auto"`` may take it (None: every device)."""

    @property
    def portable(self) -> bool:
        """Whether it runs wherever the fast path does: recorded passes and wrapped models
        take it."""

    def refusal(self, device: str) -> str | None:
        """Why it cannot run on ``device`` (a device type) when asked by name: the error
        message; None when it can."""

    def bounds(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Its per-row error bounds against exact arithmetic (docs/design.md, "Error
        bounds" and "The fused kernel")."""

    def note(self, reason: str) -> str | None:
        """The line (said once per pass) that a layer left it for ``reason``, or None."""

    def prepare(self, call: LayerCall, *, auto: bool) -> LayerCall | str:
        """Whether it serves the layer of ``call`` (``auto``: chosen by ``"auto"``): the call
        with what it decided of the layer (``launch``), or why not (``""``: say nothing)."""

    def run(self, call: LayerCall) -> tuple[Any, dict[str, Any]]:
        """The layer of a call it prepared: its output ``(batch, head, query_pos, head_dim)``
        in the query's dtype, and statistics ``(batch, head, query_pos)`` named as
        :func:`attncoda.capture.stats.row_statistics` names them."""


#: The registered kernels, in the order ``"auto"`` prefers them; a layer one declines goes
#: to those after it.
ORDER: tuple[Kernel, ...] = (triton.KERNEL, cpp.KERNEL, sdpa.KERNEL)
#: Their names.
NAMES: tuple[str, ...] = tuple(kernel.name for kernel in ORDER)
#: The choices of ``kernel=`` and ``--kernel``.
KERNELS: tuple[str, ...] = ("auto", *NAMES)
#: The kernel that runs wherever the fast path does: it serves recorded passes and wrapped
#: models, and a plan that names no kernel.
PORTABLE: str = next(kernel.name for kernel in ORDER if kernel.portable)
#: torch's other names of the dtypes.
_ALIASES = {"double": "float64", "float": "float32", "half": "float16"}


def register(kernel: Kernel) -> None:
    """Add ``kernel`` last to :data:`ORDER` (a layer it declines takes the exact path), and
    its name to :data:`NAMES` and :data:`KERNELS`."""
    global ORDER, NAMES, KERNELS
    if kernel.name in KERNELS:
        raise AttncodaError(
            f"a kernel named {kernel.name!r} is registered already: give the new one its own name"
        )
    ORDER = (*ORDER, kernel)
    NAMES = tuple(k.name for k in ORDER)
    KERNELS = ("auto", *NAMES)


def lookup(name: str) -> Kernel:
    """The registered kernel of ``name`` (an AttncodaError naming the choices otherwise)."""
    check_choice("kernel", name, NAMES)
    return ORDER[NAMES.index(name)]


def describe(quoted: bool = False) -> str:
    """The choices in words: ``auto (triton on cuda, else cpp on cpu, else sdpa), triton, cpp
    or sdpa``; with ``quoted``, for docstrings, the names quoted and each kernel's summary."""

    def said(name: str) -> str:
        return f'``"{name}"``' if quoted else name

    rule = ", else ".join(
        said(k.name)
        if k.auto_devices is None
        else f"{said(k.name)} on {' or '.join(k.auto_devices)}"
        for k in ORDER
    )
    names = [f"{said(k.name)} ({k.summary})" if quoted else k.name for k in ORDER]
    return f"{said('auto')} ({rule}), {', '.join(names[:-1])} or {names[-1]}"


def dtype_name(dtype: object) -> str:
    """``"float64"`` for ``torch.float64``, ``"float64"`` or ``"double"`` (no torch import)."""
    name = str(dtype).removeprefix("torch.")
    return _ALIASES.get(name, name)


def _device_type(device: object) -> str:
    return str(getattr(device, "type", device)).split(":")[0]


def resolve_kernel(kernel: str, device: str) -> str:
    """The kernel that serves ``method="fast"`` on ``device`` (``"cpu"`` or ``"cuda"``).

    ``"auto"`` is the first kernel of :data:`ORDER` that ``"auto"`` may take on the device
    and that can run there: the ``triton`` kernel on CUDA when triton imports (each
    configuration then checked on first use), the ``cpp`` kernel on the CPU where it can be
    built, the ``sdpa`` kernel otherwise. Where it passes over the kernel it prefers on the
    device (:func:`passed_over`), one note says why, once per process. A kernel asked by
    name is refused where it cannot run (its :meth:`Kernel.refusal`).
    """
    check_choice("kernel", kernel, KERNELS)
    return ORDER[_resolved(kernel, device)[0]].name


def _resolved(kernel: str, device: str) -> tuple[int, str | None]:
    """:func:`resolve_kernel` of a checked name: the kernel's index in :data:`ORDER`, and
    why ``"auto"`` passed over the kernel it prefers on ``device`` (None: it did not)."""
    if kernel == "auto":
        chosen = next(
            (
                index
                for index, k in enumerate(ORDER)
                if (k.auto_devices is None or device in k.auto_devices)
                and k.refusal(device) is None
            ),
            NAMES.index(PORTABLE),
        )
        why = passed_over(device)
        if why is not None:
            _say_passed_over(device, ORDER[chosen].name, why)
        return chosen, why
    index = NAMES.index(kernel)
    why = ORDER[index].refusal(device)
    if why is not None:
        raise AttncodaError(why)
    return index, None


@dataclass(frozen=True)
class Choice:
    """The kernel a pass asks for (``"auto"`` or a kernel's name), its name checked once
    (:func:`choose`): what the pass's :class:`attncoda.capture.stats.PassPlan` carries."""

    asked: str


def choose(kernel: str | None) -> Choice:
    """The :class:`Choice` of ``kernel`` (``"auto"`` or a name of :data:`KERNELS`; None,
    for recorded passes and wrapped models: :data:`PORTABLE`), its name checked here."""
    asked = kernel or PORTABLE
    check_choice("kernel", asked, KERNELS)
    return Choice(asked)


def passed_over(device: str) -> str | None:
    """Why ``"auto"`` does not take the kernel it prefers on ``device`` (the first of
    :data:`ORDER` that names the device among its ``auto_devices``: ``cpp`` on the CPU,
    ``triton`` on CUDA): that kernel's :meth:`Kernel.refusal`, such as a torch older than
    the ``cpp`` kernel's floor. None where it can run, or where no kernel is preferred."""
    preferred = next(
        (k for k in ORDER if k.auto_devices is not None and device in k.auto_devices), None
    )
    return None if preferred is None else preferred.refusal(device)


@functools.cache
def _say_passed_over(device: str, chosen: str, why: str) -> None:
    """The note of a kernel ``"auto"`` passes over, once per process and reason."""
    print(f"note: kernel='auto' takes {chosen} on {device}, since {why}", file=sys.stderr)


def takes_dtype(device: object, dtype: object) -> bool:
    """Whether a kernel takes ``dtype`` on ``device`` (:func:`check_dtype` would not refuse
    it): where ``method="auto"`` takes the fast path."""
    try:
        check_dtype(device, dtype)
    except AttncodaError:
        return False
    return True


def check_dtype(device: object, dtype: object) -> None:
    """Refuse ``method="fast"`` in ``dtype`` on ``device`` when no kernel takes it there
    (float64 on CUDA: neither PyTorch's memory-efficient attention nor the Triton kernel
    has it), before anything runs; devices no kernel declares are left to the kernels."""
    if dtype is None:
        return
    where, name = _device_type(device), dtype_name(dtype)
    tables = [k.dtypes[where] for k in ORDER if where in k.dtypes]
    if not tables or any(name in table for table in tables):
        return
    takes = list(dict.fromkeys(d for table in tables for d in table))
    listed = f"{', '.join(takes[:-1])} or {takes[-1]}" if len(takes) > 1 else takes[0]
    raise AttncodaError(
        f"method='fast' on {where} takes {listed} (its kernels have no {name}): use "
        f"dtype='float32', or method='exact' to keep {name}"
    )


def declines(kernel: Kernel, device: str, dtype: object, kwargs: Mapping[str, Any]) -> str | None:
    """Why ``kernel`` does not serve a layer of ``dtype`` on ``device`` called with
    ``kwargs`` (a dtype it does not take there, or an attention keyword it does not model):
    the reason a note prints; None when it may."""
    if dtype_name(dtype) not in kernel.dtypes.get(device, ()):
        return f"{dtype} inputs" if device in kernel.dtypes else f"{device} tensors"
    missing = [w for w in KEYWORDS if kwargs.get(w) is not None and w not in kernel.covers]
    if missing:
        return f"{' and '.join(missing)} layers"
    return None


def serve(call) -> tuple[LayerCall | None, list[str]]:
    """The kernel that serves one routed layer, decided once: ``call`` with that kernel
    (``kernel``, ``served``) and what the kernel decided of the layer (its
    :meth:`Kernel.prepare`), or None where none serves it (the exact path then does); and
    the notes of the kernels that declined it, to print once per pass.

    The plan's :class:`Choice` is resolved where the layer runs (a device map may spread
    the layers over the CPU and GPUs); a dtype no kernel takes there is refused
    (:func:`check_dtype`). That kernel goes first, then those after it in :data:`ORDER`:
    each that :func:`declines` the layer, or whose ``prepare`` does (a mask it cannot
    describe, a failed first-use check), may say why (its :meth:`Kernel.note`).
    Where ``"auto"`` passed over the kernel it prefers on the device, the reason follows the
    name in ``served`` (``"sdpa (kernel='cpp' cannot run here: ...)"``), so that
    ``Capture.kernel`` and ``Capture.forward`` carry it.
    """
    query, asked = call.query, call.plan.kernels.asked
    device = query.device.type
    check_dtype(device, query.dtype)
    first, fallback = _resolved(asked, device)
    notes: list[str] = []
    for kernel in ORDER[first:]:
        why = declines(kernel, device, query.dtype, call.kwargs)
        ready = kernel.prepare(call, auto=asked == "auto") if why is None else why
        if not isinstance(ready, str):
            served = kernel.name if fallback is None else f"{kernel.name} ({fallback})"
            return replace(ready, kernel=kernel, served=served), notes
        note = kernel.note(ready) if ready else None
        if note is not None:
            notes.append(note)
    return None, notes
