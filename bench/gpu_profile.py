"""Where a fused capture spends its time beyond the kernel, in one run:
``PYTHONPATH=src python bench/gpu_profile.py [--kind llama3-8b] [--length 32768]``.

bench/gpu.py times a fused capture against an SDPA forward of the same random-weight
model; bench/gpu_sweep.py times the kernel alone. On an H200 the kernel alone ran at 1.44x
SDPA's flash kernel at L = 32768 on the Llama-3-8B shape, yet the capture at 1.67x the
whole forward: some 20 ms a layer went elsewhere. This script profiles one SDPA forward and
one fused capture (``torch.profiler``, CPU and CUDA activities, after a warm-up) and prints,
for each:

- the wall time, the GPU's busy time (the union of its kernels' intervals) and so its idle
  time: host work or a synchronisation the GPU waited on;
- the CUDA kernels by total time (the top ``--top``), and the CPU operators by self time;
- the host-to-device and device-to-host copies and synchronisations, by count and time.

It writes both Chrome traces (``--traces DIR``) for a closer look. Without a GPU it runs the
same code on the CPU on one narrow layer at a short length (a smoke run of the script, not
figures).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _gpu_module():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def busy_seconds(events) -> float:
    """The union of the device kernels' [start, end) intervals, in seconds."""
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in events
        if getattr(e, "device_type", None) is not None and "CUDA" in str(e.device_type)
    )
    total, end = 0.0, -1.0
    for start, stop in spans:
        if start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total * 1e-6  # microseconds


def profiled(call, device: str, trace: Path | None) -> dict:
    """One profiled call after a warm-up: wall seconds, device busy seconds, the top
    kernels and operators, and the copies and synchronisations."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    call()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=activities, record_shapes=False) as prof:
        t0 = time.perf_counter()
        call()
        if device == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    events = prof.events()
    averages = prof.key_averages()
    # torch >= 2.4 names it device_time_total (cuda_time_total before).
    names = ("device_time_total", "cuda_time_total") if device == "cuda" else ("cpu_time_total",)
    device_time = next(n for n in (*names, "cpu_time_total") if hasattr(averages[0], n))
    kernels = sorted(averages, key=lambda a: getattr(a, device_time, 0.0), reverse=True)
    host = sorted(averages, key=lambda a: a.self_cpu_time_total, reverse=True)
    marks = ("Memcpy", "copy_", "synchron", "item", "to(", "nonzero", "pin")
    moves = [a for a in averages if any(k in a.key for k in marks)]
    return {
        "wall_s": wall,
        "busy_s": busy_seconds(events) if device == "cuda" else None,
        "kernels": [(a.key[:90], a.count, getattr(a, device_time, 0.0) * 1e-3) for a in kernels],
        "host": [(a.key[:90], a.count, a.self_cpu_time_total * 1e-3) for a in host],
        "moves": [(a.key[:90], a.count, a.self_cpu_time_total * 1e-3) for a in moves],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", default="llama3-8b", choices=("llama3-8b", "gemma3"))
    parser.add_argument("--length", type=int, default=32768)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--traces", help="a folder for the two Chrome traces")
    parser.add_argument("--out", default="gpu-profile.json", help="the JSON summary")
    args = parser.parse_args(argv)
    import torch

    gpu = _gpu_module()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    small = device == "cpu"
    length = args.length if not small else 64
    model = gpu.shaped_model(args.kind, device, small)
    calls = gpu.speed_calls(model, device, length, "auto" if device == "cuda" else "cpp")
    calls.pop("two_call")
    calls.pop("sdpa_all_logits")
    traces = Path(args.traces) if args.traces else None
    if traces is not None:
        traces.mkdir(parents=True, exist_ok=True)
    found = {}
    with torch.inference_mode():
        for name, call in calls.items():
            trace = traces / f"{name}.json" if traces is not None else None
            found[name] = profiled(call, device, trace)
    model.set_attn_implementation("eager")
    Path(args.out).write_text(json.dumps(found, indent=1))
    for name, got in found.items():
        busy = got["busy_s"]
        idle = (
            ""
            if busy is None
            else (f", GPU busy {busy * 1e3:.1f} ms, idle {(got['wall_s'] - busy) * 1e3:.1f} ms")
        )
        print(f"== {name}: wall {got['wall_s'] * 1e3:.1f} ms{idle}")
        for title, rows in (("kernels", got["kernels"]), ("host ops (self)", got["host"]),
                            ("copies and syncs", got["moves"])):  # fmt: skip
            print(f"  {title}:")
            for key, count, ms in rows[: args.top]:
                print(f"    {ms:9.2f} ms  x{count:<5d} {key}")
    fused, base = found["fused"]["wall_s"], found["sdpa"]["wall_s"]
    print(f"SUMMARY profile: {args.kind} L={length} on {device}: fused / SDPA {fused / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
