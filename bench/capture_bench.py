"""Capture benchmarks on the embedded SmolLM2-135M (30 layers x 9 heads, 3 KV heads).

- P1: time of ``capture`` (statistics of every row, no rows recorded) divided by the time of
  an eager forward without ``output_attentions`` that asks, as a capture does, for the last
  position's logits only (``bench/_floors.py``), at L = 512. Target <= 1.15.
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
        capture(model, ids, mask, record_rows="none")
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

    from _floors import floors
    from attncoda.capture import capture
    from attncoda.models.load import load_model

    model, _, _ = load_model("smollm2")
    ids = torch.randint(100, 40000, (1, length), generator=torch.Generator().manual_seed(0))
    eager = floors(model, ids, ("eager",))["eager"]
    times: dict[str, list[float]] = {"eager": [], "capture": []}
    calls = {"eager": eager, "capture": lambda: capture(model, ids, record_rows="none")}
    with torch.inference_mode():
        for call in calls.values():
            call()
        for _ in range(repeats):
            for name, call in calls.items():
                t0 = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t0)
    best = {name: min(values) for name, values in times.items()}
    return {
        "eager_s": best["eager"],
        "capture_s": best["capture"],
        "ratio": best["capture"] / best["eager"],
    }


def output_attentions_gib(length: int, layers: int = 30, heads: int = 9) -> float:
    """What ``output_attentions`` holds at once: every layer's float32 probabilities."""
    return layers * heads * length * length * 4 / 2**30


def run(quick: bool = False, repeats: int = 3, threads: int = 1, long: bool = False) -> list[dict]:
    """Every capture figure, as dicts (also printed by :func:`table`)."""
    out = []
    p1 = p1_ratio(128 if quick else 512, repeats=1 if quick else repeats)
    out.append(
        {
            "name": f"P1 capture / eager forward, smollm2 L={128 if quick else 512}",
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
