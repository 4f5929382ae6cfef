"""Capture benchmarks on the embedded SmolLM2-135M (30 layers x 9 heads, 3 KV heads) and
Gemma 3 270M (18 layers x 4 heads, 1 KV head, head dim 256, sliding windows of 512 keys).

- default: what a user gets with no options, ``capture(model, ids)`` (the default method,
  ``auto``: the fused kernel wherever one serves, ``cpp`` on the CPU where it builds;
  sampled rows ``"auto"``), over the model's own SDPA forward, like for like
  (``bench/_floors.py``: the last position's logits, as a capture asks), on SmolLM2 at
  L = 512, 2048 and 8192 and on Gemma 3 at 512, 2048 and 8192 (target <= 1.05): the median
  of the ratios of ``--repeats`` (at least 5) alternating runs of floor and capture in one
  process. Beside them, once each: the plain SDPA call with every position's logits, the
  fast capture without rows (``method="fast"``, ``record_rows="none"``), the exact
  capture, and on Gemma 3 the windowed floor (FlexAttention over each layer's band, the
  window's on its sliding-window layers), the floor a user who wants the window would run.
  ``--profile`` shows where a default capture's time goes: the kernel's pass, the rest of
  the attention function, and the model around it.
- P1: time of an exact capture (statistics of every row, no rows recorded) divided by the
  time of an eager forward without ``output_attentions`` that asks, as a capture does, for
  the last position's logits only (``bench/_floors.py``), at L = 512. Target <= 1.15.
- P2: peak resident memory of one forward at L = 2048, capture vs eager
  ``output_attentions=True``, each in a fresh process, above the memory of the loaded model:
  the high-water mark is reset to the resident size after loading (``/proc/self/clear_refs``),
  so loading's own transient peak does not hide a smaller forward.
  At L = 8192 ours is measured; ``output_attentions``' is computed: it returns every layer's
  ``(heads, L, L)`` float32 probabilities at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: default capture / SDPA forward, like for like, at each (model, length) measured.
DEFAULT_TARGET = 1.05
#: The (model, length) pairs of the default's target.
DEFAULT_CASES = (("smollm2", 512), ("smollm2", 2048), ("smollm2", 8192), ("gemma3", 512),
                 ("gemma3", 2048), ("gemma3", 8192))  # fmt: skip

_CHILD = r"""
import json, resource, sys, torch
from attncoda.models.load import load_model
from attncoda.capture import capture, forward_kwargs
mode, length = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(int(sys.argv[3]))
model, tokenizer, info = load_model("smollm2")
ids = torch.randint(100, 40000, (1, length), generator=torch.Generator().manual_seed(0))
mask = torch.ones_like(ids)
with torch.inference_mode():
    model(input_ids=ids[:, :16], attention_mask=mask[:, :16])


def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB -> MiB
    return None


try:  # reset the high-water mark to the current RSS (Linux: clear_refs 5)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base, reset = status("VmRSS"), True
except OSError:
    base, reset = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, False
with torch.inference_mode():
    # Like for like: every forward asks for the last position's logits, as a capture does.
    if mode == "capture":
        capture(model, ids, mask)
    elif mode == "eager":
        model(**forward_kwargs(model, ids, mask, logits=False))
    else:
        model(**forward_kwargs(model, ids, mask, output_attentions=True, logits=False))
