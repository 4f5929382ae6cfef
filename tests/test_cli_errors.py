"""Bad calls of the command line, each in a subprocess as a user makes it: every one is
refused before any model is loaded (neither torch nor transformers is imported), with exit status 2 and
one line, ``attncoda: error: <the exact message>``, and no traceback."""

from __future__ import annotations

import subprocess
import sys

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
        "unknown experiment 'bogus' in --experiments: use a comma list of profile, flips, cluster, safety, predictor, prune, collapse",
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
        "argument command: invalid choice: 'bogus-command' (choose from 'demo', 'models', 'profile', 'flips', 'cluster', 'safety', 'predictor', 'collapse', 'prune', 'reproduce', 'report', 'sweep', 'train-tiny')",
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


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_bad_call_is_one_line_and_exit_2_before_any_model(argv, message, files):
    argv = [a.replace("{d}", str(files)) for a in argv]
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"attncoda: error: {message.replace('{d}', str(files))}\n"
    assert done.stdout == "False\n", "torch or transformers was imported before the refusal"


# --------------------------------------------------------------------------------------------
# Settings checked by their fields (attncoda.experiments.setting), before any model loads
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
