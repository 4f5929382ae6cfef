"""One setting of an experiment: a field of its ``Settings`` dataclass that carries its help
and the values it allows (docs/design.md, "The experiment contract").

:func:`setting` makes the field; its metadata is the one source that the Python API's
signatures and docstrings (:mod:`attncoda.api`), the command-line options
(:mod:`attncoda.cli._args`) and every check of a value read. :func:`check_settings` checks a
whole set of values before anything is loaded or written, naming each value by the label the
caller gives it (``n_boot`` in Python, ``--n-boot`` on the command line).

A field's kind comes from its default: an int, a float, a str, or a tuple of ints or of
names (a list in Python, a comma list on the command line).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError

__all__ = [
    "RENAMED",
    "Allowed",
    "allowed_text",
    "check_setting",
    "check_settings",
    "renamed_settings",
    "setting",
]

#: Settings renamed, old name to new: the old name is read for one release with a
#: DeprecationWarning (``tokens`` was the window length; token ids are ``tokens`` elsewhere).
RENAMED = {"tokens": "max_tokens"}


@dataclass(frozen=True)
class Allowed:
    """The values a setting allows, beyond the kind its default gives it.

    Attributes
    ----------
    at_least : float, optional
        The smallest value of a number (of each item of a tuple of ints).
    above : float, optional
        A float must be greater than this.
    at_most : float, optional
        A float must be at most this.
    choices : tuple of str, optional
        The names a tuple of names may hold (each at most once).
    item : str
        What one item of a tuple is called in messages (``"metric"``).
    check : callable, optional
        ``check(value)``: a further check of a str (a file that must parse); it raises
        :class:`AttncodaError` with its own message.
    """

    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    choices: tuple[str, ...] | None = None
    item: str = "value"
    check: Callable[[Any], Any] | None = None


def setting(default: Any, help: str, **allowed: Any) -> Any:
    """A ``Settings`` field with default ``default``, help text ``help`` (lowercase, no
    full stop: it is the docstring's and the option's text) and the keywords of
    :class:`Allowed`."""
    metadata = {"help": help, "allowed": Allowed(**allowed)}
    return dataclasses.field(default=default, metadata=metadata)


def _allowed(f: dataclasses.Field[Any]) -> Allowed:
    return f.metadata.get("allowed") or Allowed()


def _bound(value: float) -> str:
    return f"{value:g}"


def _number_text(a: Allowed) -> str:
    """``"a finite number of at least 0"``, ``"a number above 0 and at most 1"``."""
    low = (
        f" above {_bound(a.above)}"
        if a.above is not None
        else f" of at least {_bound(a.at_least)}"
        if a.at_least is not None
        else ""
    )
    if a.at_most is None:
        return f"a finite number{low}"
    return f"a number{low}{' and' if low else ''} at most {_bound(a.at_most)}"


def allowed_text(f: dataclasses.Field[Any]) -> str:
    """What the field allows, in words (the API docstring says it beside the help)."""
    a, default = _allowed(f), f.default
    if isinstance(default, tuple):
        if a.choices is not None:
            return f"some of {', '.join(a.choices)}, each at most once"
        if a.at_least is not None:
            return f"{a.item}s of at least {_bound(a.at_least)}"
        return f"{a.item}s"
    if isinstance(default, bool):
        return "True or False"
    if isinstance(default, int):
        least = f" of at least {_bound(a.at_least)}" if a.at_least is not None else ""
        return f"an integer{least}"
    if isinstance(default, float):
        return _number_text(a)
    return "a str"


def check_setting(
    f: dataclasses.Field[Any], value: Any, label: str, *, listing: str = "a list"
) -> Any:
    """``value`` for the field ``f``, checked (a list made a tuple, a single name a tuple of
    one, an int given for a float a float).

    Parameters
    ----------
    f : dataclasses.Field
        A field of a settings dataclass.
    value : object
        The value given.
    label : str
        How the message names the value (``"n_boot"``, ``"--n-boot"``).
    listing : str
        How the message asks for several values (``"a list"``, ``"a comma list"``).

    Raises
    ------
    AttncodaError
        Naming ``label`` and the value, and saying what to give.
    """
    a, default = _allowed(f), f.default
    if isinstance(default, tuple):
        return _check_tuple(a, default, value, label, listing)
    if default is None or default is dataclasses.MISSING:
        return tuple(value) if isinstance(value, list) else value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise AttncodaError(f"{label} must be True or False; got {value!r}")
        return value
    if isinstance(default, int):
        least = a.at_least
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or (least is not None and value < least)
        ):
            what = f" of at least {_bound(least)}" if least is not None else ""
            raise AttncodaError(f"{label} must be an integer{what}; got {value!r}")
        return int(value)
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise AttncodaError(f"{label} must be {_number_text(a)}; got {value!r}")
        number = float(value)
        ok = math.isfinite(number)
        ok = ok and (a.above is None or number > a.above)
        ok = ok and (a.at_least is None or number >= a.at_least)
        ok = ok and (a.at_most is None or number <= a.at_most)
        if not ok:
            raise AttncodaError(f"{label} must be {_number_text(a)}; got {value!r}")
        return number
    if not isinstance(value, str):
        raise AttncodaError(f"{label} must be a str; got {value!r}")
    if a.check is not None:
        a.check(value)
    return value


def _check_tuple(a: Allowed, default: tuple[Any, ...], value: Any, label: str, listing: str):
    names = not (default and all(isinstance(v, int) for v in default))
    if names and isinstance(value, str):
        value = (value,)
    if not isinstance(value, list | tuple):
        kind = "names" if names else f"{a.item}s"
        raise AttncodaError(f"{label} must be {listing} of {kind}; got {value!r}")
    items = tuple(value)
    if not items:
        if a.choices is not None:
            raise AttncodaError(f"{label} is empty: give {listing} of {', '.join(a.choices)}")
        example = "1,2,4" if listing == "a comma list" else "[1, 2, 4]"
        raise AttncodaError(f"{label} is empty: give {listing} of {a.item}s, e.g. {example}")
    if names:
        bad = [v for v in items if not isinstance(v, str)]
        if bad:
            raise AttncodaError(f"{label} holds {bad[0]!r}: every {a.item} is a name (a str)")
        if a.choices is not None:
            unknown = [v for v in items if v not in a.choices]
            if unknown:
                raise AttncodaError(
                    f"unknown {a.item} {', '.join(repr(u) for u in unknown)} in {label}: use "
                    f"{listing} of {', '.join(a.choices)}"
                )
            twice = next((v for i, v in enumerate(items) if v in items[:i]), None)
            if twice is not None:
                raise AttncodaError(f"{label} holds {twice!r} twice: give each {a.item} once")
        return items
    for v in items:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise AttncodaError(f"{label} holds {v!r}: every {a.item} is an integer")
        if a.at_least is not None and v < a.at_least:
            raise AttncodaError(
                f"{label} holds {v}: every {a.item} must be at least {_bound(a.at_least)}"
            )
    return tuple(int(v) for v in items)


def check_settings(
    cls: type,
    values: Mapping[str, Any] | None = None,
    *,
    label: Callable[[str], str] = str,
    listing: str = "a list",
) -> dict[str, Any]:
    """The ``values`` of the settings dataclass ``cls``, each checked by
    :func:`check_setting`; an unknown name is an error that names it and the known ones.

    ``label(name)`` is how a message names the field ``name``. Only the values given are
    returned (the others keep the dataclass default).
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = renamed_settings(values, fields)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise AttncodaError(
            f"unknown setting {unknown[0]!r} of {_experiment_name(cls)}: "
            f"use one of {', '.join(sorted(fields))}"
        )
    return {
        name: check_setting(fields[name], value, label(name), listing=listing)
        for name, value in values.items()
    }


