"""Tests of :func:`attncoda.training.train.train_tiny`: the tiny model trained from scratch."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from safetensors.torch import load_file  # noqa: E402

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.data.corpus import Document, corpus_hash, embedded  # noqa: E402
from attncoda.data.tasks import BOS_TOKEN  # noqa: E402
from attncoda.training.checkpoints import (  # noqa: E402
    CHECKPOINT_META,
    SERIES_META,
    TrainResult,
    checkpoint_steps,
    list_checkpoints,
)
from attncoda.training.config import TrainConfig  # noqa: E402
from attncoda.training.train import train_tiny  # noqa: E402

# Small enough for a fast test, large enough for the loss to fall in 20 steps.
FAST = {"size": "tiny", "window": 64, "batch_size": 8}
STEPS = 20


def _train(
    out: Path, *, threads: int = 1, overwrite: bool = False, progress: bool = False, **fields
) -> TrainResult:
    """``train_tiny`` of ``TrainConfig(**fields)``."""
    config = TrainConfig(**fields)
    return train_tiny(out, config, threads=threads, overwrite=overwrite, progress=progress)


@pytest.fixture(scope="module")
def series_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("series")


@pytest.fixture(scope="module")
def run_a(series_root: Path) -> TrainResult:
    return _train(series_root / "a", steps=STEPS, seed=0, **FAST)


@pytest.fixture(scope="module")
def run_b(series_root: Path) -> TrainResult:
    return _train(series_root / "b", steps=STEPS, seed=0, **FAST)


@pytest.fixture(scope="module")
def run_other_seed(series_root: Path) -> TrainResult:
    return _train(series_root / "c", steps=STEPS, seed=1, **FAST)


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name


# --------------------------------------------------------------------------------- schedule


def test_checkpoint_steps_is_pythia_schedule() -> None:
    assert checkpoint_steps(20) == [0, 1, 2, 4, 8, 16, 20]
    assert checkpoint_steps(1) == [0, 1]
    assert checkpoint_steps(16) == [0, 1, 2, 4, 8, 16]
    assert checkpoint_steps(1000) == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]
    assert checkpoint_steps(3500)[-5:] == [512, 1000, 2000, 3000, 3500]


def test_series_folders_follow_the_schedule(run_a: TrainResult, series_root: Path) -> None:
    assert run_a.steps == (0, 1, 2, 4, 8, 16, 20)
    assert run_a.checkpoints == tuple(series_root / "a" / f"step{n}" for n in run_a.steps)
    assert [step for step, _ in list_checkpoints(run_a.out_dir)] == list(run_a.steps)
    names = sorted(p.name for p in run_a.out_dir.iterdir())
    assert names == sorted([SERIES_META, *(f"step{n}" for n in run_a.steps)])
    assert run_a.trained
    assert len(run_a.train_loss) == len(run_a.val_loss) == len(run_a.steps)
    assert run_a.seconds > 0
    assert run_a.steps_per_second == pytest.approx(STEPS / run_a.seconds)


# ----------------------------------------------------------------------------- determinism


def test_same_seed_gives_identical_checkpoints(run_a: TrainResult, run_b: TrainResult) -> None:
    assert run_a.steps == run_b.steps
    for a, b in zip(run_a.checkpoints, run_b.checkpoints, strict=True):
        _assert_same_weights(a, b)
        assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    assert run_a.train_loss == run_b.train_loss
    assert run_a.val_loss == run_b.val_loss
    assert run_a.first_token_attention == run_b.first_token_attention


def test_other_seed_gives_other_weights(run_a: TrainResult, run_other_seed: TrainResult) -> None:
    for a, c in (
        (run_a.checkpoints[0], run_other_seed.checkpoints[0]),
        (run_a.checkpoints[-1], run_other_seed.checkpoints[-1]),
    ):
        wa, wc = _weights(a), _weights(c)
        assert wa.keys() == wc.keys()
        assert any(not torch.equal(wa[k], wc[k]) for k in wa if wa[k].ndim == 2)
    assert run_a.train_loss[-1] != run_other_seed.train_loss[-1]


def test_caller_torch_state_is_restored(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _train(tmp_path / "s", steps=1, **FAST)
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled() == deterministic


# ------------------------------------------------------------------------- the checkpoints


def test_checkpoint_loads_offline_and_learned(run_a: TrainResult) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    first, last = run_a.checkpoints[0], run_a.checkpoints[-1]
    tokenizer = AutoTokenizer.from_pretrained(last)
    assert tokenizer.bos_token == BOS_TOKEN
    ids = tokenizer("The river ran under the old bridge.")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.bos_token_id not in ids[1:]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "The river ran under the old bridge."

    text = embedded()[0].text  # a training document: the held-out ones are at the end
    batch = tokenizer(text, return_tensors="pt")["input_ids"][:, :64]
    losses = []
    for folder in (first, last):
        model = AutoModelForCausalLM.from_pretrained(folder)
        assert type(model).__name__ == "GPTNeoXForCausalLM"
        assert model.config.num_hidden_layers == 2
        assert model.config.hidden_size == 64
        with torch.no_grad():
            losses.append(float(model(input_ids=batch, labels=batch).loss))
    assert losses[1] < losses[0]
    assert run_a.train_loss[-1] < run_a.train_loss[0]
    assert run_a.val_loss[-1] < run_a.val_loss[0]
    # At initialisation the loss is about ln(vocabulary size).
    assert run_a.train_loss[0] == pytest.approx(math.log(len(tokenizer)), abs=0.3)


def test_checkpoint_metadata(run_a: TrainResult) -> None:
    for k, folder in enumerate(run_a.checkpoints):
        meta = json.loads((folder / CHECKPOINT_META).read_text(encoding="utf-8"))
        assert meta["step"] == run_a.steps[k]
        assert meta["train_loss"] == run_a.train_loss[k]
        assert meta["val_loss"] == run_a.val_loss[k]
        assert meta["seed"] == 0
        assert meta["corpus_sha256"] == corpus_hash(embedded())
        assert meta["config"]["size"] == "tiny"
        assert meta["config"]["steps"] == STEPS
        per_head = meta["first_token_attention_per_head"]
        assert len(per_head) == 2 and all(len(row) == 4 for row in per_head)
        assert meta["first_token_attention"] == list(run_a.first_token_attention[k])
        assert all(0.0 < v < 1.0 for v in meta["first_token_attention"])
    series = json.loads((run_a.out_dir / SERIES_META).read_text(encoding="utf-8"))
    assert [c["step"] for c in series["checkpoints"]] == list(run_a.steps)


def test_first_token_attention_matches_eager_attentions(run_a: TrainResult) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = run_a.checkpoints[-1]
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    docs = embedded()
    n_val = round(0.05 * len(docs))
    stream = []
    for doc in docs[-n_val:]:
        stream += tokenizer(doc.text, add_special_tokens=False)["input_ids"]
        stream.append(tokenizer.eos_token_id)
    body = FAST["window"] - 1
    windows = [[tokenizer.bos_token_id, *stream[k * body : (k + 1) * body]] for k in range(8)]
    with torch.no_grad():
        attentions = model(input_ids=torch.tensor(windows), output_attentions=True).attentions
    expected = [float(a[:, :, 1:, 0].mean()) for a in attentions]
    assert run_a.first_token_attention[-1] == pytest.approx(expected, abs=1e-6)


# ------------------------------------------------------------------------ the output folder


def test_finished_series_is_returned_without_training(run_a: TrainResult) -> None:
    mtimes = [(p / "model.safetensors").stat().st_mtime_ns for p in run_a.checkpoints]
    again = _train(run_a.out_dir, steps=STEPS, seed=0, **FAST)
    assert not again.trained
    assert again.steps == run_a.steps
    assert again.checkpoints == run_a.checkpoints
    assert again.train_loss == run_a.train_loss
    assert again.val_loss == run_a.val_loss
    assert again.first_token_attention == run_a.first_token_attention
    assert again.seconds == run_a.seconds
    assert [(p / "model.safetensors").stat().st_mtime_ns for p in run_a.checkpoints] == mtimes


def test_interrupted_series_is_trained_again(tmp_path: Path) -> None:
    out = tmp_path / "series"
    first = _train(out, steps=2, seed=0, **FAST)
    kept = tmp_path / "kept"
    shutil.copytree(out, kept)
    (out / SERIES_META).unlink()
    shutil.rmtree(out / "step2")
    (out / ".attncoda-tmp-step2-1").mkdir()
    again = _train(out, steps=2, seed=0, **FAST)
    assert again.trained
    assert sorted(p.name for p in out.iterdir()) == [SERIES_META, "step0", "step1", "step2"]
    for step in first.steps:
        _assert_same_weights(kept / f"step{step}", out / f"step{step}")
    assert again.train_loss == first.train_loss


def test_other_configuration_needs_overwrite(run_a: TrainResult, tmp_path: Path) -> None:
    out = tmp_path / "copy"
    shutil.copytree(run_a.out_dir, out)
    msg = (
        f"output folder '{out}' holds checkpoints of another training configuration "
        "(differs in: seed, steps, warmup); pass overwrite=True to replace them"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        _train(out, steps=2, seed=1, **FAST)
    result = _train(out, steps=2, seed=1, overwrite=True, **FAST)
    assert result.trained
    assert result.steps == (0, 1, 2)
    assert sorted(p.name for p in out.iterdir()) == [SERIES_META, "step0", "step1", "step2"]


def test_foreign_files_are_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me", encoding="utf-8")
    msg = (
        f"output folder '{out}' holds 'notes.txt', which no training run writes; "
        "choose a new or empty folder"
    )
    for overwrite in (False, True):
        with pytest.raises(AttncodaError, match=re.escape(msg)):
            _train(out, steps=1, overwrite=overwrite, **FAST)
    assert (out / "notes.txt").read_text(encoding="utf-8") == "keep me"


def test_out_dir_that_is_a_file(tmp_path: Path) -> None:
    out = tmp_path / "file"
    out.write_text("x", encoding="utf-8")
    msg = f"output path '{out}' exists and is not a folder"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        _train(out, steps=1, **FAST)


def test_progress_shows_the_loss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from attncoda import _progress

    monkeypatch.setattr(_progress, "EVERY", 0.0)  # a line per step: stderr is no terminal
    _train(tmp_path / "p", steps=2, progress=True, **FAST)
    err = capsys.readouterr().err
    assert "train-tiny: 1/2 step (" in err and "train-tiny: 2/2 step, done (" in err
    assert re.search(r"2/2 step, done \(\d+ s, loss \d+\.\d{3}\)", err), err
    assert "Writing model shards" not in err


# ----------------------------------------------------------------------- list_checkpoints


def test_list_checkpoints_orders_numerically(tmp_path: Path) -> None:
    for name in ("step10", "step2", "step0", "step1000", "stepx", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "step3").write_text("a file, not a checkpoint", encoding="utf-8")
    assert list_checkpoints(tmp_path) == [
        (0, tmp_path / "step0"),
        (2, tmp_path / "step2"),
        (10, tmp_path / "step10"),
        (1000, tmp_path / "step1000"),
    ]
    assert isinstance(list_checkpoints(str(tmp_path))[0][1], Path)


def test_list_checkpoints_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    msg = f"checkpoint folder '{missing}' does not exist"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        list_checkpoints(missing)
    (tmp_path / "other").mkdir()
    msg = f"checkpoint folder '{tmp_path}' holds no step<N> folder (e.g. 'step0', 'step1000')"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        list_checkpoints(tmp_path)


# --------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"steps": 0}, "steps must be an integer of at least 1, got 0"),
        ({"steps": -3}, "steps must be an integer of at least 1, got -3"),
        ({"steps": 2.0}, "steps must be an integer of at least 1, got 2.0"),
        ({"steps": True}, "steps must be an integer of at least 1, got True"),
        ({"size": "huge"}, "unknown model size 'huge'; accepted: 'tiny', 'small'"),
        ({"seed": -1}, "seed must be an integer from 0 to 2**63 - 1, got -1"),
        ({"seed": "0"}, "seed must be an integer from 0 to 2**63 - 1, got '0'"),
        ({"window": 4}, "window must be an integer of at least 8, got 4"),
        ({"batch_size": 0}, "batch_size must be an integer of at least 1, got 0"),
        ({"vocab_size": 100}, "vocab_size must be an integer of at least 300, got 100"),
        ({"threads": 0}, "threads must be an integer of at least 1, got 0"),
        ({"warmup": -1}, "warmup must be None or an integer of at least 0, got -1"),
        ({"lr": 0.0}, "lr must be a finite number above 0, got 0.0"),
        ({"lr": float("nan")}, "lr must be a finite number above 0, got nan"),
        (
            {"weight_decay": -0.1},
            "weight_decay must be a finite number of at least 0, got -0.1",
        ),
        (
            {"val_fraction": 1.0},
            "val_fraction must be a number strictly between 0 and 1, got 1.0",
        ),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], msg: str, tmp_path: Path) -> None:
    args = {"steps": 1, **FAST, **kwargs}
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        _train(tmp_path / "out", **args)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_checkpoint_steps_refuses_bad_steps() -> None:
    msg = "steps must be an integer of at least 1, got 0"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        checkpoint_steps(0)


def test_corpus_too_small(tmp_path: Path) -> None:
    one = [Document("a", "Just one short document.")]
    msg = "the corpus holds 1 document; training needs at least 2 (one is held out for validation)"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        _train(tmp_path / "one", steps=1, corpus=one, **FAST)
    # Byte-level BPE makes each " a" one token: 5 + <|endoftext|> and 3 + <|endoftext|>.
    two = [Document("a", "a a a a a"), Document("b", "a a a")]
    msg = (
        "the corpus is too small for 64-token windows: 6 training and 4 held-out tokens; "
        "each needs at least 64 and 63"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        _train(tmp_path / "two", steps=1, corpus=two, **FAST)
    assert not (tmp_path / "one").exists()
    assert not (tmp_path / "two").exists()


def test_corpus_of_other_items(tmp_path: Path) -> None:
    msg = "corpus must be a spec, a path or a sequence of Document, got an item of type str"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        _train(tmp_path / "out", steps=1, corpus=["plain text"], **FAST)  # type: ignore[list-item]
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------
# The Bigram-Backcopy task

TASK_FAST = {"task": "bigram-backcopy", "window": 16, "batch_size": 4}


def test_task_series_is_deterministic_and_records_bos_attention(tmp_path: Path) -> None:
    from attncoda.models.load import load_model

    a = _train(tmp_path / "a", steps=4, seed=0, **TASK_FAST)
    b = _train(tmp_path / "b", steps=4, seed=0, **TASK_FAST)
    c = _train(tmp_path / "c", steps=4, seed=1, **TASK_FAST)
    assert a.task == "bigram-backcopy" and a.steps == (0, 1, 2, 4)
    for pa, pb in zip(a.checkpoints, b.checkpoints, strict=True):
        _assert_same_weights(pa, pb)
    assert not torch.equal(
        _weights(a.checkpoints[-1])["gpt_neox.embed_in.weight"],
        _weights(c.checkpoints[-1])["gpt_neox.embed_in.weight"],
    )
    # [checkpoint][layer][head]: the default "tiny" size has 2 layers of 4 heads.
    assert len(a.bos_attention_non_trigger) == 4
    assert all(
        len(cp) == 2 and all(len(layer) == 4 for layer in cp) for cp in a.bos_attention_trigger
    )
    meta = json.loads((a.checkpoints[-1] / CHECKPOINT_META).read_text())
    assert meta["config"]["task"] == "bigram-backcopy"
    assert meta["config"]["task_config"]["n_triggers"] == 3
    assert "corpus_sha256" not in meta["config"]
    np.testing.assert_allclose(meta["bos_attention_trigger"], a.bos_attention_trigger[-1])
    again = _train(tmp_path / "a", steps=4, seed=0, **TASK_FAST)
    assert not again.trained
    assert again.bos_attention_non_trigger == a.bos_attention_non_trigger
    model, tokenizer, info = load_model(str(a.checkpoints[-1]))
    assert tokenizer("t3 t1")["input_ids"] == [0, 5, 3]
    assert info.causal


def test_unknown_task_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AttncodaError, match="unknown task 'copy'; accepted: 'text', "):
        _train(tmp_path / "x", task="copy", steps=1)
    assert not (tmp_path / "x").exists()
