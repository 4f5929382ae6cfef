"""Train the shipped Bigram-Backcopy checkpoints once and write them as package data.

``python scripts/ship_checkpoints.py`` trains, with :func:`attncoda.training.train.train_tiny`
(one pinned thread), the demo's series and the last checkpoint of every unseen run of
:data:`attncoda.models.shipped.SHIPPED` into a temporary folder, copies each shipped
checkpoint's files (safetensors, config, tokenizer, ``attncoda_train.json``) into
``src/attncoda/models/assets/`` and writes its ``manifest.json``: the recipe and step of each
checkpoint, the sha256 of every file, and the CPU, torch and transformers that trained them.

This is a release tool, run once: training is not bit-identical across CPU vendors
(docs/design.md, "Shipped checkpoints"), so the shipped files, not a retrain, are what the
demo, the reference run and the predictor read. ``--keep DIR`` keeps the trained series.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attncoda.models.gguf import sha256_file  # noqa: E402
from attncoda.models.shipped import ASSETS, MANIFEST, SHIPPED  # noqa: E402
from attncoda.store import cpu_model  # noqa: E402
from attncoda.training.train import SERIES_META, TrainConfig, train_tiny  # noqa: E402

#: The files of a checkpoint folder that ship (train-tiny writes nothing else that loads).
FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "attncoda_train.json",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="train into this folder and keep it")
    args = parser.parse_args(argv)
    import torch
    import transformers

    work = args.keep or Path(tempfile.mkdtemp(prefix="attncoda-ship-"))
    if ASSETS.exists():
        shutil.rmtree(ASSETS)
    entries = []
    for name, run in SHIPPED.items():
        result = train_tiny(work / name, TrainConfig(**run.recipe), threads=1, progress=True)
        for step, folder in zip(result.steps, result.checkpoints, strict=True):
            if step not in run.steps:
                continue
            target = ASSETS / name / f"step{step}"
            target.mkdir(parents=True)
            files = {}
            for file in FILES:
                if (folder / file).is_file():
                    shutil.copy2(folder / file, target / file)
                    files[file] = sha256_file(target / file)
            entries.append({"name": name, "step": step, "recipe": run.recipe, "files": files})
        if run.role == "series":  # the whole series ships: its file marks it finished
            shutil.copy2(work / name / SERIES_META, ASSETS / name / SERIES_META)
    manifest = {
        "format": 1,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "trained_on": {
            "cpu": cpu_model(),
            "machine": platform.machine(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "threads": 1,
        },
        "checkpoints": entries,
    }
    (ASSETS / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    total = sum(p.stat().st_size for p in ASSETS.rglob("*") if p.is_file())
    print(f"wrote {len(entries)} checkpoints, {total / 1e6:.2f} MB, into {ASSETS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