peak = status("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"base_mib": base, "peak_mib": peak, "reset": reset}))
"""


def peak_memory(mode: str, length: int, threads: int) -> dict:
    """Peak RSS (MiB) of one forward of ``mode`` at ``length`` tokens, in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(length), str(threads)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def p1_ratio(length: int = 512, repeats: int = 3) -> dict:
    """min-of-repeats capture time over the eager floor's (``bench/_floors.py``: the last
    position's logits, as a capture asks), interleaved so load hits both alike."""
    import torch

    from _floors import floors, seconds, window_ids
    from attncoda.capture import capture
    from attncoda.models.load import load_model

    model, _, _ = load_model("smollm2")
    ids = window_ids(model, length)
    eager = floors(model, ids, ("eager",))["eager"]
    times: dict[str, list[float]] = {"eager": [], "capture": []}
    calls = {
        "eager": eager,
        "capture": lambda: capture(model, ids, record_rows="none", method="exact"),
    }
    with torch.inference_mode():
        for call in calls.values():
            call()
        for _ in range(repeats):
            for name, call in calls.items():
                times[name].append(seconds(call))
    best = {name: min(values) for name, values in times.items()}
    return {
        "eager_s": best["eager"],
        "capture_s": best["capture"],
        "ratio": best["capture"] / best["eager"],
    }


def default_ratio(spec: str, length: int, repeats: int = 5) -> dict:
    """The default capture of one window of ``length`` over the SDPA forward, like for like:
    the median of the ratios of ``repeats`` alternating runs (floor, then capture), after one
    of each to warm up (the kernel built, the caches filled). Timed once each beside them:
    the plain SDPA call with every logit, the fast capture without rows, the exact capture,
    and, on a model with sliding-window layers, the windowed floor (``flex_window``)."""
    import statistics

    import torch

    from _floors import floors, seconds, window_ids
    from attncoda.capture import capture
    from attncoda.models.load import load_model

    model, _, _ = load_model(spec)
    ids = window_ids(model, length)
    windowed = any(getattr(m, "sliding_window", None) for m in model.modules())
    names = ("sdpa", "sdpa_all_logits", *(("flex_window",) if windowed else ()))
    calls = floors(model, ids, names)
    ran: list[str] = []

    def default():
        found = capture(model, ids)
        ran.append(f"{found.method}, {found.forward}")

    with torch.inference_mode():
        calls["sdpa"]()
        default()
        pairs = [(seconds(calls["sdpa"]), seconds(default)) for _ in range(repeats)]
        once = {
            "plain": seconds(calls["sdpa_all_logits"]),
            "fast_no_rows": seconds(
                lambda: capture(model, ids, record_rows="none", method="fast")
            ),
            "exact": seconds(lambda: capture(model, ids, method="exact")),
        }
        if windowed:
            calls["flex_window"]()  # its compile, once per shape
            once["flex_window"] = seconds(calls["flex_window"])
    model.set_attn_implementation("eager")
    floor = statistics.median(f for f, _ in pairs)
    return {
        "ratio": statistics.median(c / f for f, c in pairs),
        "sdpa_s": floor,
        "default_s": statistics.median(c for _, c in pairs),
        "spread": (min(c / f for f, c in pairs), max(c / f for f, c in pairs)),
        "once": once,
        "ran": "; ".join(dict.fromkeys(ran)),
    }


def default_rows(cases=DEFAULT_CASES, repeats: int = 5) -> list[dict]:
    """:func:`default_ratio` of each case, as rows of :func:`table`: the default's ratio
    with its target, then one row per figure timed once beside it (no target)."""
    out = []
    for spec, length in cases:
        got = default_ratio(spec, length, repeats)
        low, high = got["spread"]
        floor, default = got["sdpa_s"], got["default_s"]
        rows = [
            {
                "name": f"default capture / SDPA forward, {spec} L={length}",
                "value": got["ratio"],
                "target": f"<= {DEFAULT_TARGET}",
                "met": got["ratio"] <= DEFAULT_TARGET,
                "detail": f"sdpa {floor:.2f} s, default {default:.2f} s ({got['ran']}), "
                f"{repeats} pairs from {low:.3f} to {high:.3f}",
            }
        ]
        said = {
            "plain": "plain SDPA call with every logit / SDPA forward",
            "fast_no_rows": "fast capture, no rows / SDPA forward",
            "exact": "exact capture / SDPA forward",
            "flex_window": "windowed floor (FlexAttention) / SDPA forward",
        }
        for key, seconds_ in got["once"].items():
            rows.append(
                {
                    "name": f"  {said[key]}, {spec} L={length}",
                    "value": seconds_ / floor,
                    "target": "once",
                    "met": None,
                    "detail": f"{seconds_:.2f} s"
                    + (
                        f"; default / windowed floor {default / seconds_:.3f}"
                        if key == "flex_window"
                        else ""
                    ),
                }
            )
        out += rows
        print(table(rows), flush=True)
    return out


def profile(spec: str, length: int) -> str:
    """Where one default capture's time goes: the ``cpp`` kernel (its pass and epilogue,
    one call a layer), the rest of the fast path in the attention function (the mask's
    shape, storing the statistics and the sampled rows), and the model and capture around
    them (timers on the two functions), then the model's and the fast path's operators by
    self time (torch's profiler)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from _floors import window_ids
    from attncoda.capture import capture
    from attncoda.capture.kernels import _cpp
    from attncoda.capture.routing import _exact
    from attncoda.models.load import load_model

    model, _, _ = load_model(spec)
    ids = window_ids(model, length)
    spent = {"pass": 0.0, "layer": 0.0, "rows": 0.0}

    def timer(function, key):
        def wrapped(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - t0

        return wrapped

    with torch.inference_mode():
        capture(model, ids)  # warm-up: the build
        original = (_cpp.cpp_attention, _exact._fast, _exact.recorded_rows)
        _cpp.cpp_attention = timer(_cpp.cpp_attention, "pass")
        _exact._fast = timer(_exact._fast, "layer")
        _exact.recorded_rows = timer(_exact.recorded_rows, "rows")
        try:
            t0 = time.perf_counter()
            capture(model, ids)
            whole = time.perf_counter() - t0
        finally:
            _cpp.cpp_attention, _exact._fast, _exact.recorded_rows = original
        with torch_profile(activities=[ProfilerActivity.CPU]) as found:
            capture(model, ids)
    lines = [
        f"{spec} L={length}: default capture {whole:.3f} s = the cpp kernel "
        f"{spent['pass']:.3f} s + the sampled rows {spent['rows']:.3f} s + the rest of the fast "
        f"path {spent['layer'] - spent['pass'] - spent['rows']:.3f} s + the model and capture "
        f"around them {whole - spent['layer']:.3f} s",
        found.key_averages().table(sort_by="self_cpu_time_total", row_limit=25),
    ]
    return "\n".join(lines)


def output_attentions_gib(length: int, layers: int = 30, heads: int = 9) -> float:
    """What ``output_attentions`` holds at once: every layer's float32 probabilities."""
    return layers * heads * length * length * 4 / 2**30


def run(quick: bool = False, repeats: int = 3, threads: int = 1, long: bool = False) -> list[dict]:
    """Every capture figure, as dicts (also printed by :func:`table`)."""
    out = []
    p1 = p1_ratio(128 if quick else 512, repeats=1 if quick else repeats)
    out.append(
        {
            "name": f"P1 exact capture / eager forward, smollm2 L={128 if quick else 512}",
            "value": p1["ratio"],
            "target": "<= 1.15",
            "met": p1["ratio"] <= 1.15,
            "detail": f"eager {p1['eager_s']:.3f} s, capture {p1['capture_s']:.3f} s",
        }
    )
    length = 512 if quick else 2048
    for mode in ("capture", "eager", "output_attentions"):
        mem = peak_memory(mode, length, threads)
        out.append(
            {
                "name": f"P2 peak memory above the loaded model, {mode}, L={length}",
                "value": mem["peak_mib"] - mem["base_mib"],
                "target": "MiB",
                "met": None,
                "detail": f"process peak {mem['peak_mib']:.0f} MiB",
            }
        )
    if long:  # one L=8192 forward takes several minutes on 2 cores
        mem = peak_memory("capture", 8192, threads)
        out.append(
            {
                "name": "P2 peak memory above the loaded model, capture, L=8192",
                "value": mem["peak_mib"] - mem["base_mib"],
                "target": "MiB",
                "met": None,
                "detail": f"process peak {mem['peak_mib']:.0f} MiB",
            }
        )
    out.append(
        {
            "name": "P2 output_attentions at L=8192 (computed: 30 x 9 x L^2 x 4 B)",
            "value": output_attentions_gib(8192) * 1024,
            "target": "MiB",
            "met": None,
            "detail": f"{output_attentions_gib(8192):.1f} GiB",
        }
    )
    return out


def table(results: list[dict]) -> str:
    """The figures as aligned text."""
    lines = [f"{'name':<62} {'value':>10}  {'target':>8}  detail"]
    for r in results:
        lines.append(f"{r['name']:<62} {r['value']:>10.3f}  {r['target']:>8}  {r['detail']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--repeats", type=int, default=5, help="alternating runs (at least 5)")
    parser.add_argument(
        "--cases",
        default=",".join(f"{s}:{n}" for s, n in DEFAULT_CASES),
        help="comma list of MODEL:LENGTH of the default's target",
    )
    parser.add_argument(
        "--profile", metavar="MODEL:LENGTH", help="where one default capture's time goes, instead"
    )
    args = parser.parse_args(argv)
    import torch

    from _machine import machine
    from _targets import verdict

    torch.set_num_threads(args.threads)
    print(f"machine: {machine()}; torch {torch.__version__}, {args.threads} threads", flush=True)
    if args.profile:
        spec, _, length = args.profile.partition(":")
        if not length.isdigit():
            parser.error(f"--profile {args.profile!r}: write MODEL:LENGTH, e.g. smollm2:2048")
        print(profile(spec, int(length)))
        return 0
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases.split(",")]
    rows = default_rows(cases, max(args.repeats, 1))
    print(table(rows))
    return verdict(rows)


if __name__ == "__main__":
    from attncoda import AttncodaError

    try:
        raise SystemExit(main())
    except AttncodaError as error:  # a model or length it cannot read: say so, no traceback
        raise SystemExit(f"capture_bench: {error}") from None
