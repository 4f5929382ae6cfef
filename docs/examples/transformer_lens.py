"""TransformerLens: record a TransformerBridge's own passes, a head zeroed by a hook included.

Run it as ``python docs/examples/transformer_lens.py``. It wraps SmolLM2 (the embedded
model) in a TransformerLens 4 ``TransformerBridge``, runs ``run_with_hooks`` with a hook that
zeroes one head's output inside ``attncoda.recording``, and prints the flip rate of "which
head is closer" verdicts between the keep and drop conventions for the intervened model.
No attention cache is materialised: each layer's statistics are taken from its scores as
the bridge computes them.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

# This file's name is the package's: run as a script, its folder would shadow the package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402
from transformer_lens.model_bridge import TransformerBridge  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

import attncoda as ac  # noqa: E402

TEXTS = [
    "The lighthouse keeper climbed the spiral stairs each evening while the fog rolled in.",
    "By morning the storm had passed and the boats slipped out past the breakwater.",
]
LAYER, HEAD = 3, 5


def zero_head(z, hook):
    # hook_z is (batch, pos, head, d_head): the head's output before the output projection.
    z[:, :, HEAD] = 0.0
    return z


def main() -> None:
    model, tokenizer, _ = ac.load_model("smollm2")
    folder = tempfile.mkdtemp()  # the bridge reads the config and tokenizer from a folder
    model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge = TransformerBridge.boot_transformers(
            folder, hf_model=model, tokenizer=AutoTokenizer.from_pretrained(folder)
        ).eval()
    hooks = [(f"blocks.{LAYER}.attn.hook_z", zero_head)]
    with ac.recording(bridge, record_rows="all") as rec, torch.no_grad():
        for text in TEXTS:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            bridge.run_with_hooks(ids, fwd_hooks=hooks)
    cap = rec.capture()
    print(f"recorded {cap.n_docs} passes, {cap.n_layers} layers x {cap.n_heads} heads")
    later = cap.sink_mass[:, LAYER + 1 :].mean()
    print(f"head {LAYER}.{HEAD} zeroed; later layers' sink mass {later:.3f}")
    table = ac.flips(cap).table
    for _, row in table.iterrows():
        print(f"{row['metric']:12s} flip rate {100 * row['flip_rate']:.1f}%")


if __name__ == "__main__":
    main()
