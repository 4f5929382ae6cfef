"""The one prepared GPU script: ``PYTHONPATH=src python bench/gpu.py [--out FILE]``.

It runs from the source tree on a CUDA machine that has PyTorch (2.4 or later), Triton
(3.6 or later) and transformers already installed, with no network, in at most 8 minutes
on one H100/H200-class GPU:

1. the ``pytest -m gpu`` tests (``tests/capture/kernels/test_gpu.py``: the compiled fused kernel
   against the exact path on random Llama-3-8B-, Gemma-3- and GPT-OSS-shaped layers);
2. the first-use check (:func:`attncoda.capture.kernels.first_use_check`) for every
   configuration the launcher can meet: float32, bfloat16 and float16; head dims 64, 80,
   96, 128 and 256; causal, causal with a window and a soft-cap, causal with a window and a
   learned sink, and bidirectional rows with padding;
3. the speed ratios fused capture / SDPA forward (and two-call SDPA capture / SDPA forward)
   at L = 8192 and 32768, on a random-weight bfloat16 model of 4 layers with Llama-3-8B's
   attention (32 heads, 8 KV heads, head dim 128) and one with Gemma 3's (8 heads, 4 KV
   heads, head dim 256, sliding windows of 1024 keys, one full layer), with the peak GPU
   memory of each;

and writes one JSON summary (``--out``, default ``gpu-summary.json``; also printed last).

Missing small dependencies come in as wheels, fetched on a machine with the network and the
GPU machine's Python and platform (add ``--python-version`` and ``--platform`` otherwise):

    pip download --only-binary=:all: -d wheels array-api-compat pytest hypothesis

(about 3 MiB with their dependencies; 20 MiB with ``numpy`` added, which PyTorch machines
carry), then on the GPU machine ``pip install --no-index --find-links wheels <the missing
ones>``; the script names the missing ones and that line before it starts.

Without a GPU it says so and exits 2, unless ``--cpu-fallback`` is given: then it runs the
same steps on the CPU at short lengths, the Triton kernel under its interpreter (a smoke run
of the same code, not figures).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

#: The target (DESIGN.md section 9): fused capture / SDPA forward at 8192 and 32768, bf16.
TARGET = 1.15
ROOT = Path(__file__).resolve().parent.parent
#: The modules the steps import beyond torch, triton and transformers, by wheel name.
NEEDED = {
    "numpy": "numpy",
    "array_api_compat": "array-api-compat",
    "pytest": "pytest",
    "hypothesis": "hypothesis",
}
#: The first-use check's variants: (label, causal, window, softcap, learned sink).
VARIANTS = (
    ("causal", True, None, None, False),
    ("causal,window,softcap", True, 64, 30.0, False),
    ("causal,window,sink", True, 64, None, True),
    ("padding", False, None, None, False),
)


def missing() -> list[str]:
    """The wheels of :data:`NEEDED` whose modules do not import here."""
    return [wheel for module, wheel in NEEDED.items() if importlib.util.find_spec(module) is None]


def versions() -> dict:
    import torch
    import transformers

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    found = {
        "torch": torch.__version__,
        "triton": triton_version,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
    }
    if torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name(0)
        found["capability"] = "sm_{}{}".format(*torch.cuda.get_device_capability(0))
    return found


def _at_least(version: str | None, wanted: tuple[int, int]) -> bool:
    if version is None:
        return False
    parts = version.split("+")[0].split(".")
    return tuple(int(p) for p in parts[:2] if p.isdigit()) >= wanted


def run_gpu_tests(timeout: float) -> dict:
    """``pytest -m gpu`` in a fresh process: its counts, seconds and last lines."""
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("TRITON_INTERPRET", None)
    command = [
        sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
        str(ROOT / "tests" / "capture" / "kernels" / "test_gpu.py"),
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
        status = done.returncode
    except subprocess.TimeoutExpired:
        tail, status = [f"timed out after {timeout:.0f} s"], None
    return {"returncode": status, "seconds": time.perf_counter() - started, "tail": tail}


def self_checks(device: str, head_dims, dtypes) -> dict:
    """The first-use check of every (dtype, head dim, variant): ``"ok"`` or why not."""
    import torch

    from attncoda.capture.kernels import first_use_check

    found = {}
    for dtype in dtypes:
        for head_dim in head_dims:
            for label, causal, window, softcap, learned in VARIANTS:
                started = time.perf_counter()
                why = first_use_check(
                    torch.device(device),
                    getattr(torch, dtype),
                    head_dim,
                    causal=causal,
                    window=window,
                    softcap=softcap,
                    aux_content=learned,
                    quiet=True,
                )
                found[f"{dtype} d{head_dim} {label}"] = {
                    "status": "ok" if why is None else why,
                    "s": round(time.perf_counter() - started, 2),
                }
                print(f"self-check {dtype} d{head_dim} {label}: {why or 'ok'}", flush=True)
    return found


def shaped_model(kind: str, device: str, small: bool):
    """A random-weight causal LM with the attention of Llama-3-8B (``"llama3-8b"``: 32
    heads, 8 KV heads, head dim 128) or of Gemma 3 (``"gemma3"``: 8 heads, 4 KV heads, head
    dim 256, sliding windows of 1024 keys, the last of 4 layers full); 4 layers, bfloat16
    on CUDA. ``small``: one narrow layer, float32 (the CPU fallback)."""
    import torch
    import transformers

    layers = 1 if small else 4
    if kind == "llama3-8b":
        config = transformers.LlamaConfig(
            hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
            num_hidden_layers=layers, intermediate_size=512 if small else 14336,
            vocab_size=1000 if small else 32000, max_position_embeddings=32768,
            rope_theta=500000.0,
        )  # fmt: skip
    else:
        config = transformers.Gemma3TextConfig(
            hidden_size=2560, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
            num_hidden_layers=layers, intermediate_size=512 if small else 10240,
            vocab_size=1000 if small else 32000, max_position_embeddings=32768,
            sliding_window=1024 if not small else 16,
            layer_types=(["sliding_attention"] * (layers - 1) + ["full_attention"])
            if layers > 1 else ["sliding_attention"],
        )  # fmt: skip
    dtype = torch.float32 if small else torch.bfloat16
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def _timed(call, device: str) -> tuple[float, float | None]:
    """Seconds and peak memory (MiB above the start; CUDA only) of one call."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    call()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    peak = None
    if device == "cuda":
        peak = (torch.cuda.max_memory_allocated() - start) / 2**20
    return seconds, peak


