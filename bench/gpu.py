"""The whole GPU acceptance: ``PYTHONPATH=src python bench/gpu.py [--parts ...] [--out FILE]``.

It runs from the source tree on a CUDA machine that has PyTorch (2.4 or later), Triton
(3.6 or later), transformers, accelerate, safetensors, pandas, pyarrow, scipy, scikit-learn,
matplotlib, pytest and hypothesis already installed, with no network, in at most 8 minutes
on one H100/H200-class GPU with 16 CPU cores. Four parts (``--parts``, default all), each
ending in one line ``SUMMARY <part>: ...`` and a section of the JSON summary:

``tests``
    the ``pytest -m gpu`` tests: ``tests/capture/kernels/test_gpu.py`` (the compiled fused
    kernel against the exact path on random Llama-3-8B-, Gemma-3- and GPT-OSS-shaped layers)
    and ``tests/test_devices.py`` (capture, both methods and the eager-outputs read, prune's
    evaluation and a recorded ``generate()`` of a tiny model on CUDA against the CPU);
``experiments``
    every experiment end to end through the CLI on the shipped checkpoints, once with
    ``--device cuda`` and once with ``--device cpu`` (the two at the same time, in processes
    of their own): ``reproduce`` on the ``bigram-backcopy`` series and two shipped
    checkpoints, and ``prune`` with ``--ks 4`` (the demo's ks exceed these models' 8 heads);
    then the CUDA run's tables held to the CPU's by :func:`attncoda.compare` (each column by
    its rule: floats to float32 rounding, counts and rates to their stated bounds, the
    bounds themselves too, shares through their parts, MDS coordinates through their
    distances), with the largest difference of each run in units of its allowance and the
    cells that differ;
``checks``
    the first-use check (:func:`attncoda.capture.kernels.first_use_check`) for every
    configuration the launcher can meet: float32, bfloat16 and float16; head dims 64, 80,
    96, 128 and 256; causal, causal with a window and a soft-cap, causal with a window and a
    learned sink among the content keys, causal with a learned sink in the sink set, causal
    with a sink key after the prefix, and bidirectional rows with padding (in a pool of
    processes beside the tests);
``speed``
    the speed ratios fused capture / SDPA forward (and two-call SDPA capture / SDPA forward)
    at L = 8192 and 32768, on a random-weight bfloat16 model of 4 layers with Llama-3-8B's
    attention (32 heads, 8 KV heads, head dim 128) and one with Gemma 3's (8 heads, 4 KV
    heads, head dim 256, sliding windows of 1024 keys, one full layer), with the peak GPU
    memory of each. The floor is like for like (``bench/_floors.py``): the SDPA forward asks
    for the last position's logits only, as a capture does; the plain call with every
    position's logits is timed beside it. On Gemma 3's windowed layers SDPA does the whole
    masked work (it skips no block the window hides), where the fused kernel skips them.

The script exits 0 only when every part it ran passed: ``pytest -m gpu`` green, every
first-use check ok, both halves of every run exited 0 and hold the same evidence, and every
speed ratio and peak memory within its target (on a GPU; the CPU fallback's speed is a smoke
run). Otherwise it prints ``FAILED: ...`` naming each miss and exits 1.

Both halves of ``experiments`` start first and run beside ``tests`` and ``checks`` (which
time nothing); ``speed`` runs last, alone. The summary lines come in the order tests,
checks, experiments, speed. The JSON summary goes to ``--out`` (default
``gpu-summary.json``) and is printed last.

Missing small dependencies come in as wheels, fetched on a machine with the network and the
GPU machine's Python and platform (add ``--python-version`` and ``--platform`` otherwise):

    pip download --only-binary=:all: -d wheels array-api-compat

then on the GPU machine ``pip install --no-index --find-links wheels <the missing ones>``;
the script names the missing ones and that line before it starts.

Without a GPU it says so and exits 2, unless ``--cpu-fallback`` is given: then it runs the
same parts on the CPU at short lengths, the Triton kernel under its interpreter, and
``experiments`` as one small run made twice on the CPU (a smoke run of the same code, not
figures).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The bench folder's helpers (_floors) import as modules of their own, however this script
# is loaded (run as a script, or by a test from its file).
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: The target (docs/design.md, "Performance"): fused capture / SDPA forward (like for like)
#: at 8192 and 32768, bf16.
TARGET = 1.15
#: And its peak memory at most the floor's plus 15%.
PEAK_TARGET = 1.15
ROOT = Path(__file__).resolve().parent.parent
#: The modules the parts import beyond torch, triton and transformers, by wheel name.
NEEDED = {
    "numpy": "numpy",
    "array_api_compat": "array-api-compat",
    "pytest": "pytest",
    "hypothesis": "hypothesis",
    "pandas": "pandas",
    "pyarrow": "pyarrow",
    "scipy": "scipy",
    "sklearn": "scikit-learn",
    "matplotlib": "matplotlib",
    "accelerate": "accelerate",
    "safetensors": "safetensors",
}
#: The parts, in the order they report.
PARTS = ("tests", "experiments", "checks", "speed")
#: The experiments part's runs: the CLI's arguments (``--device`` and ``--out`` are added),
#: each made once per device. reproduce runs every experiment but prune on the shipped
#: series and two shipped checkpoints at the demo scale (28 units); prune runs apart, with
#: ks that these models' 8 heads allow.
RUNS = {
    "reproduce": (
        "reproduce", "--series", "bigram-backcopy",
        "--models", "bigram-backcopy@step2000,bigram-backcopy-seed2@step1000",
        "--experiments", "profile,flips,cluster,safety,predictor,collapse,sink_rate",
        "--workers", "4",
    ),
    "prune": ("prune", "bigram-backcopy@step2000", "--ks", "4"),
}  # fmt: skip
#: The CPU fallback's run: the same code path on one checkpoint, made twice on the CPU.
SMOKE_RUNS = {
    "reproduce": (
        "reproduce", "--models", "bigram-backcopy@step2000", "--experiments", "profile",
        "--workers", "1",
    ),
}  # fmt: skip
#: The CLI as the console script runs it.
CLI = "import sys; from attncoda.cli import main; sys.exit(main(sys.argv[1:]))"
#: The first-use check's variants: (label, causal, window, softcap, learned sink).
VARIANTS = (
    ("causal", True, None, None, False, False, False),
    ("causal,window,softcap", True, 64, 30.0, False, False, False),
    ("causal,window,sink", True, 64, None, True, False, False),
    ("causal,learned", True, None, None, False, True, False),
    ("causal,sparse", True, None, None, False, False, True),
    ("padding", False, None, None, False, False, False),
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
    # The source tree first, then whatever the caller's PYTHONPATH carries (wheels).
    carried = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), carried]))}
    env.pop("TRITON_INTERPRET", None)
    command = [
        sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
        str(ROOT / "tests" / "capture" / "kernels" / "test_gpu.py"),
        str(ROOT / "tests" / "test_devices.py"),
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


def _check_one(job) -> tuple[str, str, float]:
    """One first-use check, in a worker process: ``(label, "ok" or why not, seconds)``."""
    import torch

    from attncoda.capture.kernels import first_use_check

    device, dtype, head_dim, (label, causal, window, softcap, content, learned, sparse) = job
    started = time.perf_counter()
    why = first_use_check(
        torch.device(device), getattr(torch, dtype), head_dim, causal=causal, window=window,
        softcap=softcap, aux_content=content, aux_sink=learned, sparse=sparse, quiet=True,
    )  # fmt: skip
    return f"{dtype} d{head_dim} {label}", why or "ok", time.perf_counter() - started


def self_checks(device: str, head_dims, dtypes, workers: int = 1) -> dict:
    """The first-use check of every (dtype, head dim, variant): ``"ok"`` or why not, in
    ``workers`` processes (each configuration is its own compile; Triton's compiler is
    single-threaded and its cache is shared on disk)."""
    import multiprocessing

    jobs = [
        (device, dtype, d, variant) for dtype in dtypes for d in head_dims for variant in VARIANTS
    ]
    if workers > 1:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            done = list(pool.map(_check_one, jobs))
    else:
        done = [_check_one(job) for job in jobs]
    found = {}
    for label, status, seconds in done:
        found[label] = {"status": status, "s": round(seconds, 2)}
        print(f"self-check {label}: {status}", flush=True)
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


def speed_calls(model, device: str, length: int, fused: str) -> dict:
    """The calls the speed part times, on one random document of ``length`` tokens: the
    floors of ``bench/_floors.py`` (``sdpa``: the model's own SDPA forward with the last
    position's logits, as a capture asks; ``sdpa_all_logits``: the plain call), ``fused``
    (a fast capture with the kernel ``fused``) and ``two_call`` (with the ``sdpa``
    kernel)."""
    import torch

    from _floors import floors
    from attncoda.capture import capture

    top = int(model.config.vocab_size)
    ids = torch.randint(3, top, (1, length), generator=torch.Generator().manual_seed(0))
    ids = ids.to(device)

    def fast(kernel):
        return lambda: capture(model, ids, record_rows="none", method="fast", kernel=kernel)

    calls = floors(model, ids, ("sdpa", "sdpa_all_logits"))
    return {**calls, "fused": fast(fused), "two_call": fast("sdpa")}


def ratios(model, device: str, length: int, repeats: int) -> dict:
    """Min time and peak memory of the SDPA floors, fused capture and two-call capture,
    interleaved, after a warm-up (the fused kernel's compile and its first-use check); the
    ratios against the like-for-like floor, and the fused one against the plain call."""
    import torch

    # On CUDA the default (the fused kernel once its check passes); on the CPU fallback the
    # interpreted kernel, forced (auto is SDPA there).
    calls = speed_calls(model, device, length, "auto" if device == "cuda" else "triton")
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
    base = out["sdpa"]["s"]
    out["fused_over_sdpa"] = out["fused"]["s"] / base
    out["two_call_over_sdpa"] = out["two_call"]["s"] / base
    out["fused_over_sdpa_all_logits"] = out["fused"]["s"] / out["sdpa_all_logits"]["s"]
    peaks = [out[k]["peak_mib"] for k in ("fused", "sdpa")]
    out["fused_peak_over_sdpa"] = None if None in peaks or not peaks[1] else peaks[0] / peaks[1]
    out["fused_kernel_ran"] = kernel_ran
    return out


def _env() -> dict:
    """The environment of a child process: the source tree first, no Triton interpreter."""
    paths = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    env.pop("TRITON_INTERPRET", None)
    return env


def run_half(device: str, runs: dict, folder: Path, timeout: float) -> dict:
    """Every run of :data:`RUNS` (or :data:`SMOKE_RUNS`) through the CLI with ``--device
    device``, one after the other, each into ``folder/<run>``: exit status, seconds, the
    manifest's ``device`` and the last lines of each."""
    found = {}
    for name, argv in runs.items():
        out = folder / name
        command = [sys.executable, "-c", CLI, *argv, "--device", device, "--out", str(out)]
        started = time.perf_counter()
        try:
            done = subprocess.run(
                command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout
            )
            status, text = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            status, text = None, f"timed out after {timeout:.0f} s"
        manifest = out / "manifest.json"
        used = json.loads(manifest.read_text()).get("device") if manifest.is_file() else None
        found[name] = {
            "returncode": status,
            "seconds": round(time.perf_counter() - started, 1),
            "device": used,
            "tail": [line[-300:] for line in text.strip().splitlines()[-4:]],
        }
        print(f"experiments {device} {name}: exit {status} in {found[name]['seconds']} s "
              f"on {used}", flush=True)  # fmt: skip
    return found


def start_experiments(device: str, runs: dict, folder: Path, timeout: float):
    """The experiments part's two halves, started in threads of their own: the runs on
    ``device`` into ``folder/<label>`` (``cpu_again`` for the CPU fallback's second CPU run)
    and on the CPU into ``folder/cpu``. :func:`experiments` waits for them."""
    label = "cpu_again" if device == "cpu" else device
    pool = concurrent.futures.ThreadPoolExecutor(2)
    halves = {
        label: pool.submit(run_half, device, runs, folder / label, timeout),
        "cpu": pool.submit(run_half, "cpu", runs, folder / "cpu", timeout),
    }
    pool.shutdown(wait=False)
    return {"label": label, "runs": runs, "folder": folder, "halves": halves}


def experiments(started_halves: dict) -> dict:
    """The experiments part: both halves of :func:`start_experiments` awaited, then each run
    on the device held to the CPU's by :func:`attncoda.compare`."""
    from attncoda import compare

    started = time.perf_counter()
    label, runs, folder = (started_halves[k] for k in ("label", "runs", "folder"))
    on_device = started_halves["halves"][label].result()
    on_cpu = started_halves["halves"]["cpu"].result()
    compared = {}
    for name in runs:
        try:
            found = compare(folder / label / name, folder / "cpu" / name)
        except Exception as error:  # a run that left no folder: its exit status says why
            compared[name] = {"same": False, "lines": [f"not compared: {error}"]}
            continue
        compared[name] = {
            "same": found.same,
            "tables": len(found.tables),
            "worst": max((t.worst for t in found.tables), default=0.0),
            "lines": found.lines(),
        }
    return {
        "folder": str(folder),
        "label": label,
        label: on_device,
        "cpu": on_cpu,
        "compared": compared,
        "waited_s": round(time.perf_counter() - started, 1),
    }


def _experiments_line(found: dict) -> str:
    label = found["label"]
    runs, other = found[label], found["cpu"]
    ran = ", ".join(
        f"{name} exit {got['returncode']}/{other[name]['returncode']} "
        f"({got['seconds']:.0f}/{other[name]['seconds']:.0f} s, on {got['device']})"
        for name, got in runs.items()
    )
    held = "; ".join(f"{name}: {got['lines'][0]}" for name, got in found["compared"].items())
    cells = [line for got in found["compared"].values() for line in got["lines"][1:6]]
    return f"{label} vs cpu: {ran}; {held}" + (f" [{' | '.join(cells)}]" if cells else "")


def _tests_line(found: dict) -> str:
    last = next((line for line in reversed(found["tail"]) if line.strip()), "no output")
    return (
        f"pytest -m gpu: {last.strip('= ')} (exit {found['returncode']}, {found['seconds']:.0f} s)"
    )


def _checks_line(found: dict) -> str:
    bad = {k: v["status"] for k, v in found.items() if v["status"] != "ok"}
    shown = "; ".join(f"{k}: {str(v)[:80]}" for k, v in list(bad.items())[:6])
    more = f" and {len(bad) - 6} more" if len(bad) > 6 else ""
    return f"{len(found) - len(bad)}/{len(found)} first-use checks ok" + (
        f"; not ok: {shown}{more}" if bad else ""
    )


def _speed_line(found: dict) -> str:
    parts = []
    for kind, by_length in found.items():
        for length, got in by_length.items():
            peak = got["fused_peak_over_sdpa"]
            parts.append(
                f"{kind} {length} fused/SDPA {got['fused_over_sdpa']:.2f} "
                f"(against the plain call with every logit "
                f"{got['fused_over_sdpa_all_logits']:.2f}; two-call "
                f"{got['two_call_over_sdpa']:.2f}, peak fused/SDPA "
                f"{'-' if peak is None else f'{peak:.2f}'}, {got['fused_kernel_ran']})"
            )
    windowed = (
        "; Gemma 3's SDPA floor does the whole masked work of its windowed layers"
        if "gemma3" in found
        else ""
    )
    return "; ".join(parts) + f"; target fused/SDPA <= {TARGET}, peak <= {PEAK_TARGET}{windowed}"


def failures(summary: dict, figures: bool = True) -> list[str]:
    """What the run's parts missed, each in a few words: a failed ``pytest -m gpu``, a
    first-use check not ok, a run that did not exit 0 or that does not hold the CPU's
    evidence, and (``figures``: on a GPU, not the CPU fallback's smoke run) a speed ratio
    or a peak memory over its target. Empty when every part that ran passed."""
    missed = []
    tests = summary.get("pytest_gpu")
    if tests is not None and tests["returncode"] != 0:
        missed.append(f"tests (pytest -m gpu exit {tests['returncode']})")
    bad = [k for k, v in summary.get("self_check", {}).items() if v["status"] != "ok"]
    if bad:
        missed.append(f"checks ({len(bad)} not ok: {', '.join(bad[:3])})")
    found = summary.get("experiments")
    if found is not None:
        label = found["label"]
        for side in (label, "cpu"):
            for name, got in found[side].items():
                if got["returncode"] != 0:
                    missed.append(f"experiments ({name} on {side} exit {got['returncode']})")
        for name, got in found["compared"].items():
            if not got["same"]:
                missed.append(f"experiments ({name}: {got['lines'][0]})")
    for kind, by_length in summary.get("models", {}).items() if figures else ():
        for length, got in by_length.items():
            if got["fused_over_sdpa"] > TARGET:
                missed.append(
                    f"speed ({kind} {length} fused/SDPA {got['fused_over_sdpa']:.2f} > {TARGET})"
                )
            peak = got["fused_peak_over_sdpa"]
            if peak is not None and peak > PEAK_TARGET:
                missed.append(f"speed ({kind} {length} peak fused/SDPA {peak:.2f} > {PEAK_TARGET})")
    return missed


def _report(summary: dict, part: str, line: str) -> None:
    summary.setdefault("summary_lines", {})[part] = line
    print(f"SUMMARY {part}: {line}", flush=True)


def _parts(text: str) -> tuple[str, ...]:
    asked = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in asked if p not in PARTS]
    if unknown or not asked:
        raise SystemExit(f"bench/gpu.py: unknown part(s) {unknown or text!r}: use {PARTS}")
    return asked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cpu-fallback",
        action="store_true",
        help="without a GPU, run the same parts on the CPU at short lengths (a smoke run)",
    )
    parser.add_argument("--out", default="gpu-summary.json", help="the JSON summary")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma list of {','.join(PARTS)} (default: all)"
    )
    parser.add_argument(
        "--runs", help="where the experiments part's run folders go (default: a new temporary one)"
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--lengths", default="8192,32768")
    parser.add_argument("--skip-tests", action="store_true", help="leave out pytest -m gpu")
    args = parser.parse_args(argv)
    parts = tuple(p for p in _parts(args.parts) if not (args.skip_tests and p == "tests"))
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

    summary: dict = {"versions": versions(), "target_fused_over_sdpa": TARGET, "parts": parts}
    started = time.perf_counter()
    runs = RUNS
    if torch.cuda.is_available():
        device, small = "cuda", False
        lengths = [int(n) for n in args.lengths.split(",")]
        head_dims, dtypes = (64, 80, 96, 128, 256), ("float32", "bfloat16", "float16")
        summary["old_enough"] = {
            "torch>=2.4": _at_least(summary["versions"]["torch"], (2, 4)),
            "triton>=3.6": _at_least(summary["versions"]["triton"], (3, 6)),
        }
    elif args.cpu_fallback:
        device, small, lengths, runs = "cpu", True, [48], SMOKE_RUNS
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
    halves = None
    if "experiments" in parts:
        # Both halves start first and run beside the tests and the checks (which measure no
        # time); the speed part runs after them, alone.
        folder = Path(args.runs or tempfile.mkdtemp(prefix="attncoda-gpu-runs-")).resolve()
        halves = start_experiments(device, runs, folder, 300)
    # The tests (a pytest process) and the first-use checks (a pool of processes) run
    # side by side too; neither measures time.
    with concurrent.futures.ThreadPoolExecutor(1) as beside:
        tests = beside.submit(run_gpu_tests, 240) if "tests" in parts else None
        if "checks" in parts:
            workers = 12 if device == "cuda" else 1
            summary["self_check"] = self_checks(device, head_dims, dtypes, workers)
        if tests is not None:
            summary["pytest_gpu"] = tests.result()
            _report(summary, "tests", _tests_line(summary["pytest_gpu"]))
        if "checks" in parts:
            _report(summary, "checks", _checks_line(summary["self_check"]))
    if halves is not None:
        summary["experiments"] = experiments(halves)
        _report(summary, "experiments", _experiments_line(summary["experiments"]))
    if "speed" in parts:
        summary["models"] = {}
        for kind in ("llama3-8b", "gemma3"):
            model = shaped_model(kind, device, small)
            summary["models"][kind] = {}
            for length in lengths:
                got = ratios(model, device, length, args.repeats)
                summary["models"][kind][f"L={length}"] = got
                print(
                    f"{kind:>10} L={length:>5}  fused/SDPA {got['fused_over_sdpa']:.2f}  "
                    f"(/SDPA with every logit {got['fused_over_sdpa_all_logits']:.2f})  "
                    f"two-call/SDPA {got['two_call_over_sdpa']:.2f}  "
                    f"kernel {got['fused_kernel_ran']}"
                    f"  peak MiB " + ", ".join(
                        f"{k} {'-' if got[k]['peak_mib'] is None else round(got[k]['peak_mib'])}"
                        for k in ("sdpa", "sdpa_all_logits", "fused", "two_call")
                    ),
                    flush=True,
                )  # fmt: skip
            del model
            if device == "cuda":
                torch.cuda.empty_cache()
        _report(summary, "speed", _speed_line(summary["models"]))
    summary["seconds"] = time.perf_counter() - started
    _report(summary, "total", f"{', '.join(parts)} in {summary['seconds']:.0f} s (budget 480 s)")
    summary["failures"] = failures(summary, figures=device == "cuda")
    Path(args.out).write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps(summary, default=str))
    if summary["failures"]:
        print("FAILED: " + "; ".join(summary["failures"]), flush=True)
        return 1
    print(f"passed: {', '.join(parts)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
