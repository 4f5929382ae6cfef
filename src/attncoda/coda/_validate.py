"""Argument checks shared by the public functions of :mod:`attncoda.coda`.

Every check raises :class:`attncoda.AttncodaError` with a message that names the offending
value and says what to do instead. The private maths never validates; the public functions
call these first.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import array_api_compat
import numpy as np

from attncoda._errors import AttncodaError
from attncoda.coda import _math

CLASSIC_METRICS = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")
COMPOSITIONAL_METRICS = ("aitchison", "aitchison_sink", "aitchison_content")
METRICS = CLASSIC_METRICS + COMPOSITIONAL_METRICS
CONVENTIONS = ("keep", "drop")


def to_numpy(x: Any) -> np.ndarray:
    """A host numpy copy of ``x`` (used only to build error messages and small indices)."""
    if array_api_compat.is_torch_array(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def as_array(x: Any, name: str) -> tuple[Any, Any]:
    """Return ``(xp, x)``: the array namespace and ``x`` as a real floating array.

    Lists and tuples become numpy arrays; integer and boolean arrays become the namespace's
    default floating dtype (float64 for numpy, float32 for torch).
    """
    if isinstance(x, (list, tuple)) or isinstance(x, numbers.Number):
        x = np.asarray(x, dtype=np.float64)
    try:
        xp = array_api_compat.array_namespace(x)
    except TypeError as exc:
        raise AttncodaError(
            f"{name} must be a numpy array or a torch tensor; got {type(x).__name__}"
        ) from exc
    if xp.isdtype(x.dtype, "complex floating"):
        raise AttncodaError(f"{name} must be real; got dtype {x.dtype}")
    if not xp.isdtype(x.dtype, "real floating"):
        default = xp.float64 if array_api_compat.is_numpy_namespace(xp) else xp.float32
        x = xp.astype(x, default)
    if x.ndim == 0:
        raise AttncodaError(f"{name} must have at least one axis (the keys); got a scalar")
    return xp, x


def namespace_of(a: Any, b: Any, names: tuple[str, str]) -> tuple[Any, Any, Any]:
    """Check two arrays share one namespace and broadcast; return ``(xp, a, b)``."""
    xp_a, a = as_array(a, names[0])
    xp_b, b = as_array(b, names[1])
    if xp_a is not xp_b:
        raise AttncodaError(
            f"{names[0]} and {names[1]} must be the same kind of array; "
            f"got {type(a).__name__} and {type(b).__name__}"
        )
    if a.dtype != b.dtype:
        raise AttncodaError(
            f"{names[0]} and {names[1]} must have the same dtype; got {a.dtype} and {b.dtype}"
        )
    try:
        np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except ValueError as exc:
        raise AttncodaError(
            f"{names[0]} of shape {tuple(a.shape)} and {names[1]} of shape {tuple(b.shape)} "
            "do not broadcast; give rows over the same keys"
        ) from exc
    return xp_a, a, b


def move_axis_last(xp: Any, x: Any, axis: int, name: str) -> Any:
    """Move ``axis`` (the keys) to the end, with a clear error when it does not exist."""
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise AttncodaError(f"axis must be an int; got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise AttncodaError(
            f"axis {axis} is out of range for {name} with {x.ndim} axes (shape {tuple(x.shape)})"
        )
    axis = int(axis) % x.ndim
    return x if axis == x.ndim - 1 else xp.moveaxis(x, axis, -1)


def sink_positions(sink: Any, n_keys: int) -> tuple[int, ...]:
    """Normalise ``sink`` (an int or a sequence of distinct ints) for rows of ``n_keys`` keys.

    Returns the sorted positions. Raises when a position is out of range, repeated, or when the
    sink covers every key (no content would remain).
    """
    if isinstance(sink, bool) or not (
        isinstance(sink, numbers.Integral)
        or (isinstance(sink, Sequence) and not isinstance(sink, str))
        or (isinstance(sink, np.ndarray) and sink.ndim == 1)
    ):
        raise AttncodaError(
            f"sink must be an int or a sequence of distinct ints (key positions); got {sink!r}"
        )
    positions = [sink] if isinstance(sink, numbers.Integral) else list(sink)
    if not positions:
        raise AttncodaError("sink must name at least one key position; got an empty sequence")
    for s in positions:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise AttncodaError(
                f"sink must be an int or a sequence of distinct ints (key positions); got {sink!r}"
            )
        if not 0 <= int(s) < n_keys:
            raise AttncodaError(
                f"sink index {int(s)} is out of range for rows of {n_keys} keys: "
                f"use a position in 0..{n_keys - 1}"
            )
    clean = [int(s) for s in positions]
    if len(set(clean)) != len(clean):
        raise AttncodaError(f"sink positions must be distinct; got {clean}")
    if len(clean) == n_keys:
        raise AttncodaError(
            f"sink {clean} covers all {n_keys} keys of each row: no content keys remain; "
            "use fewer sink positions or longer rows"
        )
    return tuple(sorted(clean))


def first_index(mask: Any) -> tuple[int, ...]:
    """The index of the first True entry of ``mask`` (for error messages)."""
    return tuple(int(i) for i in np.argwhere(to_numpy(mask))[0])


def worst_index(values: np.ndarray) -> tuple[int, ...]:
    """The index of the largest entry of a host array (``()`` for a scalar)."""
    return tuple(int(i) for i in np.unravel_index(int(values.argmax()), values.shape))


def check_logs(xp: Any, z: Any, name: str, *, allow_neg_inf: bool) -> None:
    """Refuse NaN and +inf; refuse -inf too unless ``allow_neg_inf`` (a zero probability)."""
    if bool(xp.all(xp.isfinite(xp.sum(z)))):
        return  # one pass: a finite sum has no NaN or infinite entry
    bad = xp.isnan(z)
    if bool(xp.any(bad)):
        raise AttncodaError(
            f"{name} contains NaN at index {first_index(bad)}: rows must be finite "
            "log-probabilities or logits"
        )
    bad = xp.isinf(z) & (z > 0)
    if bool(xp.any(bad)):
        raise AttncodaError(
            f"{name} contains +inf at index {first_index(bad)}: rows must be finite "
            "log-probabilities or logits"
        )
    if not allow_neg_inf:
        bad = xp.isinf(z)
        if bool(xp.any(bad)):
            raise AttncodaError(
                f"{name} contains -inf (a probability of exactly 0) at index "
                f"{first_index(bad)}: log-ratio (Aitchison) quantities need every key to "
                "have positive mass; rebuild the rows with log_probs(p, zeros='replace') or "
                "pass logits"
            )


def check_convention(metric: str, convention: Any) -> None:
    """Classic metrics need an explicit convention; compositional ones take none."""
    if not isinstance(metric, str) or metric not in METRICS:
        raise AttncodaError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}")
    if metric in COMPOSITIONAL_METRICS:
        if convention is not None:
            raise AttncodaError(
                f"metric {metric!r} takes no convention (got convention={convention!r}): it "
                "is computed on the whole composition and splits exactly into sink and "
                "content parts; leave convention out"
            )
        return
    if convention is None:
        raise AttncodaError(
            f"metric {metric!r} needs convention='keep' (the row as is, sink included) or "
            "convention='drop' (sink keys removed, the rest renormalised): the two answer "
            "different questions, so there is no default"
        )
    if convention not in CONVENTIONS:
        raise AttncodaError(f"convention must be 'keep' or 'drop'; got {convention!r}")


def check_rows(x: Any, name: str, axis: int, *, allow_neg_inf: bool) -> tuple[Any, Any]:
    """``(xp, x)``: one array of logs, keys last, checked as :func:`check_logs` does."""
    xp, x = as_array(x, name)
    x = move_axis_last(xp, x, axis, name)
    check_logs(xp, x, name, allow_neg_inf=allow_neg_inf)
    return xp, x


def check_pair(
    a: Any, b: Any, names: tuple[str, str], axis: int, *, allow_neg_inf: bool
) -> tuple[Any, Any, Any]:
    """``(xp, a, b)``: two arrays of logs in one namespace, keys last, same key count."""
    xp, a, b = namespace_of(a, b, names)
    a = move_axis_last(xp, a, axis, names[0])
    b = move_axis_last(xp, b, axis, names[1])
    if a.shape[-1] != b.shape[-1]:
        raise AttncodaError(
            f"{names[0]} and {names[1]} must have the same number of keys along axis {axis}; "
            f"got {a.shape[-1]} and {b.shape[-1]}"
        )
    check_logs(xp, a, names[0], allow_neg_inf=allow_neg_inf)
    check_logs(xp, b, names[1], allow_neg_inf=allow_neg_inf)
    return xp, a, b


def closed_logs(xp: Any, z: Any, name: str) -> Any:
    """``z`` renormalised along the last axis (each row's logsumexp subtracted)."""
    lse = _math.logsumexp(xp, z)
    check_mass(xp, lse, name, "has no key with positive probability (every entry is -inf)")
    return z - lse[..., None]


def check_mass(xp: Any, logmass: Any, name: str, lacks: str) -> None:
    """Refuse a row of ``name`` whose log-mass is not finite (``-inf``: no mass at all); the
    message names the first such row (``name`` alone for a single row), then ``lacks``."""
    bad = ~xp.isfinite(logmass)
    if bool(xp.any(bad)):
        where = first_index(bad)
        raise AttncodaError(f"{f'row {where} of {name}' if where else name} {lacks}")
