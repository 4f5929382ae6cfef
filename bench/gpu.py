"""The CUDA code paths in one command of under 5 minutes: ``python bench/gpu.py``.

On a CUDA device it runs three models there: SmolLM2, Gemma 3 and a random-weight model
with Llama-3-8B's attention shape (32 query heads, 8 KV heads, head dim 128; 4 layers,
bfloat16). For one window at L = 2048, 8192 and 32768 it prints:

- Triton-fused capture / SDPA forward (``method="fast", kernel="triton"``);
- SDPA-two-call capture / SDPA forward (``kernel="sdpa"``);
- exact capture / eager forward, at the lengths where eager's scores fit in memory;
- the peak GPU memory of each (``torch.cuda.max_memory_allocated`` above the model), min
  time of ``--repeats`` interleaved repeats after a warm-up;
- each fast kernel's largest error against the exact path at L = 1024 (sink mass, H, H(q)
  on rows with s <= 0.99 and above);
- head distances (JSD, keep) of SmolLM2's recorded rows on the GPU against numpy.

Without a GPU it says so and exits 2, unless ``--cpu-fallback`` is given: then it runs
the same steps on the CPU at short lengths, the Triton kernel under its interpreter
(``TRITON_INTERPRET=1``, set here before triton is imported): a smoke run of the same code,
not figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

#: The targets (DESIGN.md section 9): Triton-fused capture / SDPA forward at 8192 and 32768.
TARGET = 1.15


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


def _calls(model, ids) -> dict:
    """The five forwards the ratios compare, by name."""
    from attncoda.capture import capture

    def forward(impl):
        model.set_attn_implementation(impl)
        model(input_ids=ids)

    def fast(kernel):
        return capture(model, ids, record_rows="none", method="fast", kernel=kernel)

    return {
        "sdpa": lambda: forward("sdpa"),
        "eager": lambda: forward("eager"),
        "exact": lambda: capture(model, ids, record_rows="none"),
        "fast_sdpa": lambda: fast("sdpa"),
        "fast_triton": lambda: fast("triton"),
    }


def _ids(model, length: int, seed: int):
    import torch

    top = min(40000, int(model.config.vocab_size))
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(100, top, (1, length), generator=generator)


def eager_fits(model, length: int, device: str) -> bool:
    """Whether eager's float32 scores, softmax and a copy of one layer fit in free memory."""
    import torch

    heads = model.config.num_attention_heads
    need = 3 * 4 * heads * length * length
    if device != "cuda":
        return length <= 1024
    free, _ = torch.cuda.mem_get_info()
    return need < 0.8 * free


def ratios(model, device: str, length: int, pairs: tuple[str, ...], repeats: int) -> dict:
    import torch

    calls = _calls(model, _ids(model, length, 0).to(device))
    best: dict[str, list[float]] = {name: [float("inf"), float("nan")] for name in pairs}
    with torch.inference_mode():
        for name in pairs:
            calls[name]()  # warm-up (and the Triton kernel's compilation)
        for _ in range(repeats):
            for name in pairs:
                seconds, peak = _timed(calls[name], device)
                if seconds < best[name][0]:
                    best[name] = [seconds, peak]
    model.set_attn_implementation("eager")
    # No peak off CUDA: null in the printed JSON, never NaN (which JSON does not have).
    return {
        name: {"s": s, "peak_mib": None if math.isnan(p) else p} for name, (s, p) in best.items()
    }


def fast_errors(model, device: str, length: int) -> dict:
    import numpy as np
    import torch

    from attncoda.capture import capture

    ids = _ids(model, length, 1).to(device)
    with torch.inference_mode():
        exact = capture(model, ids, record_rows=8)
        fast = {
            kernel: capture(model, ids, record_rows=8, method="fast", kernel=kernel)
            for kernel in ("sdpa", "triton")
        }
    keep = np.broadcast_to(exact.query_mask[:, None, None, :], exact.sink_mass.shape)
    content = exact.has_content
    low = content & (exact.sink_mass <= 0.99)
    high = content & (exact.sink_mass > 0.99)

    def err(got, name, where):
        """The largest difference over the rows ``where`` selects; None when it selects none
        (a short window may have no row with s > 0.99)."""
        diff = np.abs(getattr(exact, name) - getattr(got, name))[where]
        return float(diff.max()) if diff.size else None

    found: dict = {
        kernel: {
            "sink_mass": err(got, "sink_mass", keep),
            "entropy": err(got, "entropy", keep),
            "content_entropy_s<=0.99": err(got, "content_entropy", low),
            "content_entropy_s>0.99": err(got, "content_entropy", high),
        }
        for kernel, got in fast.items()
    }
    found["rows"] = exact
    return found


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


