"""Attention rows as compositions in the Aitchison geometry: log-probabilities, clr, the
sink balance, the Aitchison distance and its exact split (docs/design.md, "The mathematics").

Every function takes numpy arrays or torch tensors (CPU or GPU), works along ``axis`` (the
keys, ``key_pos``), broadcasts over the other axes, and returns arrays of the input's type,
dtype and device. The sink ``S`` is a key position or a sequence of distinct positions; the
content ``C`` is every other key. The entropies and their split are in
:mod:`attncoda.coda.entropies`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.coda import _math
from attncoda.coda._validate import (
    as_array,
    check_pair,
    check_rows,
    first_index,
    move_axis_last,
    sink_positions,
    to_numpy,
    worst_index,
)

__all__ = [
    "AitchisonSplit",
    "aitchison",
    "aitchison_split",
    "clr",
    "log_probs",
    "sink_balance",
]

_DEFAULT_ATOL = {2: 1e-2, 4: 1e-4, 8: 1e-6}  # by itemsize: half, single, double precision


@dataclass(frozen=True)
class AitchisonSplit:
    """The exact orthogonal split of the Aitchison distance between two rows.

    ``total**2 == sink**2 + within_sink**2 + content**2`` (up to rounding). Each field has
    the rows' shape without the key axis.

    Attributes
    ----------
    total : array
        ``d_A(p, p') = ||clr(p) - clr(p')||``.
    sink : array
        ``|b - b'|``, the difference of the sink balances.
    within_sink : array
        ``d_A(p_S, p'_S)``; zero when the sink is one key.
    content : array
        ``d_A(q, q')`` with ``q = p_C / (1 - s)``; unmoved by the sink logit.
    """

    total: Any
    sink: Any
    within_sink: Any
    content: Any


def log_probs(
    p: Any,
    *,
    zeros: str = "raise",
    delta: float | None = None,
    axis: int = -1,
    atol: float | None = None,
) -> Any:
    r"""Log-probabilities of attention rows, checked.

    Parameters
    ----------
    p : array, shape (..., key_pos)
        Attention rows: finite, non-negative, each summing to 1 within ``atol``.
    zeros : {"raise", "replace"}
        What to do with entries that are exactly 0, which have no logarithm. ``"replace"``
        applies multiplicative replacement (Martín-Fernández et al. 2003, as scikit-bio's
        ``multi_replace``): zeros become ``delta`` and the other entries shrink by
        ``1 - (number of zeros) * delta``.
    delta : float, optional
        Replacement value; scikit-bio's default ``(1 / n_keys) ** 2`` when omitted.
    axis : int
        The key axis.
    atol : float, optional
        Tolerance on the row sums: 1e-6 (float64), 1e-4 (float32), 1e-2 (16-bit) by default.

    Returns
    -------
    array, same shape, dtype and device as ``p``
        ``log p`` of the closed rows (each row divided by its sum first).

    Raises
    ------
    AttncodaError
        On NaN or infinite entries, negative entries, a row sum off 1 (naming the worst row
        and its sum), or a zero under ``zeros="raise"``.

    Examples
    --------
    >>> import numpy as np
    >>> lp = log_probs(np.array([0.5, 0.25, 0.25]))
    >>> np.allclose(np.exp(lp), [0.5, 0.25, 0.25])
    True
    """
    xp, p = as_array(p, "p")
    p = move_axis_last(xp, p, axis, "p")
    if zeros not in ("raise", "replace"):
        raise AttncodaError(f"zeros must be 'raise' or 'replace'; got {zeros!r}")
    _check_entries(xp, p)
    closed = _replace_zeros(xp, _closed(xp, p, atol), zeros, delta)
    out = xp.log(closed)
    return out if axis in (-1, p.ndim - 1) else xp.moveaxis(out, -1, axis)


def _check_entries(xp: Any, p: Any) -> None:
    """Refuse a NaN, an infinite or a negative entry of ``p``, naming the first."""
    bad = ~xp.isfinite(p)
    if bool(xp.any(bad)):
        where = first_index(bad)
        value = float(to_numpy(p)[where])
        shown = "NaN" if value != value else f"{value:+}"
        raise AttncodaError(
            f"p contains {shown} at index {where}: attention rows must be finite probabilities"
        )
    bad = p < 0
    if bool(xp.any(bad)):
        where = first_index(bad)
        raise AttncodaError(
            f"p contains a negative entry {float(to_numpy(p)[where])!r} at index {where}: "
            "probabilities must be non-negative"
        )


def _closed(xp: Any, p: Any, atol: float | None) -> Any:
    """``p`` (keys last) divided by its row sums, each 1 within ``atol`` (else the worst named)."""
    tol = _DEFAULT_ATOL.get(p.dtype.itemsize if hasattr(p.dtype, "itemsize") else 8, 1e-6)
    tol = tol if atol is None else float(atol)
    sums = xp.sum(p, axis=-1)
    off = to_numpy(xp.abs(sums - 1))
    if off.size and float(off.max()) > tol:
        worst = worst_index(off)
        which = f"row {worst} sums to" if worst else "the row sums to"
        raise AttncodaError(
            f"rows of p must sum to 1 within atol={tol:g}; {which} "
            f"{float(to_numpy(sums)[worst])!r}{' (the worst row)' if worst else ''}; "
            "normalise the rows (p / p.sum(axis, keepdims=True)) or pass atol"
        )
    return p / sums[..., None]


def _replace_zeros(xp: Any, closed: Any, zeros: str, delta: float | None) -> Any:
    """``closed`` rows (keys last) without zeros: refused, or multiplicatively replaced."""
    is_zero = closed == 0
    if not bool(xp.any(is_zero)):
        return closed
    if zeros == "raise":
        raise AttncodaError(
            f"p has a zero at index {first_index(is_zero)}: a zero has no logarithm; "
            "pass zeros='replace' for multiplicative replacement (delta=(1/n_keys)**2 "
            "by default, as scikit-bio) or remove that key"
        )
    n = closed.shape[-1]
    d = (1.0 / n) ** 2 if delta is None else float(delta)
    if not d > 0:
        raise AttncodaError(f"delta must be positive; got delta={d:g}")
    n_zero = xp.sum(xp.astype(is_zero, closed.dtype), axis=-1, keepdims=True)
    shrink = 1 - n_zero * d
    if bool(xp.any(shrink <= 0)):
        raise AttncodaError(
            f"delta={d:g} is too large for rows with {int(to_numpy(n_zero).max())} zeros: "
            "zeros times delta must stay below 1; pass a smaller delta"
        )
    return xp.where(is_zero, xp.full_like(closed, d), shrink * closed)


def clr(logp: Any, axis: int = -1) -> Any:
    r"""Centred log-ratio transform of rows given as log-probabilities or logits.

    .. math:: \operatorname{clr}(p)_j = \log p_j - \frac{1}{n}\sum_l \log p_l = z_j - \bar z

    Parameters
    ----------
    logp : array, shape (..., key_pos)
        Log-probabilities or logits (clr is shift-invariant, so both give the same).
    axis : int
        The key axis.

    Returns
    -------
    array, same shape, dtype and device
        Each row sums to 0.

    Examples
    --------
    >>> import numpy as np
    >>> clr(np.log(np.array([0.5, 0.25, 0.25]))).round(4).tolist()
    [0.4621, -0.231, -0.231]
    """
    xp, z = check_rows(logp, "logp", axis, allow_neg_inf=False)
    out = _math.clr(xp, z)
    return out if axis in (-1, z.ndim - 1) else xp.moveaxis(out, -1, axis)


def sink_balance(logp: Any, sink: Any = 0, axis: int = -1) -> Any:
    r"""The ILR balance between the sink keys ``S`` and the content keys ``C``.

    .. math:: b(p) = \sqrt{\tfrac{k m}{n}}\,
              \Big(\tfrac{1}{k}\sum_{j\in S}\log p_j - \tfrac{1}{m}\sum_{j\in C}\log p_j\Big)

    Parameters
    ----------
    logp : array, shape (..., key_pos)
        Log-probabilities or logits.
    sink : int or sequence of int
        Sink key positions (default the first key).
    axis : int
        The key axis.

    Returns
    -------
    array, shape (...)
        In nats; positive when the sink keys get more than the geometric mean of the content.

    Examples
    --------
    >>> import numpy as np
    >>> round(float(sink_balance(np.log(np.array([0.8, 0.1, 0.1])))), 4)
    1.6979
    """
    xp, z = check_rows(logp, "logp", axis, allow_neg_inf=False)
    return _math.sink_balance(xp, z, sink_positions(sink, z.shape[-1]))


def aitchison(logp: Any, logq: Any, axis: int = -1) -> Any:
    r"""Aitchison distance ``||clr(p) - clr(q)||`` between rows.

    Parameters
    ----------
    logp, logq : array, shape (..., key_pos)
        Log-probabilities or logits over the same keys; broadcast against each other.
    axis : int
        The key axis.

    Returns
    -------
    array, shape (...)
    """
    xp, a, b = check_pair(logp, logq, ("logp", "logq"), axis, allow_neg_inf=False)
    return _math.norm(xp, _math.clr(xp, a) - _math.clr(xp, b))


def aitchison_split(logp: Any, logq: Any, sink: Any = 0, axis: int = -1) -> AitchisonSplit:
    r"""Aitchison distance split exactly into sink, within-sink and content terms.

    .. math:: d_A(p,p')^2 = (b - b')^2 + d_A(p_S, p'_S)^2 + d_A(q, q')^2

    The content term is ``||clr_C(z) - clr_C(z')||`` with ``clr_C(z) = z_C - mean(z_C)``: it
    does not move when the sink logit moves, nor when a constant is added to a row.

    Parameters
    ----------
    logp, logq : array, shape (..., key_pos)
        Log-probabilities or logits over the same keys.
    sink : int or sequence of int
        Sink key positions.
    axis : int
        The key axis.

    Returns
    -------
    AitchisonSplit
        Distances (not squared), each of shape (...).
    """
    xp, a, b = check_pair(logp, logq, ("logp", "logq"), axis, allow_neg_inf=False)
    s = sink_positions(sink, a.shape[-1])
    a_s, a_c = _math.split_groups(xp, a, s)
    b_s, b_c = _math.split_groups(xp, b, s)
    return AitchisonSplit(
        total=_math.norm(xp, _math.clr(xp, a) - _math.clr(xp, b)),
        sink=xp.abs(_math.sink_balance(xp, a, s) - _math.sink_balance(xp, b, s)),
        within_sink=_math.norm(xp, _math.clr(xp, a_s) - _math.clr(xp, b_s)),
        content=_math.norm(xp, _math.clr(xp, a_c) - _math.clr(xp, b_c)),
    )
