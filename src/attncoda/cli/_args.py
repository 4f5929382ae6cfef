"""Command-line options built from settings dataclasses, and every check made after parsing
and before anything is loaded.

:func:`add_settings` turns each field of an experiment's ``Settings`` (or of
:class:`attncoda.run.config.Rows`) into an option: field ``n_boot`` -> ``--n-boot``, the type
from its default (a tuple becomes a comma list of its items' type), the help from the
field's metadata ``"help"``. Options left out keep the dataclass default, which stays the
only default. :func:`validate` checks each settings option by its field
(:func:`attncoda.experiments.contract.check_setting`: the ranges and names the field allows,
the one source the Python API checks too), and reads the other parsed arguments by name, so
each check is written once for every command that has the option: integers and their
ranges, finite numbers, sink specs, experiment names, corpus files that exist and hold
text, predictor files that parse, saved-attention files that exist. It imports neither
torch nor transformers, so a bad call is refused in well under a second.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.capture.names import ATTENTION_FILES

__all__ = [
    "AT_LEAST",
    "Parser",
    "add_options",
    "add_settings",
    "bind_setting",
    "ints",
    "names",
    "settings_values",
    "validate",
]

#: The smallest value of each integer option that is no settings field (by its argparse
#: destination; a settings field's own metadata says what it allows).
AT_LEAST = {
    "train_steps": 1,
    "steps": 1,
    "window": 2,
    "batch_size": 1,
    "threads": 1,
    "retries": 0,
    "ray_local": 1,
    "seed": 0,
}
#: Float options that are no settings field, and the open range each must lie in:
#: (low, high, what).
FLOAT_RANGES = {
    "lr": (0.0, math.inf, "a finite number above 0"),
}
#: Where every option destination that is no settings field and holds names from a fixed
#: list gets them, and what one of them is called in a message.
_CHOICES = {
    "experiments": ("attncoda.experiments.contract", "EXPERIMENTS", "experiment"),
}
#: The flag each destination is written as, for the messages (set by :func:`add_settings`
#: and the commands; the default: ``--`` and the destination with dashes).
_FLAGS = "_flags"
#: The settings field each destination of a settings option checks its value by (set by
#: :func:`add_settings` and :func:`bind_setting`).
_FIELDS = "_setting_fields"


def names(text: str) -> tuple[str, ...]:
    """A comma list of names (blanks dropped)."""
    return tuple(v.strip() for v in text.split(",") if v.strip())


def ints(text: str) -> tuple[int, ...]:
    """A comma list of integers."""
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of integers; got {text!r}"
        ) from exc


def _kind(default: Any) -> tuple[Any, str]:
    """The argparse type of a field with ``default``, and how its help names it."""
    if isinstance(default, tuple):
        if default and all(isinstance(v, int) and not isinstance(v, bool) for v in default):
            return ints, ",".join(map(str, default))
        return names, ",".join(map(str, default))
    if isinstance(default, bool):
        raise AttncodaError("a settings field with a bool default has no option form")
    if isinstance(default, int):
        return int, str(default)
    if isinstance(default, float):
        return float, f"{default:g}"
    return str, str(default)


def add_settings(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    flags: Mapping[str, Sequence[str]] | None = None,
    prefix: str = "",
    skip: Sequence[str] = (),
) -> None:
    """One option per field of the settings dataclass ``cls``: ``--<prefix><field-name>``,
    destination ``<prefix><field_name>``, default ``None`` (the dataclass default applies;
    the help says which it is). ``flags`` gives a field other option strings (an older name
    beside the new one); the first names the option in messages."""
    shown_as = dict(parser.get_default(_FLAGS) or {})
    checked = dict(parser.get_default(_FIELDS) or {})
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        dest = prefix + f.name
        strings = tuple((flags or {}).get(f.name, ())) or ("--" + dest.replace("_", "-"),)
        if isinstance(f.default, bool):  # a switch; given, it says the opposite of the default
            parser.add_argument(
                *strings,
                dest=dest,
                action="store_false" if f.default else "store_true",
                default=None,
                help=f.metadata.get("help", f.name),
            )
            shown_as[dest] = strings[0]
            checked[dest] = f
            continue
        kind, shown = _kind(f.default)
        parser.add_argument(
            *strings,
            dest=dest,
            type=kind,
            metavar="LIST" if kind in (ints, names) else None,
            help=f"{f.metadata.get('help', f.name)} (default: {shown})",
        )
        shown_as[dest] = strings[0]
        checked[dest] = f
    parser.set_defaults(**{_FLAGS: shown_as, _FIELDS: checked})


def bind_setting(parser: argparse.ArgumentParser, dest: str, cls: type, name: str) -> None:
    """Check the option ``dest`` of ``parser`` (one added by hand, such as reproduce's
    ``--n-boot``) by the field ``name`` of the settings dataclass ``cls``."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    checked = dict(parser.get_default(_FIELDS) or {})
    checked[dest] = fields[name]
    parser.set_defaults(**{_FIELDS: checked})