def renamed_settings(
    values: Mapping[str, Any] | None, fields: Iterable[str], *, spelled: str = "{}"
) -> dict[str, Any]:
    """``values`` with each old name of :data:`RENAMED` that ``fields`` knows by its new
    name, with a :class:`DeprecationWarning` that names the new one (``spelled`` formats a
    name as the caller writes it: ``"{}="`` in Python)."""
    out = dict(values or {})
    for old, new in RENAMED.items():
        if old in out and old not in fields and new in fields:
            if new in out:
                raise AttncodaError(
                    f"{spelled.format(old)} and {spelled.format(new)} are one setting: "
                    f"give {spelled.format(new)} alone"
                )
            warnings.warn(
                f"{spelled.format(old)} is now {spelled.format(new)} (the window length); "
                f"the old name goes in the next release",
                DeprecationWarning,
                stacklevel=4,
            )
            out[new] = out.pop(old)
    return out


def _experiment_name(cls: type) -> str:
    """The experiment whose ``Settings`` ``cls`` is: ``attncoda.experiments.flips._experiment``
    (or a module of the same name elsewhere) gives ``flips``."""
    parts = cls.__module__.split(".")
    if parts[:2] == ["attncoda", "experiments"] and len(parts) > 2:
        return parts[2]
    return parts[-1]
