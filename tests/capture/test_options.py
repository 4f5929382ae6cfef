"""The capture options, declared once (:mod:`attncoda.capture.options`): an option added in
one place is a command-line flag, an API keyword with its doc, a key of a run config's JSON
and a checked value, with nothing else written."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

from attncoda._errors import AttncodaError
from attncoda.api._signatures import option_docs, option_parameters
from attncoda.capture.options import CaptureOptions, option
from attncoda.cli._args import Parser, add_options, validate


@dataclasses.dataclass(frozen=True)
class Wider(CaptureOptions):
    """The capture options and one more, declared here alone."""

    layout: str = option(
        "rows",
        help="how rows are laid out (default: {default})",
        doc="How rows are laid out.",
        annotation="str",
        choices=lambda: ("rows", "columns"),
        stored="given",
    )


def _parser() -> Parser:
    parser = Parser(prog="attncoda")
    add_options(parser, Wider)
    return parser


def test_an_option_declared_once_is_a_command_line_flag(capsys):
    args = _parser().parse_args(["--layout", "columns", "--seed", "3"])
    validate(args)
    assert args.options == Wider(layout="columns", seed=3)
    bare = _parser().parse_args([])
    validate(bare)
    assert bare.options == Wider() and bare.options.layout == "rows"
    shown = " ".join(_parser().format_help().split())
    assert "--layout {rows,columns} how rows are laid out (default: rows)" in shown
    with pytest.raises(SystemExit):
        _parser().parse_args(["--layout", "diagonal"])
    assert "invalid choice: 'diagonal'" in capsys.readouterr().err


def test_an_option_declared_once_is_an_api_keyword_with_its_doc():
    params = option_parameters(Wider)
    names = [f.name for f in dataclasses.fields(CaptureOptions)]
    assert [p.name for p in params] == [*names, "layout"]
    (layout,) = [p for p in params if p.name == "layout"]
    assert (layout.kind, layout.default, layout.annotation) == (
        inspect.Parameter.KEYWORD_ONLY,
        "rows",
        "str",
    )
    assert option_docs(Wider)["layout"] == ("str", "How rows are laid out.")


def test_an_option_declared_once_is_a_json_key_read_back_checked():
    wider = Wider(layout="columns", seed=3, method="fast", kernel="sdpa")
    stored = json.loads(json.dumps(wider.to_json()))
    assert stored["layout"] == "columns" and stored["kernel"] == "sdpa"
    assert Wider.from_json(stored) == wider
    assert "layout" not in Wider().to_json()  # stored when given: older configs lack it
    assert Wider.from_json(Wider().to_json()) == Wider()
    with pytest.raises(
        AttncodaError, match=r"^unknown layout 'diagonal': use one of rows, columns$"
    ):
        Wider.from_json({**stored, "layout": "diagonal"})
    with pytest.raises(AttncodaError, match=r"^unknown layout 'diagonal'"):
        Wider(layout="diagonal")


def test_options_read_back_are_checked_but_not_against_this_machine(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    stored = {**CaptureOptions(device="cpu").to_json(), "device": "cuda"}  # a GPU run's
    assert CaptureOptions.from_json(stored).device == "cuda"  # its report renders here
    with pytest.raises(AttncodaError, match=r"^device 'cuda' asked for, but torch sees no GPU"):
        CaptureOptions(device="cuda")
    with pytest.raises(
        AttncodaError, match=r"^unknown method 'quick': use one of auto, exact, fast$"
    ):
        CaptureOptions.from_json({**stored, "method": "quick"})
    with pytest.raises(AttncodaError, match=r"^seed must be an integer of at least 0; got -1$"):
        CaptureOptions.from_json({**stored, "seed": -1})


def test_every_command_and_function_takes_every_declared_option():
    import attncoda as ac
    from attncoda.cli import build_parser

    declared = {f.name: f.default for f in dataclasses.fields(CaptureOptions)}
    args = build_parser().parse_args(["flips", "minilm"])
    assert {name: getattr(args, name) for name in declared} == dict.fromkeys(declared)
    validate(args)
    assert args.options == CaptureOptions()
    keywords = inspect.signature(ac.flips).parameters
    assert {name: keywords[name].default for name in declared} == declared
    for name in declared:
        assert f"\n{name} : " in ac.flips.__doc__
