"""Bad calls of the command line, in a subprocess as a user makes them: every one is
refused before any model is loaded (neither torch nor transformers is imported), with exit status 2 and
one line, ``attncoda: error: <the exact message>``, and no traceback.

The argument cases (:data:`CASES`) share one process, one call after another, each checked
for torch and transformers right after it (a process each cost half a second of imports,
45 times); the calls that read or write folders run in a process of their own.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Runs the CLI as the console script does, then says whether torch or transformers was imported.
WRAPPER = (
    "import sys\n"
    "from attncoda.cli import main\n"
    "try:\n"
    "    rc = main(sys.argv[1:])\n"
    "except SystemExit as exc:\n"
    "    rc = exc.code\n"
    "print('transformers' in sys.modules or 'torch' in sys.modules)\n"
    "sys.exit(rc)\n"
)

CASES = [
    (
        ["profile", "minilm", "--max-tokens", "0"],
        "--max-tokens must be an integer of at least 1; got 0",
    ),
    (
        ["profile", "minilm", "--max-tokens", "-3"],
        "--max-tokens must be an integer of at least 1; got -3",
    ),
    (["profile", "minilm", "--max-tokens", "x"], "argument --max-tokens: invalid int value: 'x'"),
    (["profile", "minilm", "--docs", "0"], "--docs must be an integer of at least 1; got 0"),
    (
        ["train-tiny", "{d}/tt", "--batch-size", "0"],
        "--batch-size must be an integer of at least 1; got 0",
    ),
    (["profile", "minilm", "--batch-size", "8"], "unrecognized arguments: --batch-size 8"),
    (["profile", "minilm", "--seed", "-1"], "--seed must be an integer of at least 0; got -1"),
    (
        ["profile", "minilm", "--sink", "banana"],
        "unknown sink spec 'banana': use 'first', 'auto', positions like '0' or '0,1', a token like '[CLS]' or 'id:101', 'learned', or one of these with ',learned'",
    ),
    (
        ["profile", "minilm", "--sink", "-1"],
        "unknown sink spec '-1': use 'first', 'auto', positions like '0' or '0,1', a token like '[CLS]' or 'id:101', 'learned', or one of these with ',learned'",
    ),
    (
        ["profile", "minilm", "--sink", "id:"],
        "unknown sink spec 'id:': use 'first', 'auto', positions like '0' or '0,1', a token like '[CLS]' or 'id:101', 'learned', or one of these with ',learned'",
    ),
    (
        ["profile", "minilm", "--text", "{d}/missing.txt"],
        "corpus path '{d}/missing.txt' does not exist: give a .txt or .jsonl file, or a folder of them",
    ),
    (
        ["profile", "minilm", "--text", "{d}/empty.txt"],
        "corpus file '{d}/empty.txt' holds no document: give a file with some text",
    ),
    (
        ["profile", "minilm", "--text", "{d}/binary.txt"],
        "corpus file '{d}/binary.txt' is not UTF-8 text (invalid start byte): give a text file",
    ),
    (
        ["profile", "minilm", "--text", "{d}/table.csv"],
        "corpus file '{d}/table.csv' has '.csv'; accepted: .txt, .jsonl",
    ),
    (["profile"], "profile needs a model or --attentions FILE (not both, not neither)"),
    (
        ["profile", "minilm", "--attentions", "{d}/x.npz"],
        "attention file '{d}/x.npz' does not exist",
    ),
    (
        ["profile", "--attentions", "{d}/missing.npz"],
        "attention file '{d}/missing.npz' does not exist",
    ),
    (
        ["profile", "--attentions", "{d}/table.csv"],
        "attention file '{d}/table.csv' is not one of .npz, .pt, .safetensors: save the array with numpy.savez, torch.save or safetensors",
    ),
    (["flips"], "flips needs a model or --attentions FILE (not both, not neither)"),
    (["flips", "minilm", "--n-boot", "0"], "--n-boot must be an integer of at least 1; got 0"),
    (
        ["flips", "minilm", "--metrics", "foo"],
        "unknown metric 'foo' in --metrics: use a comma list of cosine, jsd, entropy_gap, hellinger, tv",
    ),
    (
        ["flips", "minilm", "--metrics", ","],
        "--metrics is empty: give a comma list of cosine, jsd, entropy_gap, hellinger, tv",
    ),
    (["flips", "minilm", "--tol", "-1"], "--tol must be a finite number of at least 0; got -1.0"),
    (["flips", "minilm", "--docs", "0"], "--docs must be an integer of at least 1; got 0"),
    (
        ["flips", "--attentions", "{d}/missing.npz"],
        "attention file '{d}/missing.npz' does not exist",
    ),
    (
        ["flips", "--attentions", "{d}/ok.npz", "--tokens", "{d}/missing.npy"],
        "token file '{d}/missing.npy' does not exist",
    ),
    (["cluster"], "the following arguments are required: model"),
    (
        ["cluster", "minilm", "--clusters", "1"],
        "--n-clusters must be an integer of at least 2; got 1",
    ),
    (["cluster", "minilm", "--n-init", "0"], "--n-init must be an integer of at least 1; got 0"),
    (["safety", "minilm", "--bins", "0"], "--n-bins must be an integer of at least 1; got 0"),
    (
        ["safety", "minilm", "--safe-threshold", "2"],
        "--threshold must be a number above 0 and at most 1; got 2.0",
    ),
    (
        ["predictor", "apply", "{d}/missing.json", "minilm"],
        "predictor file '{d}/missing.json' does not exist: give a file written by 'attncoda predictor fit', or 'shipped'",
    ),
    (
        ["predictor", "apply", "{d}/broken.json", "minilm"],
        "'{d}/broken.json' is not valid JSON: Expecting value: line 1 column 1 (char 0)",
    ),
    (
        ["predictor", "apply", "{d}/bad.json", "minilm"],
        "invalid predictor file '{d}/bad.json': missing key 'format'",
    ),
    (["prune", "smollm2", "--k", "0"], "--ks holds 0: every head count must be at least 1"),
    (
        ["prune", "smollm2", "--ks", "1,x"],
        "argument --ks/--k: expected a comma list of integers; got '1,x'",
    ),
    (
        ["prune", "smollm2", "--k", ","],
        "--ks is empty: give a comma list of head counts, e.g. 1,2,4",
    ),
    (
        ["prune", "smollm2", "--max-tokens", "0"],
        "--max-tokens must be an integer of at least 1; got 0",
    ),
    (
        ["prune", "smollm2", "--channels", "bogus"],
        "unknown channel 'bogus' in --channels: use a comma list of sink_mass, sink_balance, content_entropy, full_entropy, random, gradient",
    ),
    (
        ["prune", "smollm2", "--channels", ","],
        "--channels is empty: give a comma list of sink_mass, sink_balance, content_entropy, full_entropy, random, gradient",
    ),
    (
        ["prune", "smollm2", "--order", "sideways"],
        "unknown order 'sideways' in --orders: use a comma list of high, low",
    ),
    (
        ["prune", "smollm2", "--ablation", "melt"],
        "unknown ablation 'melt' in --ablations: use a comma list of zero, uniform, sink",
    ),
    (
        ["prune", "smollm2", "--profile-docs", "0"],
        "--profile-docs must be an integer of at least 1; got 0",
    ),
    (
        ["prune", "smollm2", "--eval-docs", "0"],
        "--eval-docs must be an integer of at least 1; got 0",
    ),
    (
        ["reproduce", "--models", ","],
        "--models is empty: give a comma list of models, e.g. smollm2,minilm",
    ),
    (
        ["reproduce", "--experiments", "bogus"],
        "unknown experiment 'bogus' in --experiments: use a comma list of profile, flips, cluster, safety, predictor, prune, collapse, sink_rate",
    ),
    (
        ["reproduce", "--scale", "huge"],
        "argument --scale: invalid choice: 'huge' (choose from 'demo', 'full')",
    ),
    (["reproduce", "--n-boot", "0"], "--n-boot must be an integer of at least 1; got 0"),
    (["reproduce", "--rows-docs", "0"], "--rows-docs must be an integer of at least 1; got 0"),
    (["reproduce", "--train-steps", "0"], "--train-steps must be an integer of at least 1; got 0"),
    (
        ["reproduce", "--sink", "nope"],
        "unknown sink spec 'nope': use 'first', 'auto', positions like '0' or '0,1', a token like '[CLS]' or 'id:101', 'learned', or one of these with ',learned'",
    ),
    (["sweep", "--retries", "-1"], "--retries must be an integer of at least 0; got -1"),
    (["sweep", "--ray-local", "0"], "--ray-local must be an integer of at least 1; got 0"),
    (["train-tiny", "{d}/tt", "--steps", "0"], "--steps must be an integer of at least 1; got 0"),
    (["train-tiny", "{d}/tt", "--lr", "0"], "--lr must be a finite number above 0; got 0.0"),
    (["train-tiny", "{d}/tt", "--window", "1"], "--window must be an integer of at least 2; got 1"),
    (
        ["train-tiny", "{d}/tt", "--threads", "0"],
        "--threads must be an integer of at least 1; got 0",
    ),
    (
        ["train-tiny", "{d}/tt", "--size", "huge"],
        "argument --size: invalid choice: 'huge' (choose from 'tiny', 'small')",
    ),
    (["collapse", "{d}/none", "--docs", "0"], "--docs must be an integer of at least 1; got 0"),
    (
        ["report", "{d}/nowhere"],
        "'{d}/nowhere' holds no tables/ folder: give the --out folder of a run (reproduce, sweep or an experiment command)",
    ),
    (
        ["bogus-command"],
        "argument command: invalid choice: 'bogus-command' (choose from 'demo', 'models', 'profile', 'flips', 'cluster', 'safety', 'predictor', 'prune', 'collapse', 'sink-rate', 'reproduce', 'report', 'compare', 'sweep', 'train-tiny')",
    ),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The folder ``{d}`` of the cases: an empty text, a binary file, JSON that is not a
    predictor, broken JSON, a CSV, a short good text and an attention file."""
    d = tmp_path_factory.mktemp("bad")
    (d / "empty.txt").write_text("")
    (d / "binary.txt").write_bytes(b"\xff\xfe\x00bin")
    (d / "bad.json").write_text('{"kind": 1}')
    (d / "broken.json").write_text("not json")
    (d / "table.csv").write_text("a,b\n")
    (d / "ok.txt").write_text("Some text here.\n")
    (d / "ok.npz").write_bytes(b"")  # exists: the token file is what is missing
    return d


