"""Training gives the same bits on the machine at hand, whatever the caller's kernels and
threads (docs/design.md, "Shipped checkpoints").

Training is not bit-identical across CPU vendors (an Intel Xeon and an AMD EPYC part from
step 1, measured), so no test compares trained weights with a hash committed from another
machine. What holds on any x86-64 CPU: the pinned worker runs the same op sequence whatever
its caller's process runs, so two trainings of one recipe on this machine, one in this
process and one in a subprocess whose ATen capability, MKL branch and thread count differ,
give the same bits. The data pipeline does no CPU-dispatched float arithmetic, so its bits
are compared with committed constants.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from attncoda.data.tasks import BigramBackcopy  # noqa: E402
from attncoda.training.train import TrainConfig, train_tiny  # noqa: E402

#: The short recipe: the task's defaults (2 layers x 4 heads, hidden 64, 64-token sequences,
#: batches of 32, lr 1e-2), seed 0, 4 steps: checkpoints 0, 1, 2 and 4.
RECIPE = {"task": "bigram-backcopy", "seed": 0, "steps": 4}
#: sha256 of the task's transition matrix and of the first training batch of seed 0: the
#: data pipeline, apart from the model.
DATA_SHA256 = (
    "c179b21390382ff92268124f00f6199ce0407ac12fa408dc3de18e606c91b00a",
    "4d0995ec78b1d4ececd14564fdafc776a0f67d20f1cc00583c139e73e287b386",
)

# Run in a fresh interpreter under the caller's environment: train the recipe at the given
# thread counts, print the capability this caller runs and the hashes per thread count (the
# digest of weights_sha256 read off the saved file, which test_identity equates with it:
# the caller then needs no transformers import).
_CALLER = """
import hashlib, json, sys, tempfile
from pathlib import Path
import torch
from safetensors.torch import load_file
from attncoda.training.train import TrainConfig, train_tiny

def digest(folder):  # weights_sha256's documented digest, read off the saved file
    stored, h = load_file(folder / "model.safetensors"), hashlib.sha256()
    weights = {k.replace("embed_out.", "lm_head."): v for k, v in stored.items()}
    for name in sorted(weights):
        t = weights[name].contiguous()
        h.update(f"{name}\\0{t.dtype}\\0{tuple(t.shape)}\\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return "sha256:" + h.hexdigest()

recipe, threads = json.loads(sys.argv[1]), json.loads(sys.argv[2])
torch.ones(2, 2) @ torch.ones(2, 2)
out = {"capability": torch.backends.cpu.get_cpu_capability(), "hashes": {}}
for n in threads:
    result = train_tiny(Path(tempfile.mkdtemp()) / "s", TrainConfig(**recipe), threads=n,
                        progress=False)
    out["hashes"][n] = {s: digest(c) for s, c in zip(result.steps, result.checkpoints)}
print(json.dumps(out))
"""


def _hashes(steps, checkpoints) -> dict[int, str]:
    from transformers import AutoModelForCausalLM

    from attncoda.training.identity import weights_sha256

    return {
        int(s): weights_sha256(AutoModelForCausalLM.from_pretrained(c))
        for s, c in zip(steps, checkpoints, strict=True)
    }


def test_the_data_pipeline_gives_the_committed_bits() -> None:
    task = BigramBackcopy()
    batch = task.sample(32, np.random.default_rng(0))
    got = (
        hashlib.sha256(task.transition.tobytes()).hexdigest(),
        hashlib.sha256(batch.astype("<i8").tobytes()).hexdigest(),
    )
    assert got == DATA_SHA256


@pytest.fixture(scope="module")
def here(tmp_path_factory) -> dict[int, str]:
    """The recipe's checkpoint hashes, trained in this process (its default kernels)."""
    result = train_tiny(tmp_path_factory.mktemp("s") / "s", TrainConfig(**RECIPE), progress=False)
    return _hashes(result.steps, result.checkpoints)


def test_training_changes_the_weights_at_every_checkpoint(here) -> None:
    # the comparison below is between distinct states, not four copies of the initialisation
    assert sorted(here) == [0, 1, 2, 4]
    assert len(set(here.values())) == 4


@pytest.mark.parametrize(
    ("capability", "cbwr"),
    [("default", "COMPATIBLE"), ("avx2", "AVX2"), ("avx512", "AUTO")],
)
def test_same_bits_whatever_the_callers_kernels_and_threads(
    here, capability: str, cbwr: str
) -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {
        **os.environ,
        "ATEN_CPU_CAPABILITY": capability,
        "MKL_CBWR": cbwr,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _CALLER, json.dumps(RECIPE), json.dumps([1, 2])],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if got["capability"] != capability.upper():
        pytest.skip(f"this CPU has no {capability} kernels (it runs {got['capability']})")
    # the same machine, the same pinned op sequence: the same bits, at 1 and 2 threads
    for n in ("1", "2"):
        assert {int(s): h for s, h in got["hashes"][n].items()} == here, n
