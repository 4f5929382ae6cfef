"""The CUDA code paths in one command of under 5 minutes: ``python bench/gpu.py``.

On a CUDA device it loads SmolLM2 there and prints, for one window at each length:

- fast capture / SDPA forward (L = 2048, 8192) and exact capture / eager forward
  (L = 512, 2048), min of 3 interleaved repeats (after a warm-up);
- the peak GPU memory of each (``torch.cuda.max_memory_allocated`` above the model);
- the fast path's largest error against the exact path at L = 1024 (sink mass, entropy,
  content entropy on rows with s <= 0.99 and above), which checks the CUDA kernel's
  log-sum-exp;
- head distances (JSD, keep) of the recorded rows on the GPU against numpy.

Without a GPU it says so and exits 2, unless ``--cpu-fallback`` is given: then it runs
the same steps on the CPU at short lengths (a smoke run of the same code).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _timed(call, device: str) -> tuple[float, float]:
    """Seconds and peak memory (MiB above the start; CUDA only, else NaN) of one call."""
    import torch

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
    _sync(device)
    t0 = time.perf_counter()
    call()
    _sync(device)
    seconds = time.perf_counter() - t0
    peak = float("nan")
    if device == "cuda":
        peak = (torch.cuda.max_memory_allocated() - start) / 2**20
    return seconds, peak


def ratios(model, device: str, length: int, pairs: tuple[str, ...], repeats: int) -> dict:
    import torch

    import long_bench  # beside this script

    ids = torch.randint(100, 40000, (1, length), generator=torch.Generator().manual_seed(0))
    ids = ids.to(device)

    calls = long_bench.capture_calls(model, ids)
    best: dict[str, list[float]] = {name: [float("inf"), float("nan")] for name in pairs}
    with torch.inference_mode():
        for name in pairs:
            calls[name]()  # warm-up
        for _ in range(repeats):
            for name in pairs:
                seconds, peak = _timed(calls[name], device)
                if seconds < best[name][0]:
                    best[name] = [seconds, peak]
    model.set_attn_implementation("eager")
    return {name: {"s": s, "peak_mib": p} for name, (s, p) in best.items()}


def fast_errors(model, device: str, length: int) -> dict:
    import numpy as np
    import torch

    from attncoda.capture.capture import capture

    ids = torch.randint(100, 40000, (1, length), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        exact = capture(model, ids.to(device), record_rows=8)
        fast = capture(model, ids.to(device), record_rows=8, method="fast")
    keep = np.broadcast_to(exact.query_mask[:, None, None, :], exact.sink_mass.shape)
    content = exact.has_content
    low = content & (exact.sink_mass <= 0.99)
    high = content & (exact.sink_mass > 0.99)

    def err(name, where):
        """The largest difference over the rows ``where`` selects; None when it selects none
        (a short window may have no row with s > 0.99)."""
        diff = np.abs(getattr(exact, name) - getattr(fast, name))[where]
        return float(diff.max()) if diff.size else None

    return {
        "sink_mass": err("sink_mass", keep),
        "entropy": err("entropy", keep),
        "content_entropy_s<=0.99": err("content_entropy", low),
        "content_entropy_s>0.99": err("content_entropy", high),
        "rows": exact,
    }


def head_distance_check(capture_result, device: str) -> dict:
    import numpy as np
    import torch

    from attncoda import head_distances

    rows = capture_result.rows[0]
    logp = rows.reshape(-1, rows.shape[2], rows.shape[3])
    mask = np.isfinite(rows[0, 0])
    ref = head_distances(logp, "jsd", convention="keep", key_mask=mask)
    t0 = time.perf_counter()
    got = head_distances(
        torch.as_tensor(logp, device=device),
        "jsd",
        convention="keep",
        key_mask=torch.as_tensor(mask, device=device),
    )
    _sync(device)
    seconds = time.perf_counter() - t0
    got = got.cpu().numpy()
    return {"max_rel_err": float(np.abs(got - ref).max() / np.abs(ref).max()), "s": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cpu-fallback",
        action="store_true",
        help="without a GPU, run the same steps on the CPU at short lengths",
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    import torch

    from attncoda.models.load import load_model

    if torch.cuda.is_available():
        device = "cuda"
        fast_lengths, exact_lengths, check_length = (2048, 8192), (512, 2048), 1024
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    elif args.cpu_fallback:
        device = "cpu"
        fast_lengths, exact_lengths, check_length = (256,), (128,), 128
        args.repeats = 1
        print("no CUDA device: the CPU fallback at short lengths (a smoke run, not figures)")
    else:
        print(
            "no CUDA device: bench/gpu.py measures the CUDA code paths; run it where a GPU "
            "is present, or pass --cpu-fallback for a smoke run on the CPU",
            file=sys.stderr,
        )
        return 2
    started = time.perf_counter()
    model, _, _ = load_model("smollm2", device=device)
    figures: dict = {"device": device}
    for length in sorted(set(fast_lengths) | set(exact_lengths)):
        pairs = ()
        if length in fast_lengths:
            pairs += ("sdpa", "fast")
        if length in exact_lengths:
            pairs += ("eager", "exact")
        got = ratios(model, device, length, pairs, args.repeats)
        figures[f"L={length}"] = got
        line = [f"L={length:>5}"]
        if "fast" in got:
            line.append(f"fast/SDPA {got['fast']['s'] / got['sdpa']['s']:.2f}")
        if "exact" in got:
            line.append(f"exact/eager {got['exact']['s'] / got['eager']['s']:.2f}")
        line.append(
            "peak MiB " + ", ".join(f"{name} {v['peak_mib']:.0f}" for name, v in got.items())
        )
        print("  ".join(line), flush=True)
    errors = fast_errors(model, device, check_length)
    rows = errors.pop("rows")
    figures["fast_vs_exact"] = errors
    print(f"fast vs exact at L={check_length}: " + json.dumps(errors))
    figures["head_distances"] = head_distance_check(rows, device)
    print(f"head_distances jsd keep on {device}: " + json.dumps(figures["head_distances"]))
    figures["seconds"] = time.perf_counter() - started
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