def test_there_are_at_least_forty_cases():
    assert len(CASES) >= 40


# Runs each call of a JSON list as the console script does, in turn, in one process: its exit
# status, what it wrote to stderr (a traceback if it raised) and whether torch or
# transformers had been imported by the end of it.
BATCH = (
    "import contextlib, io, json, sys, traceback\n"
    "from attncoda.cli import main\n"
    "said = []\n"
    "for argv in json.loads(sys.argv[1]):\n"
    "    err = io.StringIO()\n"
    "    with contextlib.redirect_stderr(err):\n"
    "        try:\n"
    "            rc = main(argv)\n"
    "        except SystemExit as exc:\n"
    "            rc = exc.code\n"
    "        except BaseException:\n"
    "            rc = None\n"
    "            traceback.print_exc()\n"
    "    heavy = 'transformers' in sys.modules or 'torch' in sys.modules\n"
    "    said.append({'rc': rc, 'stderr': err.getvalue(), 'heavy': heavy})\n"
    "print(json.dumps(said))\n"
)


@pytest.fixture(scope="module")
def refusals(files) -> list[dict]:
    """What each call of :data:`CASES` did, in order, run in one process (:data:`BATCH`)."""
    calls = [[a.replace("{d}", str(files)) for a in argv] for argv, _ in CASES]
    done = subprocess.run(
        [sys.executable, "-c", BATCH, json.dumps(calls)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", range(len(CASES)), ids=[" ".join(a) for a, _ in CASES])
def test_a_bad_call_is_one_line_and_exit_2_before_any_model(case, refusals, files):
    message = CASES[case][1].replace("{d}", str(files))
    said = refusals[case]
    assert said["rc"] == 2, said["stderr"]
    assert said["stderr"] == f"attncoda: error: {message}\n"
    # The first call to import either is named; the calls after it cannot be checked.
    assert not said["heavy"], "torch or transformers was imported before the refusal"


# --------------------------------------------------------------------------- --out and specs
# Every refusal below leaves the folders it was pointed at byte for byte as they were: the
# same listing (names and kinds) and the same sha256 of every file, or still no folder.


def _snapshot(folder: Path) -> dict[str, str] | None:
    """``{relative path: "dir" or the file's sha256}`` of everything under ``folder``."""
    if not folder.exists():
        return None
    if folder.is_file():
        return {".": hashlib.sha256(folder.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(folder)): (
            "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        )
        for p in sorted(folder.rglob("*"))
    }


def _refused(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None, *, light: bool = False
) -> str:
    """Run ``attncoda argv`` in ``cwd``; assert exit 2 and one stderr line (and, when
    ``light``, that neither torch nor transformers was imported); return the message."""
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and done.stderr.endswith("\n"), done.stderr
    assert lines[0].startswith("attncoda: error: ")
    if light:
        assert done.stdout == "False\n", "torch or transformers was imported before the refusal"
    return lines[0][len("attncoda: error: ") :]


def _not_a_run(folder: Path, first: str, more: int = 0) -> str:
    extra = f" and {more} more" if more else ""
    return (
        f"--out {str(folder)!r} is not empty ({first!r}{extra}) and is no attncoda run "
        f"folder: give a new or empty folder, or the folder of an earlier attncoda run"
    )


@pytest.fixture
def user(tmp_path):
    """A user's folder: a file, a hidden file and a subfolder with a file, no run."""
    folder = tmp_path / "mine"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("my notes\n")
    (folder / ".hidden").write_bytes(b"\x00\x01")
    (folder / "sub" / "data.csv").write_text("a,b\n1,2\n")
    return folder


# Every command that writes a run folder, into the user's folder: refused before any model
# loads (neither torch nor transformers imported), nothing written.
INTO_USER = [
    ["profile", "minilm"],
    ["flips", "minilm"],
    ["cluster", "minilm"],
    ["safety", "minilm"],
    ["predictor", "apply", "shipped", "minilm"],
    ["collapse", "{d}/series"],
    ["prune", "smollm2"],
    ["reproduce", "--models", "minilm"],
    ["sweep", "--models", "minilm"],
    ["demo"],
]


@pytest.mark.parametrize("argv", INTO_USER, ids=[" ".join(a) for a in INTO_USER])
def test_a_user_folder_is_refused_as_out_and_left_unchanged(argv, user, tmp_path):
    before = _snapshot(user)
    argv = [a.replace("{d}", str(tmp_path)) for a in argv]
    message = _refused([*argv, "--out", str(user)], tmp_path, light=True)
    assert message == _not_a_run(user, ".hidden", 2)
    assert _snapshot(user) == before


def test_a_file_given_as_out_is_refused_and_left_unchanged(user, tmp_path):
    target = user / "notes.txt"
    before = _snapshot(user)
    message = _refused(["profile", "minilm", "--out", str(target)], tmp_path)
    assert message == f"--out {str(target)!r} is a file: give a folder"
    assert _snapshot(user) == before


def test_a_manifest_attncoda_did_not_write_is_refused(tmp_path):
    folder = tmp_path / "web"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"name": "my web app", "icons": []}')
    before = _snapshot(folder)
    message = _refused(["flips", "minilm", "--out", str(folder)], tmp_path)
    assert message == (
        f"--out {str(folder)!r} holds a manifest.json that attncoda did not write: give a "
        f"new or empty folder, or the folder of an earlier attncoda run"
    )
    assert _snapshot(folder) == before


def test_train_tiny_into_a_user_folder_is_refused_and_left_unchanged(user, tmp_path):
    before = _snapshot(user)
    message = _refused(["train-tiny", str(user), "--steps", "2"], tmp_path)
    assert message.startswith(f"output folder '{user}' holds ")
    assert _snapshot(user) == before


UNKNOWN = (
    "unknown model spec {spec!r}: not an embedded model name, an existing path or a hub id. "
    "Accepted forms: an embedded model name (gemma3, minilm, mpnet, qwen2.5-coder-1.5b, "
    "smollm2); a shipped checkpoint series (bigram-backcopy, bigram-backcopy-seed2, "
    "bigram-backcopy-triggers5, bigram-backcopy-small) with an optional '@stepN'; "
    "a Hugging Face hub id 'owner/name' with an optional '@revision' "
    "(e.g. 'EleutherAI/pythia-70m@step512'); a local folder containing config.json; "
    "a path to a .gguf file."
)


def test_an_unknown_model_spec_creates_no_folder(tmp_path):
    new = tmp_path / "new"
    message = _refused(["flips", "no-such-model", "--out", str(new)], tmp_path)
    assert message == UNKNOWN.format(spec="no-such-model")
    assert not new.exists()
    # Without --out, the default attncoda-out/<command>/<model> is not made either.
    assert _refused(["reproduce", "--models", "minilm,no-such-model"], tmp_path) == message
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_unknown_model_spec_leaves_a_user_folder_and_an_empty_folder_unchanged(user, tmp_path):
    before = _snapshot(user)
    message = _refused(["profile", "no-such-model", "--out", str(user)], tmp_path, light=True)
    assert message == _not_a_run(user, ".hidden", 2)  # the folder is refused first
    assert _snapshot(user) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    message = _refused(["profile", "no-such-model", "--out", str(empty)], tmp_path)
    assert message == UNKNOWN.format(spec="no-such-model")
    assert _snapshot(empty) == {}


def test_bad_hub_id_syntax_is_refused_before_the_folder(tmp_path):
    new = tmp_path / "new"
    message = _refused(["cluster", "own--er/name@step8", "--out", str(new)], tmp_path)
    assert message == UNKNOWN.format(spec="own--er/name@step8")
    assert not new.exists()


def test_an_uncached_hub_id_is_refused_offline(tmp_path):
    """With HF_HUB_OFFLINE set, a hub id must be in the local cache (an empty one here)."""
    new = tmp_path / "new"
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub-cache")}
    spec = "nobody/uncached-model@step8"
    message = _refused(["flips", "minilm", spec, "--out", str(new)], tmp_path, env)
    assert message == (
        f"model spec {spec!r}: 'nobody/uncached-model' at revision 'step8' is not in the local "
        "Hugging Face cache and HF_HUB_OFFLINE is set: unset HF_HUB_OFFLINE to download it, "
        "or give a local folder containing config.json"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_bad_attention_files_are_one_line_and_leave_no_folder(tmp_path):
    """A real pickle of an object, a truncated file and a text file (the messages of every
    kind of bad file: tests/capture/given/test_given_files.py). A new --out, an existing empty
    folder and the default attncoda-out/ stay as they were: what the failed run made goes,
    with the parents it made."""
    import fractions

    import torch

    files = tmp_path / "files"
    files.mkdir()
    torch.save({"attentions": fractions.Fraction(1, 3)}, files / "object.pt")
    torch.save(torch.rand(1, 2, 4, 4).softmax(-1), files / "good.pt")
    data = (files / "good.pt").read_bytes()
    (files / "truncated.pt").write_bytes(data[: len(data) // 2])
    (files / "text.npz").write_text("layer,head,value\n0,0,0.5\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    where = {name: f"attention file {str(files / name)!r}" for name in os.listdir(files)}
    cases = [
        (
            "profile",
            "object.pt",
            ["--out", str(tmp_path / "new")],
            f"{where['object.pt']} holds a pickled object that is not a tensor or array: save "
            "a tensor with torch.save(tensor) or a numpy array with numpy.savez",
        ),
        (
            "flips",
            "truncated.pt",
            ["--out", str(empty)],
            f"{where['truncated.pt']} is truncated or damaged (RuntimeError: PytorchStreamReader "
            "failed reading zip archive: failed finding central directory): write it again "
            "with torch.save",
        ),
        (
            "profile",
            "text.npz",
            [],
            f"{where['text.npz']} holds text, not a .npz file: give a .npz file from "
            "numpy.savez, a .pt file from torch.save of a tensor (or of a dict, tuple or list "
            "of tensors), or a .safetensors file",
        ),
    ]
    for command, name, out, message in cases:
        said = _refused([command, "--attentions", str(files / name), *out], tmp_path)
        # The runner names the unit that read the file.
        assert said == f"unit {command}/{name}@- failed: {message}"
        assert "weights_only" not in said
        assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "files"]
        assert _snapshot(empty) == {}


# --------------------------------------------------------------------------------------------
# Settings checked by their fields (attncoda.experiments.contract), before any model loads
# and before the --out folder is made: the same checks as the Python API's.

SETTINGS_CASES = [
    (
        ["flips", "minilm", "--n-boot", "-1"],
        "--n-boot must be an integer of at least 1; got -1",
    ),
    (
        ["flips", "minilm", "--metrics", "jsd,tv,jsd"],
        "--metrics holds 'jsd' twice: give each metric once",
    ),
    (
        ["prune", "smollm2", "--channels", "sink_mass,sink_mass"],
        "--channels holds 'sink_mass' twice: give each channel once",
    ),
    (
        ["safety", "minilm", "--threshold", "0"],
        "--threshold must be a number above 0 and at most 1; got 0.0",
    ),
    (
        ["flips", "minilm", "--tol", "nan"],
        "--tol must be a finite number of at least 0; got nan",
    ),
    (
        ["collapse", "{d}/none", "--max-tokens", "0"],
        "--max-tokens must be an integer of at least 1; got 0",
    ),
    (["reproduce", "--n-boot", "0"], "--n-boot must be an integer of at least 1; got 0"),
    (["reproduce", "--rows-docs", "0"], "--rows-docs must be an integer of at least 1; got 0"),
]


@pytest.mark.parametrize(
    ("argv", "message"), SETTINGS_CASES, ids=[" ".join(a) for a, _ in SETTINGS_CASES]
)
def test_a_bad_setting_is_refused_before_any_model_and_any_folder(argv, message, files):
    out = files / f"out-{abs(hash(tuple(argv)))}"
    argv = [a.replace("{d}", str(files)) for a in argv] + ["--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"attncoda: error: {message.replace('{d}', str(files))}\n"
    assert done.stdout == "False\n", "torch or transformers was imported before the refusal"
    assert not out.exists(), "the --out folder was made before the refusal"
