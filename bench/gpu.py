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
    then every table of the CUDA run compared column by column with the CPU's
    (:func:`compare_tables`: numeric columns within :data:`RTOL` and :data:`ATOL`, the rest
    exactly, nulls where nulls are), with the largest difference of each table and the
    tables that differ;
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
    memory of each.

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

#: The target (DESIGN.md section 9): fused capture / SDPA forward at 8192 and 32768, bf16.
TARGET = 1.15
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
#: series and two shipped checkpoints at the demo scale (30 units); prune runs apart, with
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
#: The tolerance of a numeric cell of a CUDA table against the CPU's: |cuda - cpu| <= ATOL +
#: RTOL * |cpu|. float32 rounds each operation to 2**-24 relative; a row statistic over
#: n <= 128 keys of values up to ~10 (nats, logits) carries up to n * 2**-24 * 10 ~ 1e-4 in
#: the worst case and ~sqrt(n) * 2**-24 * 10 ~ 1e-5 typically, and the tables' means over
#: rows and heads shrink it further; so 1e-5 of the value plus 1e-5 absolute (nats). A
#: ratio whose denominator is itself rounding (a share of a change of 1e-7 nats) amplifies
#: it and shows up here as a difference: the summary names such columns.
RTOL, ATOL = 1e-5, 1e-5
#: Ratio columns, by their numerator and denominator columns (numerators in a tuple where a
#: column is the lower or upper of two ratios): a ratio is held to the difference that its
#: numerator's and denominator's own differences make, to first order,
#: ``(|d num| + |ratio| |d den|) / |den|``, on top of the tolerance. The two columns are
#: themselves held to the tolerance. A share of a change near its rounding bound (docs/
#: design.md, "Verdicts and ratios within rounding") moves by much more than its parts.
RATIOS = {
    "sink_share": (("delta_sink",), "delta_entropy"),
    "sink_share_low": (("delta_sink_sink_first", "delta_sink_content_first"), "delta_entropy"),
    "sink_share_high": (("delta_sink_sink_first", "delta_sink_content_first"), "delta_entropy"),
}
#: Columns held to a rounding bound that their table states (docs/design.md, "Verdicts and
#: ratios within rounding"), by the column of the bound: the larger of the two devices'
#: bounds is added to the tolerance. A triplet within its rounding of the tie edge can be
#: a tie on one device and decided on the other; flips counts how many can be.
ROUNDED = {
    "flips": "n_fragile",
    "n_ties": "n_fragile",
    "flip_rate": "rate_rounding",
    "ci_low": "ci_rounding",
    "ci_high": "ci_rounding",
}
#: The bound columns themselves: each device's own bound, compared for their nulls only.
BOUNDS = frozenset(ROUNDED.values())
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
    """The calls the speed part times, on one random document of ``length`` tokens:
    ``sdpa_forward`` (the model's own forward with SDPA), ``fused`` (a fast capture with
    the kernel ``fused``) and ``two_call`` (a fast capture with the ``sdpa`` kernel)."""
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

    return {"sdpa_forward": forward, "fused": fast(fused), "two_call": fast("sdpa")}


def ratios(model, device: str, length: int, repeats: int) -> dict:
    """Min time and peak memory of the SDPA forward, fused capture and two-call capture,
    interleaved, after a warm-up (the fused kernel's compile and its first-use check)."""
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
    base = out["sdpa_forward"]["s"]
    out["fused_over_sdpa"] = out["fused"]["s"] / base
    out["two_call_over_sdpa"] = out["two_call"]["s"] / base
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


def _propagated(cpu, cuda, ratio, parts):
    """Per row, how far a ratio column may move given its parts' moves (:data:`RATIOS`)."""
    import numpy as np

    def both(column):
        one = cpu[column].to_numpy(np.float64, na_value=np.nan)
        return one, cuda[column].to_numpy(np.float64, na_value=np.nan)

    den, den_gpu = both(parts[1])
    moves = [np.abs(b - a) for a, b in (both(c) for c in parts[0])]
    with np.errstate(divide="ignore", invalid="ignore"):
        found = (np.max(moves, axis=0) + np.abs(ratio) * np.abs(den_gpu - den)) / np.abs(den)
    return np.nan_to_num(found, nan=0.0, posinf=np.inf)


