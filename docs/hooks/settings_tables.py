"""mkdocs hook: each experiment's settings as a table, read from its ``Settings`` dataclass.

A line ``<!-- attncoda:settings flips -->`` becomes a table of the fields of
``experiment("flips").settings``: the keyword of the Python function, its type, its
default, the CLI option (read from the command's own argparse parser) and the field's
help, the one text both the CLI and this page show.
"""

from __future__ import annotations

import argparse
import dataclasses
import re

MARKER = re.compile(r"^<!-- attncoda:settings (\w+) -->$", re.M)


def _command(name: str) -> argparse.ArgumentParser:
    """The command whose options experiment ``name``'s settings are: its name typed with
    dashes, then its action where it has one (``predictor apply``)."""
    from attncoda.cli import build_parser
    from attncoda.experiments.contract import experiment

    command = experiment(name).command
    action = () if command is None or command.action is None else (command.action,)
    parser = build_parser()
    for word in (name.replace("_", "-"), *action):
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[word]
    return parser


def _cli_names(name: str) -> dict[str, str]:
    """How each destination of the command is written: its first flag, or its argument."""
    shown = {}
    for action in _command(name)._actions:
        shown[action.dest] = action.option_strings[0] if action.option_strings else action.dest
    return shown


def _default(value: object) -> str:
    if isinstance(value, tuple):
        return "`(" + ", ".join(repr(v) for v in value) + ("," if len(value) == 1 else "") + ")`"
    return f"`{value!r}`"


def table(name: str) -> str:
    """The markdown table of experiment ``name``'s settings."""
    from attncoda.experiments.contract import experiment

    cli = _cli_names(name)
    rows = [
        "| keyword | type | default | CLI option | what it is |",
        "| --- | --- | --- | --- | --- |",
    ]
    for f in dataclasses.fields(experiment(name).settings):
        option = cli[f.name]  # a field with no option would be a CLI that lost a setting
        kind = str(f.type).replace("|", "\\|")
        helptext = str(f.metadata.get("help", "")).replace("|", "\\|")
        rows.append(f"| `{f.name}` | `{kind}` | {_default(f.default)} | `{option}` | {helptext} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    return MARKER.sub(lambda m: table(m.group(1)), markdown)