def llama3_shaped(device: str, small: bool):
    """A random-weight causal LM with Llama-3-8B's attention (32 query heads, 8 KV heads,
    head dim 128, rope theta 5e5) and 4 layers, bfloat16 on CUDA; on the CPU one layer, a
    narrow MLP and vocabulary, float32 (the attention shape is the same)."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        num_hidden_layers=1 if small else 4,
        intermediate_size=512 if small else 14336,
        vocab_size=1000 if small else 32000,
        max_position_embeddings=32768,
        rope_theta=500000.0,
    )
    dtype = torch.float32 if small else torch.bfloat16
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def _line(name: str, length: int, got: dict) -> str:
    parts = [f"{name:>14} L={length:>5}"]
    for label, key in (("fused/SDPA", "fast_triton"), ("two-call/SDPA", "fast_sdpa")):
        if key in got:
            parts.append(f"{label} {got[key]['s'] / got['sdpa']['s']:.2f}")
    if "exact" in got:
        parts.append(f"exact/eager {got['exact']['s'] / got['eager']['s']:.2f}")
    peaks = ", ".join(
        f"{k} {'-' if v['peak_mib'] is None else format(v['peak_mib'], '.0f')}"
        for k, v in got.items()
    )
    return "  ".join(parts) + "  peak MiB " + peaks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cpu-fallback",
        action="store_true",
        help="without a GPU, run the same steps on the CPU at short lengths",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--models",
        default="smollm2,gemma3,llama3-8b-shape",
        help="a comma list of smollm2, gemma3 and llama3-8b-shape",
    )
    args = parser.parse_args(argv)
    if args.cpu_fallback:
        # Triton decorates its language library when first imported: choose the
        # interpreter before anything imports it (torch may, when it builds a model).
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    from attncoda.models.load import load_model

    if torch.cuda.is_available():
        device = "cuda"
        lengths, check_length = (2048, 8192, 32768), 1024
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    elif args.cpu_fallback:
        device = "cpu"
        lengths, check_length = (48,), 40
        args.repeats = 1
        print(
            "no CUDA device: the CPU fallback at short lengths, Triton interpreted "
            "(a smoke run, not figures)"
        )
    else:
        print(
            "no CUDA device: bench/gpu.py measures the CUDA code paths; run it where a GPU "
            "is present, or pass --cpu-fallback for a smoke run on the CPU",
            file=sys.stderr,
        )
        return 2
    started = time.perf_counter()
    figures: dict = {"device": device, "target_fused_over_sdpa": TARGET}
    for name in args.models.split(","):
        if name == "llama3-8b-shape":
            model = llama3_shaped(device, small=device != "cuda")
        else:
            model, _, _ = load_model(name, device=device)
        figures[name] = {}
        for length in lengths:
            pairs: tuple[str, ...] = ("sdpa", "fast_triton", "fast_sdpa")
            if eager_fits(model, length, device):
                pairs += ("eager", "exact")
            got = ratios(model, device, length, pairs, args.repeats)
            figures[name][f"L={length}"] = got
            print(_line(name, length, got), flush=True)
        errors = fast_errors(model, device, check_length)
        rows = errors.pop("rows")
        figures[name]["fast_vs_exact"] = errors
        print(f"{name:>14} fast vs exact at L={check_length}: " + json.dumps(errors), flush=True)
        if name == "smollm2":
            figures["head_distances"] = head_distance_check(rows, device)
            print(f"head_distances jsd keep on {device}: " + json.dumps(figures["head_distances"]))
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    figures["seconds"] = time.perf_counter() - started
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