def compare_tables(cpu, cuda, rtol: float = RTOL, atol: float = ATOL) -> dict:
    """One table of the CUDA run against the CPU's, column by column.

    Numeric columns (not bool) agree where both are null, both the same infinity, or
    ``|cuda - cpu| <= atol + rtol * |cpu|`` (a ratio column of :data:`RATIOS` plus what its
    parts' own differences make of it, a column of :data:`ROUNDED` plus the larger of its
    stated bounds; a bound of :data:`BOUNDS` only where it is null); every other column
    agrees exactly (nulls where nulls are). Returns ``equal``,
    the largest absolute difference and its column, the cells outside the tolerance, and a
    reason where the tables cannot be compared cell by cell (rows or columns differ).
    """
    import numpy as np
    import pandas as pd

    if list(cpu.columns) != list(cuda.columns):
        return {
            "equal": False,
            "why": f"columns differ: {sorted(set(cpu.columns) ^ set(cuda.columns))}",
        }
    if len(cpu) != len(cuda):
        return {"equal": False, "why": f"{len(cpu)} rows on the CPU, {len(cuda)} on CUDA"}
    worst, where, outside, differing, examples = 0.0, None, 0, [], []
    for column in cpu.columns:
        a, b = cpu[column].reset_index(drop=True), cuda[column].reset_index(drop=True)
        numeric = pd.api.types.is_numeric_dtype(a) and not pd.api.types.is_bool_dtype(a)
        if numeric and pd.api.types.is_numeric_dtype(b):
            x, y = a.to_numpy(np.float64, na_value=np.nan), b.to_numpy(np.float64, na_value=np.nan)
            nulls = np.isnan(x) != np.isnan(y)
            # An infinity must be the same infinity; finite values agree within the tolerance.
            finite = np.isfinite(x) & np.isfinite(y)
            gap = np.abs(y[finite] - x[finite])
            infinite = ~finite & ~np.isnan(x) & ~np.isnan(y) & (x != y)
            allowed = atol + rtol * np.abs(x[finite])
            parts = RATIOS.get(column)
            if parts is not None and all(c in cpu.columns for c in (*parts[0], parts[1])):
                allowed = allowed + _propagated(cpu, cuda, x, parts)[finite]
            bound = ROUNDED.get(column)
            if bound in cpu.columns and bound in cuda.columns:
                stated = np.fmax(
                    cpu[bound].to_numpy(np.float64, na_value=np.nan),
                    cuda[bound].to_numpy(np.float64, na_value=np.nan),
                )
                allowed = allowed + np.nan_to_num(stated, nan=0.0)[finite]
            if column in BOUNDS:
                allowed = np.full_like(allowed, np.inf)
            off = nulls | infinite
            off[np.flatnonzero(finite)[gap > allowed]] = True
            bad = int(off.sum())
            if gap.size and float(gap.max()) > worst:
                worst, where = float(gap.max()), column
        else:
            real = ~a.isna() & ~b.isna()
            off = ((a.isna() != b.isna()) | (real & (a.astype(str) != b.astype(str)))).to_numpy()
            bad = int(off.sum())
        if bad:
            outside += bad
            differing.append(column)
            # The first cells outside, for the summary: the row and both values.
            for row in np.flatnonzero(off)[:3]:
                examples.append({"column": column, "row": int(row), "cpu": str(a[row]),
                                 "cuda": str(b[row])})  # fmt: skip
    return {
        "equal": outside == 0,
        "max_abs_diff": worst,
        "column": where,
        "cells_outside": outside,
        "columns_differing": differing,
        "examples": examples,
    }


def compare_runs(cpu_folder: Path, cuda_folder: Path) -> dict:
    """Every ``tables/*.parquet`` of two run folders by :func:`compare_tables`, by name."""
    import pandas as pd

    names = sorted(
        {p.name for f in (cpu_folder, cuda_folder) for p in (f / "tables").glob("*.parquet")}
    )
    found = {}
    for name in names:
        paths = [f / "tables" / name for f in (cpu_folder, cuda_folder)]
        missing = [side for side, p in zip(("cpu", "cuda"), paths, strict=True) if not p.is_file()]
        if missing:
            found[name] = {"equal": False, "why": f"no table on {' and '.join(missing)}"}
            continue
        found[name] = compare_tables(*(pd.read_parquet(p) for p in paths))
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
    """The experiments part: both halves of :func:`start_experiments` awaited, then every
    table of the device's runs compared with the CPU's."""
    started = time.perf_counter()
    label, runs, folder = (started_halves[k] for k in ("label", "runs", "folder"))
    on_device = started_halves["halves"][label].result()
    on_cpu = started_halves["halves"]["cpu"].result()
    tables = {}
    for name in runs:
        for table, got in compare_runs(folder / "cpu" / name, folder / label / name).items():
            tables[f"{name}/{table.removesuffix('.parquet')}"] = got
    return {
        "folder": str(folder),
        "tolerance": {"rtol": RTOL, "atol": ATOL},
        "label": label,
        label: on_device,
        "cpu": on_cpu,
        "tables": tables,
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
    tables = found["tables"]
    differ = {k: v for k, v in tables.items() if not v["equal"]}
    worst = ", ".join(
        f"{k} {v.get('max_abs_diff', 0):.1e}" + (f" ({v['column']})" if v.get("column") else "")
        for k, v in tables.items()
    )
    shown = "; ".join(
        f"{k}: {v.get('why') or ', '.join(v['columns_differing'])}" for k, v in differ.items()
    )
    return (
        f"{label} vs cpu: {ran}; {len(tables)} tables at |diff| <= {ATOL:g} + {RTOL:g}|cpu|: "
        f"{len(tables) - len(differ)} equal, {len(differ)} differ"
        + (f" [{shown}]" if shown else "") + f"; largest |diff| per table: {worst}"
    )  # fmt: skip


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
            peaks = [got[k]["peak_mib"] for k in ("fused", "sdpa_forward")]
            peak = "-" if None in peaks or not peaks[1] else f"{peaks[0] / peaks[1]:.2f}"
            parts.append(
                f"{kind} {length} fused/SDPA {got['fused_over_sdpa']:.2f} "
                f"(two-call {got['two_call_over_sdpa']:.2f}, peak fused/SDPA {peak}, "
                f"{got['fused_kernel_ran']})"
            )
    return "; ".join(parts) + f"; target fused/SDPA <= {TARGET}"


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
                    f"two-call/SDPA {got['two_call_over_sdpa']:.2f}  "
                    f"kernel {got['fused_kernel_ran']}"
                    f"  peak MiB " + ", ".join(
                        f"{k} {'-' if got[k]['peak_mib'] is None else round(got[k]['peak_mib'])}"
                        for k in ("sdpa_forward", "fused", "two_call")
                    ),
                    flush=True,
                )  # fmt: skip
            del model
            if device == "cuda":
                torch.cuda.empty_cache()
        _report(summary, "speed", _speed_line(summary["models"]))
    summary["seconds"] = time.perf_counter() - started
    _report(summary, "total", f"{', '.join(parts)} in {summary['seconds']:.0f} s (budget 480 s)")
    Path(args.out).write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
