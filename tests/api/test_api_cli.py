"""The API and the CLI are one interface: every option of an experiment's command is a
keyword of its Python function under the same name; the window length is ``max_tokens`` and
token ids are ``tokens`` everywhere (the old name of the window length still works, with a
warning); a refusal names each option as the caller wrote it and is one line; the capture
options mean something together or are refused; ``record_rows`` has one default."""

from __future__ import annotations

import argparse
import inspect
import json
import warnings

import pytest

import attncoda as ac
from attncoda.cli import build_parser, main
from attncoda.experiments.contract import settings_from
from attncoda.experiments.profile import Settings as ProfileSettings

#: The bring-your-own-attention file options: their Python form is ``from_attentions``.
ATTENTION_FILE_OPTIONS = {"attentions", "tokens", "kind"}
COMMANDS = {
    "profile": ac.profile,
    "flips": ac.flips,
    "cluster": ac.cluster,
    "safety": ac.safety,
    "prune": ac.prune,
    "collapse": ac.collapse,
}


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_of_the_command_is_a_keyword_of_the_function(name):
    params = set(inspect.signature(COMMANDS[name]).parameters)
    options = {
        a.dest
        for a in _subparser(name)._actions
        if a.option_strings and a.dest != "help" and a.dest not in ATTENTION_FILE_OPTIONS
    }
    for option in options:
        flag = _subparser(name)._option_string_actions
        spelled = [s for s, a in flag.items() if a.dest == option]
        assert f"--{option.replace('_', '-')}" in spelled, (option, spelled)
    assert options - params == set()


@pytest.mark.slow
def test_flips_takes_the_windows_it_reads_as_the_cli_does(tmp_path):
    result = ac.flips("minilm", docs=2, max_tokens=32, n_boot=5, out=tmp_path / "run")
    config = json.loads((tmp_path / "run" / "manifest.json").read_text())["config"]
    assert config["rows"] == {"docs": 2, "max_tokens": 32}
    assert config["settings"]["flips"]["n_boot"] == 5
    assert set(result.table["metric"]) == set(config["settings"]["flips"]["metrics"])


def test_the_old_name_of_the_window_length_warns_and_names_the_new_one():
    with pytest.warns(DeprecationWarning, match=r"tokens= is now max_tokens="):
        with pytest.raises(ac.AttncodaError, match=r"^tokens must be an integer of at least 1"):
            ac.profile("minilm", tokens=0)
    with pytest.warns(DeprecationWarning, match=r"tokens is now max_tokens"):
        assert settings_from(ProfileSettings, {"tokens": 64}).max_tokens == 64
    with pytest.raises(ac.AttncodaError, match=r"^tokens and max_tokens are one setting"):
        settings_from(ProfileSettings, {"tokens": 64, "max_tokens": 64})


def test_a_refusal_names_the_option_as_the_caller_wrote_it(tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("x")
    with pytest.raises(ac.AttncodaError) as python:
        ac.profile("minilm", out=file)
    assert str(python.value) == f"out={str(file)!r} is a file: give a folder"
    assert main(["profile", "minilm", "--out", str(file)]) == 2
    err = capsys.readouterr().err
    assert err == f"attncoda: error: --out {str(file)!r} is a file: give a folder\n"


def test_a_kernel_without_the_fast_method_is_refused(capsys):
    with pytest.raises(ac.AttncodaError) as python:
        ac.profile("minilm", kernel="sdpa", method="exact")
    assert str(python.value) == (
        "kernel='sdpa' is for the fast path (the exact method has no kernel): drop "
        "method='exact', or drop kernel="
    )
    assert main(["profile", "minilm", "--kernel", "sdpa", "--method", "exact"]) == 2
    assert capsys.readouterr().err == (
        "attncoda: error: --kernel sdpa is for the fast path (the exact method has no "
        "kernel): drop --method exact, or drop --kernel\n"
    )


def test_a_refusal_is_one_line_without_a_library_warning(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    evil = tmp_path / "evil.pt"
    # Not the protocol torch.load expects: torch warns before attncoda refuses the object.
    torch.save({"attn": {"a": [1, 2]}}, evil, pickle_protocol=5)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        code = main(["profile", "--attentions", str(evil), "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("attncoda: error: "), err
    assert "pickled object" in err
    assert [str(w.message) for w in seen] == []


def test_capture_is_exported_and_runs_one_batch():
    torch = pytest.importorskip("torch")
    from attncoda.capture import capture
    from tiny_models import VOCAB, tiny

    assert "capture" in ac.__all__ and callable(ac.capture)
    model = tiny("llama")
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    got, want = ac.capture(model, ids), capture(model, ids)
    assert torch.equal(torch.as_tensor(got.sink_mass), torch.as_tensor(want.sink_mass))


def test_record_rows_has_one_default():
    from attncoda.capture import capture, recording
    from attncoda.capture.given import from_attentions
    from attncoda.run.captured import capture_corpus, capture_file

    # capture_windows passes its keywords to capture.
    defaults = {
        f.__name__: inspect.signature(f).parameters["record_rows"].default
        for f in (capture, from_attentions, recording, capture_corpus, capture_file)
    }
    assert set(defaults.values()) == {"auto"}, defaults