def ratios(model, device: str, length: int, repeats: int) -> dict:
    """Min time and peak memory of the SDPA forward, fused capture and two-call capture,
    interleaved, after a warm-up (the fused kernel's compile and its first-use check)."""
    import torch

    from attncoda.capture import capture

    top = int(model.config.vocab_size)
    ids = torch.randint(3, top, (1, length), generator=torch.Generator().manual_seed(0))
    ids = ids.to(device)

    def forward():
        model.set_attn_implementation("sdpa")
        model(input_ids=ids)

    def fast(kernel):
        return lambda: capture(model, ids, record_rows="none", method="fast", kernel=kernel)

    # On CUDA the default (the fused kernel once its check passes); on the CPU fallback the
    # interpreted kernel, forced (auto is SDPA there).
    fused = "auto" if device == "cuda" else "triton"
    calls = {"sdpa_forward": forward, "fused": fast(fused), "two_call": fast("sdpa")}
    best = {name: [math.inf, None] for name in calls}
    kernel_ran = None
    with torch.inference_mode():
        for name, call in calls.items():
            got = call()  # warm-up
            if name == "fused":
                kernel_ran = got.kernel
        for _ in range(repeats):
            for name, call in calls.items():
                seconds, peak = _timed(call, device)
                if seconds < best[name][0]:
                    best[name] = [seconds, peak]
    model.set_attn_implementation("eager")
    out = {name: {"s": s, "peak_mib": p} for name, (s, p) in best.items()}
    base = out["sdpa_forward"]["s"]
    out["fused_over_sdpa"] = out["fused"]["s"] / base
    out["two_call_over_sdpa"] = out["two_call"]["s"] / base
    out["fused_kernel_ran"] = kernel_ran
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cpu-fallback",
        action="store_true",
        help="without a GPU, run the same steps on the CPU at short lengths",
    )
    parser.add_argument("--out", default="gpu-summary.json", help="the JSON summary")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--lengths", default="8192,32768")
    parser.add_argument("--skip-tests", action="store_true", help="leave out pytest -m gpu")
    args = parser.parse_args(argv)
    absent = missing()
    if absent:
        print(
            "missing: " + ", ".join(absent) + "; install them from wheels fetched elsewhere: "
            "pip install --no-index --find-links wheels " + " ".join(absent)
            + " (bench/gpu.py's docstring has the pip download line)",
            file=sys.stderr,
        )  # fmt: skip
        return 2
    if args.cpu_fallback:
        # The interpreter for the kernel in this process only when there is no GPU: a
        # compiled kernel needs Triton's compiled language library.
        import torch

        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    summary: dict = {"versions": versions(), "target_fused_over_sdpa": TARGET}
    started = time.perf_counter()
    if torch.cuda.is_available():
        device, small = "cuda", False
        lengths = [int(n) for n in args.lengths.split(",")]
        head_dims, dtypes = (64, 80, 96, 128, 256), ("float32", "bfloat16", "float16")
        summary["old_enough"] = {
            "torch>=2.4": _at_least(summary["versions"]["torch"], (2, 4)),
            "triton>=3.6": _at_least(summary["versions"]["triton"], (3, 6)),
        }
    elif args.cpu_fallback:
        device, small, lengths = "cpu", True, [48]
        head_dims, dtypes = (64,), ("float32",)
        args.repeats = 1
        print("no CUDA device: the CPU fallback at short lengths, Triton interpreted "
              "(a smoke run, not figures)")  # fmt: skip
    else:
        print(
            "no CUDA device: bench/gpu.py measures the CUDA code paths; run it where a GPU "
            "is present, or pass --cpu-fallback for a smoke run on the CPU",
            file=sys.stderr,
        )
        return 2
    summary["device"] = summary["versions"].get("gpu", "cpu")
    print(json.dumps(summary["versions"]), flush=True)
    if not args.skip_tests:
        summary["pytest_gpu"] = run_gpu_tests(timeout=240)
        print("pytest -m gpu: " + " | ".join(summary["pytest_gpu"]["tail"][-2:]), flush=True)
    summary["self_check"] = self_checks(device, head_dims, dtypes)
    summary["models"] = {}
    for kind in ("llama3-8b", "gemma3"):
        model = shaped_model(kind, device, small)
        summary["models"][kind] = {}
        for length in lengths:
            got = ratios(model, device, length, args.repeats)
            summary["models"][kind][f"L={length}"] = got
            print(
                f"{kind:>10} L={length:>5}  fused/SDPA {got['fused_over_sdpa']:.2f}  "
                f"two-call/SDPA {got['two_call_over_sdpa']:.2f}  kernel {got['fused_kernel_ran']}"
                f"  peak MiB " + ", ".join(
                    f"{k} {'-' if got[k]['peak_mib'] is None else round(got[k]['peak_mib'])}"
                    for k in ("sdpa_forward", "fused", "two_call")
                ),
                flush=True,
            )  # fmt: skip
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    summary["seconds"] = time.perf_counter() - started
    Path(args.out).write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
