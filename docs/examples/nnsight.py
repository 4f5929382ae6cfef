"""nnsight: a trace with an intervention, recorded, then profiled.

Run it as ``python docs/examples/nnsight.py``. It wraps SmolLM2 (the embedded model) in an
nnsight ``LanguageModel``, runs a trace that zeroes the attention output of one layer inside
``attncoda.recording``, and prints the per-layer sink mass of ``ac.profile(rec.capture())``:
the statistics describe the attention the intervened model computed.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

# This file's name is the package's: run as a script, its folder would shadow the package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402
from nnsight import LanguageModel  # noqa: E402

import attncoda as ac  # noqa: E402

TEXT = "The lighthouse keeper climbed the spiral stairs each evening while the fog rolled in."
LAYER = 2


def main() -> None:
    model, tokenizer, _ = ac.load_model("smollm2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nnsight 0.8 names TransformersModel its successor
        lm = LanguageModel(model, tokenizer=tokenizer)
    ids = tokenizer(TEXT, return_tensors="pt")["input_ids"]
    with ac.recording(lm) as rec, torch.no_grad():
        with lm.trace(ids):
            lm.model.layers[LAYER].self_attn.output[0][:] = 0.0
    result = ac.profile(rec.capture())
    heads = result.tables["profile_heads"]
    print(f"attention output of layer {LAYER} zeroed in the trace")
    for layer, mass in heads.groupby("layer")["sink_mass"].mean().items():
        print(f"layer {int(layer):2d} sink mass {mass:.3f}")


if __name__ == "__main__":
    main()