def settings_values(args: argparse.Namespace, cls: type, *, prefix: str = "") -> dict[str, Any]:
    """The fields of ``cls`` given on the command line (their options not left out)."""
    values = {}
    for f in dataclasses.fields(cls):
        value = getattr(args, prefix + f.name, None)
        if value is not None:
            values[f.name] = value
    return values


def _flag(args: argparse.Namespace, dest: str) -> str:
    return (getattr(args, _FLAGS, None) or {}).get(dest, "--" + dest.replace("_", "-"))


def _settings(args: argparse.Namespace) -> None:
    from attncoda.experiments.contract import check_setting

    for dest, f in (getattr(args, _FIELDS, None) or {}).items():
        value = getattr(args, dest, None)
        if value is not None:
            check_setting(f, value, _flag(args, dest), listing="a comma list")


def _numbers(args: argparse.Namespace) -> None:
    for name, least in AT_LEAST.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise AttncodaError(
                f"{_flag(args, name)} must be an integer of at least {least}; got {value!r}"
            )
    for name, (low, high, what) in FLOAT_RANGES.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if not (math.isfinite(value) and value > low and value <= high):
            raise AttncodaError(f"{_flag(args, name)} must be {what}; got {value!r}")


def _names(args: argparse.Namespace) -> None:
    import importlib

    for dest, (module, constant, what) in _CHOICES.items():
        given = getattr(args, dest, None)
        if given is None:
            continue
        allowed = tuple(getattr(importlib.import_module(module), constant))
        flag = _flag(args, dest)
        if not given:
            raise AttncodaError(f"{flag} is empty: give a comma list of {', '.join(allowed)}")
        unknown = [g for g in given if g not in allowed]
        if unknown:
            raise AttncodaError(
                f"unknown {what} {', '.join(repr(u) for u in unknown)} in {flag}: use a "
                f"comma list of {', '.join(allowed)}"
            )


def _files(args: argparse.Namespace) -> None:
    text = getattr(args, "text", None)
    if text is not None:
        from attncoda.data.corpus import read_corpus

        read_corpus(text)  # exists, UTF-8, at least one document, or a named error
    for name in ("attentions", "tokens"):
        value = getattr(args, name, None)
        files = [value] if isinstance(value, str) else list(value or [])
        for file in files:
            if not Path(file).is_file():
                kind = "attention" if name == "attentions" else "token"
                raise AttncodaError(f"{kind} file {file!r} does not exist")
            if name == "attentions" and Path(file).suffix not in ATTENTION_FILES:
                raise AttncodaError(
                    f"attention file {file!r} is not one of {', '.join(ATTENTION_FILES)}: save "
                    f"the array with numpy.savez, torch.save or safetensors"
                )


def add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per field of the capture options ``cls`` (declared with
    :func:`~attncoda.capture.options.option`): ``--<field-name>``, its choices, type, metavar
    and help from the field, default None (the declaration's stands); :func:`validate` builds
    ``args.options`` of those given."""
    from attncoda.capture.options import about

    for f in dataclasses.fields(cls):
        declared = about(f)
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=declared.parse,
            choices=declared.choices() if declared.choices is not None else None,
            metavar=declared.metavar,
            help=declared.help_text(f.default),
        )
    parser.set_defaults(_options_class=cls)


def _options(args: argparse.Namespace) -> None:
    """Build the command's capture options (the class :func:`add_options` read, given
    options only: the others keep the declaration's default) once, as ``args.options``."""
    cls = getattr(args, "_options_class", None)
    if cls is None:
        return
    if args.device_map is None:
        for dest in ("max_memory", "offload_folder"):
            if getattr(args, dest) is not None:
                raise AttncodaError(
                    f"{_flag(args, dest)} {getattr(args, dest)} needs --device-map: add "
                    f"--device-map auto (or balanced, sequential), or drop {_flag(args, dest)}"
                )
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
    args.options = cls(**{name: value for name, value in given.items() if value is not None})


def validate(args: argparse.Namespace) -> None:
    """Check every parsed argument ``args`` has; raise the first problem.

    Raises
    ------
    AttncodaError
        With a message that names the option and its value and says what to give instead.
    """
    _settings(args)
    _numbers(args)
    models = getattr(args, "models", None)
    if isinstance(models, tuple) and not models:
        raise AttncodaError("--models is empty: give a comma list of models, e.g. smollm2,minilm")
    _names(args)
    _files(args)
    _options(args)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``attncoda: error: ...``, exit 2."""

    def error(self, message: str) -> Any:  # argparse's hook; it must not return
        self.exit(2, f"attncoda: error: {message}\n")
