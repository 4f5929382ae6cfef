"""Every experiment function shows its settings: each field of the experiment's ``Settings``
is a keyword of the signature with the dataclass default (the default the CLI option keeps
when left out), documented in the docstring from the field's metadata; a wrong name or a bad
value is refused before any model loads and before any folder is written."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import pydoc
import subprocess
import sys
import typing

import pytest

import attncoda as ac
from attncoda.api import _signatures as api_signatures
from attncoda.cli import build_parser
from attncoda.cli._args import settings_values
from attncoda.experiments.contract import EXPERIMENTS, experiment, settings_from

#: The API function of each experiment, and the CLI command whose options are its settings.
FUNCTIONS = {
    "profile": ("profile", ("profile",)),
    "flips": ("flips", ("flips",)),
    "cluster": ("cluster", ("cluster",)),
    "safety": ("safety", ("safety",)),
    "predictor": ("predict", ("predictor", "apply")),
    "prune": ("prune", ("prune",)),
    "collapse": ("collapse", ("collapse",)),
    "sink_rate": ("sink_rate", ("sink-rate",)),
}
COMMON = [
    *("source", "sink", "seed", "device", "device_map", "max_memory", "offload_folder"),
    *("dtype", "method", "kernel", "out", "text", "names"),
]
#: The windows of the shared rows (``Rows``), keywords of the experiments that read rows.
ROWS = ["docs", "max_tokens"]


def _subparser(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[name]
    return parser


def test_every_experiment_has_a_function():
    assert set(FUNCTIONS) == set(EXPERIMENTS)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_the_signature_is_the_common_options_then_every_setting_with_its_default(name):
    function = getattr(ac, FUNCTIONS[name][0])
    fields = dataclasses.fields(experiment(name).settings)
    params = inspect.signature(function).parameters
    common = [*COMMON, "steps"] if name == "collapse" else COMMON
    rows = ROWS if experiment(name).shared_rows else []
    assert list(params) == [*common, *rows, *(f.name for f in fields)]
    for f in fields:
        param = params[f.name]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY
        assert param.default == f.default, f.name
        # A tuple field takes any sequence (a list is made a tuple); the rest is the type.
        wanted = str(f.type).replace("tuple[", "Sequence[").replace(", ...]", "]")
        assert param.annotation == wanted, f.name
    # mypy and an IDE read the same source: every annotation names a real type.
    hints = typing.get_type_hints(function)
    assert set(hints) == {*params, "return"}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_the_docstring_documents_every_parameter_with_the_fields_help(name):
    function = getattr(ac, FUNCTIONS[name][0])
    doc = inspect.getdoc(function)
    assert doc is not None and "\nParameters\n----------\n" in doc
    for param in inspect.signature(function).parameters:
        assert f"\n{param} : " in doc, param
    shown = pydoc.render_doc(function, renderer=pydoc.plaintext)  # what help() prints
    for f in dataclasses.fields(experiment(name).settings):
        assert f"{f.name}: " in shown and f"\n    {f.name} : " in shown, f.name
    for f in dataclasses.fields(experiment(name).settings):
        entry = doc.split(f"\n{f.name} : ", 1)[1].split("\n", 1)[0]
        assert entry.endswith(f"default {f.default!r}"), entry
        body = " ".join(doc.split(f"\n{f.name} : ", 1)[1].split("\n")[1:4])
        help_text = " ".join(str(f.metadata["help"]).split())
        assert " ".join(body.split()).lower().startswith(help_text.lower()[:30]), f.name


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_the_cli_option_of_every_setting_keeps_the_signatures_default(name):
    function_name, command = FUNCTIONS[name]
    cls = experiment(name).settings
    parser = _subparser(command)
    params = inspect.signature(getattr(ac, function_name)).parameters
    by_dest = {a.dest: a for a in parser._actions}
    for f in dataclasses.fields(cls):
        if name == "predictor" and f.name == "predictor":
            continue  # `predictor apply FILE`: the file is the command's positional argument
        action = by_dest[f.name]
        flag = experiment(name).command.flags.get(f.name, ("--" + f.name.replace("_", "-"),))[0]
        assert flag in action.option_strings
        default = params[f.name].default
        shown = (
            ",".join(map(str, default))
            if isinstance(default, tuple)
            else f"{default:g}"
            if isinstance(default, float)
            else str(default)
        )
        assert action.help.endswith(f"(default: {shown})"), action.help
    # Left out on the command line, every option keeps the dataclass default (`predictor
    # apply shipped` names the default predictor).
    args = parser.parse_args(["shipped", "m"] if name == "predictor" else ["m"])
    chosen = settings_from(cls, settings_values(args, cls))
    for f in dataclasses.fields(cls):
        assert getattr(chosen, f.name) == params[f.name].default


def test_a_function_that_lost_a_setting_fails_when_it_is_made():
    def flips(source, *, sink="first", metrics=(), n_boot=200):  # no tol
        raise AssertionError("never called")

    with pytest.raises(ac.AttncodaError, match=r"must take every field of flips's Settings"):
        api_signatures.experiment_function("flips", "Flips.")(flips)


# Each call is refused, in one fresh process, before torch or transformers is imported and
# before its `out` folder is made.
BAD_CALLS = [
    ("ac.flips('minilm', n_boot=-1, out=OUT)", "n_boot must be an integer of at least 1; got -1"),
    ("ac.flips('minilm', n_boot=2.5, out=OUT)", "n_boot must be an integer of at least 1; got 2.5"),
    (
        "ac.flips('minilm', n_bootstrap=3, out=OUT)",
        "unknown setting 'n_bootstrap' of flips: use one of docs, max_tokens, metrics, n_boot, "
        "tol (or the options sink, seed, device, device_map, max_memory, offload_folder, "
        "dtype, method, kernel, out, text, names)",
    ),
    (
        "ac.flips('minilm', metrics=['jsd', 'l2'], out=OUT)",
        "unknown metric 'l2' in metrics: use a list of cosine, jsd, entropy_gap, hellinger, tv",
    ),
    (
        "ac.flips('minilm', metrics=[], out=OUT)",
        "metrics is empty: give a list of cosine, jsd, entropy_gap, hellinger, tv",
    ),
    (
        "ac.flips('minilm', tol=-1e-3, out=OUT)",
        "tol must be a finite number of at least 0; got -0.001",
    ),
    (
        "ac.cluster('minilm', n_clusters=1, out=OUT)",
        "n_clusters must be an integer of at least 2; got 1",
    ),
    (
        "ac.safety('minilm', threshold=1.5, out=OUT)",
        "threshold must be a number above 0 and at most 1; got 1.5",
    ),
    ("ac.prune('smollm2', ks=[4, 0], out=OUT)", "ks holds 0: every head count must be at least 1"),
    (
        "ac.prune('smollm2', orders='up', out=OUT)",
        "unknown order 'up' in orders: use a list of high, low",
    ),
    ("ac.profile('minilm', tokens=0, out=OUT)", "tokens must be an integer of at least 1; got 0"),
    (
        "ac.collapse('series', docs=True, out=OUT)",
        "docs must be an integer of at least 1; got True",
    ),
    (
        "ac.predict('minilm', predictor='no.json', out=OUT)",
        "predictor file 'no.json' does not exist: give a file written by 'attncoda predictor "
        "fit', or 'shipped'",
    ),
    ("ac.flips('minilm', seed=-1, out=OUT)", "seed must be an integer of at least 0; got -1"),
    (
        "ac.flips('minilm', method='quick', out=OUT)",
        "unknown method 'quick': use one of auto, exact, fast",
    ),
    (
        "ac.profile('minilm', device='cuda', device_map='auto', out=OUT)",
        "device='cuda' and device_map='auto' both say where models run: drop device= (the map "
        "places every module) or drop device_map=",
    ),
    (
        "ac.profile('minilm', device_map='everywhere', out=OUT)",
        "unknown device_map 'everywhere': use one of auto, balanced, balanced_low_0, "
        "sequential, or a dict {module name: device}",
    ),
    (
        "ac.profile('minilm', device_map={'model': 'gpu'}, out=OUT)",
        "device_map['model'] = 'gpu': use a GPU index such as 0, a device such as 'cuda:1' or "
        "'mps', 'cpu' or 'disk'",
    ),
    (
        "ac.flips('minilm', method='fast', kernel='cuda', out=OUT)",
        "unknown kernel 'cuda': use one of auto, triton, cpp, sdpa",
    ),
]

_SCRIPT = """
import sys, attncoda as ac
from pathlib import Path
OUT = Path(sys.argv[1])
try:
    {call}
except ac.AttncodaError as exc:
    print(str(exc))
else:
    print('no error')
print('transformers' in sys.modules or 'torch' in sys.modules, OUT.exists())
"""


def test_a_bad_call_is_refused_before_any_model_and_any_folder(tmp_path):
    script = "".join(
        _SCRIPT.replace("{call}", call).replace(
            "OUT = Path(sys.argv[1])", f"OUT = Path(sys.argv[1]) / 'o{i}'"
        )
        for i, (call, _) in enumerate(BAD_CALLS)
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2 * len(BAD_CALLS)
    for (call, message), got, after in zip(BAD_CALLS, lines[::2], lines[1::2], strict=True):
        assert got == message, call
        assert after == "False False", f"{call}: a model was loaded or its folder made"
    assert list(tmp_path.iterdir()) == []
