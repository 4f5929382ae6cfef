"""mkdocs hook: the CLI reference page, generated from ``attncoda.cli.build_parser()``.

A line ``<!-- attncoda:cli -->`` in a page becomes one section per command (and per
subcommand of ``predictor``): its help, description, usage and a table of every option
with its default, walked from the argparse parsers themselves, so the page cannot drift
from ``attncoda --help``.
"""

from __future__ import annotations

import argparse
import html
import re
from collections.abc import Iterator

MARKER = "<!-- attncoda:cli -->"
#: A settings option's default lives in its help (its argparse default is None, so that
#: the dataclass default applies): ``... (default: 200)``.
_DEFAULT_IN_HELP = re.compile(r"\s*\(default: ([^()]*)\)$")


def _subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, help, parser)`` of each direct subcommand of ``parser``, in order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _cell(text: str) -> str:
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _option(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    takes = action.nargs != 0
    if action.choices and action.metavar is None:
        metavar = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        metavar = action.metavar or action.dest.upper()
    shown = [f"`{s} {metavar}`" if takes else f"`{s}`" for s in action.option_strings]
    return ", ".join(shown)


def _default(action: argparse.Action, text: str) -> tuple[str, str]:
    """The default an option shows, and its help without a trailing ``(default: ...)``."""
    found = _DEFAULT_IN_HELP.search(text)
    if found:
        text = text[: found.start()]
    if action.nargs == 0 or action.default is argparse.SUPPRESS:
        return "", text
    if action.default is None:
        if not found:
            return "", text
        said = found.group(1)
        # A default told in words ("the embedded one") is prose, not a value to type.
        return (said if " " in said else f"`{said}`"), text
    value = action.default
    if isinstance(value, tuple | list):
        value = ",".join(map(str, value))
    return f"`{value}`", text


def _options(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        default, text = _default(action, formatter._expand_help(action) if action.help else "")
        rows.append(f"| {_option(action)} | {default} | {_cell(text)} |")
    if not rows:
        return []
    return ["| option | default | what it is |", "| --- | --- | --- |", *rows, ""]


def _section(
    name: str, helptext: str, parser: argparse.ArgumentParser, level: int
) -> Iterator[str]:
    yield f"{'#' * level} `{name}`"
    yield ""
    if helptext:
        yield helptext[0].upper() + helptext[1:] + "."
        yield ""
    if parser.description:
        yield " ".join(parser.description.split())
        yield ""
    yield "```console"
    yield parser.format_usage().strip()
    yield "```"
    yield ""
    yield from _options(parser)
    for sub_name, sub_help, sub in _subcommands(parser):
        yield from _section(f"{name} {sub_name}", sub_help, sub, level + 1)


def reference() -> str:
    """The markdown of every command's section, from the live parser."""
    from attncoda.cli import build_parser

    parser = build_parser()
    lines = [" ".join((parser.description or "").split()), ""]
    lines += ["```console", parser.format_usage().strip(), "```", ""]
    lines += _options(parser)
    for name, helptext, sub in _subcommands(parser):
        lines += list(_section(f"attncoda {name}", helptext, sub, 2))
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference())
