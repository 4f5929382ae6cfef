"""The fused kernel compiled for every NVIDIA architecture, without a GPU:
``python bench/gpu_compile.py [--json] [--jobs N]``.

For each architecture of :data:`attncoda.capture.kernels.ARCHITECTURES` (sm_80, sm_86,
sm_89, sm_90), each input dtype (float32, bfloat16, float16), each head dim (64, 80, 96,
128, 256) and each kernel variant, it takes the launch configuration the launcher would
choose (:func:`attncoda.capture.kernels.launch_config`), compiles the kernel for that
target with Triton on the launcher's own arguments (``bench/_offline.py``:
``GPUTarget("cuda", cc, 32)``; the ptxas inside the triton wheel, run again with ``-v`` for
registers and spills) and checks it: shared memory within the
architecture's opt-in limit per block, and no spilled register. A configuration the table
refuses is listed as ``refused: <why>`` without a compile.

The variants are the compile-time switches of the kernel:

- ``causal``: causal rows (padding changes no compiled code: each document's run of keys
  is a runtime argument);
- ``causal,window``: a sliding window (Gemma 3, Mistral), in the plain entries;
- ``causal,window,softcap,sink,learned,sparse``: a sliding window, Gemma 2's soft-cap, a
  learned sink as a content key and one in the sink set, and sink keys after the prefix,
  all at once (the most code one kernel carries), in the heavy entries
  (:attr:`attncoda.capture.kernels._configs.Variant.heavy`);
- ``padding``: bidirectional rows with padding (BERT-style encoders).

Every head dim is compiled on its own: 80 and 96 take the head-dim-128 blocks but not its
code, since the kernel specialises on whether the head dim fills its block (``EVEN_D``:
true at 128, false at 80 and 96, which load and store masked columns).

``--json`` prints one JSON object a line with the keys ``arch``, ``dtype``, ``head_dim``,
``flags``, ``block_m``, ``block_n``, ``num_warps``, ``num_stages``, ``shared_bytes``,
``registers``, ``spill_bytes``, ``seconds`` and ``status`` (``"ok"``, ``"refused: <why>"``,
or ``"failed: <why>"`` for a configuration over its limits or one that does not compile);
otherwise a Markdown table. The exit status is 1 when any record failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import time

#: The kernel variants compiled (see the module docstring).
VARIANTS = ("causal", "causal,window", "causal,window,softcap,sink,learned,sparse", "padding")


def _compile(job: tuple[str, str, int, str]) -> dict:
    """One record: compile ``(arch, dtype, head_dim, flags)`` with its table entry."""
    from _offline import compile_offline, llama_launch
    from attncoda.capture.kernels import ARCHITECTURES, Refused, launch_config
    from attncoda.capture.kernels._configs import Variant

    arch, dtype, head_dim, flags = job
    variant = Variant.of(flags.split(","))
    config = launch_config(arch, dtype, head_dim, variant.heavy)
    record = {"arch": arch, "dtype": dtype, "head_dim": head_dim, "flags": flags}
    if isinstance(config, Refused):
        record.update(dict.fromkeys(("block_m", "block_n", "num_warps", "num_stages")))
        record.update(shared_bytes=None, registers=None, spill_bytes=None, seconds=0.0)
        record["status"] = f"refused: {config.why}"
        return record
    record.update(
        block_m=config.block_m,
        block_n=config.block_n,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    try:
        found = compile_offline(arch, llama_launch(dtype, head_dim, variant, config))
    except Exception as err:  # a compile error is a result here, not a crash
        record.update(shared_bytes=None, registers=None, spill_bytes=None, seconds=0.0)
        record["status"] = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
        return record
    record.update(
        shared_bytes=found["shared_bytes"],
        registers=found["registers"],
        spill_bytes=found["spill_bytes"],
        seconds=round(found["seconds"], 2),
    )
    problems = []
    if found["shared_bytes"] > ARCHITECTURES[arch]:
        problems.append(f"shared memory {found['shared_bytes']} B > {ARCHITECTURES[arch]} B")
    if found["spill_bytes"]:
        problems.append(f"{found['spill_bytes']} B of spills")
    record["status"] = "failed: " + "; ".join(problems) if problems else "ok"
    return record


def jobs(archs, dtypes, head_dims, variants) -> list[tuple[str, str, int, str]]:
    """Every (arch, dtype, head dim, flags) of the matrix."""
    return [
        (arch, dtype, head_dim, flags)
        for arch in archs
        for dtype in dtypes
        for head_dim in head_dims
        for flags in variants
    ]


def run(matrix, workers: int, emit) -> list[dict]:
    """Compile ``matrix`` on ``workers`` processes; ``emit`` each record as it is done."""
    records: dict[tuple, dict] = {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(_compile, job): job for job in matrix}
        for future in concurrent.futures.as_completed(futures):
            job = futures[future]
            records[job] = future.result()
            emit(records[job])
    return [records[job] for job in matrix]


def table(records: list[dict]) -> str:
    """The records as a Markdown table (one line a record)."""
    head = (
        "| arch | dtype | head dim | flags | block m×n | warps | stages | shared B | "
        "registers | spill B | s | status |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in records:
        blocks = "-" if r["block_m"] is None else f"{r['block_m']}×{r['block_n']}"

        def cell(value):
            return "-" if value is None else f"{value:,}" if isinstance(value, int) else value

        lines.append(
            f"| {r['arch']} | {r['dtype']} | {r['head_dim']} | {r['flags']} | {blocks} | "
            f"{cell(r['num_warps'])} | {cell(r['num_stages'])} | {cell(r['shared_bytes'])} | "
            f"{cell(r['registers'])} | {cell(r['spill_bytes'])} | {r['seconds']:.1f} | "
            f"{r['status']} |"
        )
    return "\n".join(lines)


def condensed(records: list[dict]) -> str:
    """One Markdown line per (arch, dtype, head dim): its launch configuration and, per
    variant, shared bytes / registers / spill bytes (bench/RESULTS.md's table)."""
    groups: dict[tuple, dict[str, dict]] = {}
    for r in records:
        groups.setdefault((r["arch"], r["dtype"], r["head_dim"]), {})[r["flags"]] = r
    variants = sorted({r["flags"] for r in records}, key=lambda f: (f != "causal", f))
    lines = [
        "| arch | dtype | head dim | blocks m×n, warps, stages | "
        + " | ".join(f"{v}: shared B / regs / spill B" for v in variants)
        + " | status |",
        "|---|---|---|---|" + "---|" * len(variants) + "---|",
    ]
    for (arch, dtype, head_dim), by in groups.items():
        first = next(iter(by.values()))
        statuses = sorted({r["status"] for r in by.values()})
        if first["block_m"] is None:
            config = "-"
        else:
            config = (
                f"{first['block_m']}×{first['block_n']}, {first['num_warps']}, "
                f"{first['num_stages']}"
            )
        cells = []
        for v in variants:
            r = by.get(v)
            if r is None or r["shared_bytes"] is None:
                cells.append("-")
            else:
                cells.append(f"{r['shared_bytes']:,} / {r['registers']} / {r['spill_bytes']}")
        lines.append(
            f"| {arch} | {dtype} | {head_dim} | {config} | "
            + " | ".join(cells)
            + f" | {'; '.join(statuses)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from attncoda.capture.kernels import ARCHITECTURES, DTYPES, HEAD_DIMS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object a line")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--arch", default=",".join(ARCHITECTURES), help="a comma list")
    parser.add_argument("--dtype", default=",".join(DTYPES), help="a comma list")
    parser.add_argument("--head-dim", default=",".join(map(str, HEAD_DIMS)), help="a comma list")
    parser.add_argument("--flags", default=";".join(VARIANTS), help="a ';' list of variants")
    parser.add_argument(
        "--table", metavar="FILE", help="print the condensed table of an earlier --json run"
    )
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table) as lines:
            print(condensed([json.loads(line) for line in lines if line.strip()]))
        return 0
    # Triton 3.9 warns when its FMA-contraction default is left implicit; the launcher
    # keeps contraction on (the bound counts it), and so does this compile.
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    matrix = jobs(
        args.arch.split(","),
        args.dtype.split(","),
        [int(d) for d in args.head_dim.split(",")],
        args.flags.split(";"),
    )
    started = time.perf_counter()

    def emit(record):
        if args.json:
            print(json.dumps(record), flush=True)

    records = run(matrix, max(1, args.jobs), emit)
    if not args.json:
        print(table(records))
    failed = [r for r in records if r["status"].startswith("failed")]
    print(
        f"{len(records)} configurations in {time.perf_counter() - started:.0f} s: "
        f"{sum(r['status'] == 'ok' for r in records)} ok, "
        f"{sum(r['status'].startswith('refused') for r in records)} refused, "
        f"{len(failed)} failed",
        file=sys.stderr,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
