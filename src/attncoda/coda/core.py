"""Attention rows as compositions: log-probabilities, clr, the sink balance, the exact
Aitchison and entropy splits (docs/design.md, "The mathematics").

Every function takes numpy arrays or torch tensors (CPU or GPU), works along ``axis`` (the
keys, ``key_pos``), broadcasts over the other axes, and returns arrays of the input's type,
dtype and device. All entropies are in nats. The sink ``S`` is a key position or a sequence
of distinct positions; the content ``C`` is every other key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.coda import _math
from attncoda.coda._validate import (
    as_array,
    check_logs,
    check_mass,
    check_pair,
    closed_logs,
    first_index,
    move_axis_last,
    sink_positions,
    to_numpy,
    worst_index,
)

__all__ = [
    "AitchisonSplit",
    "EntropyChange",
    "EntropySplit",
    "aitchison",
    "aitchison_split",
    "clr",
    "entropy",
    "entropy_change_split",
    "entropy_split",
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


@dataclass(frozen=True)
class EntropySplit:
    """The exact entropy identity ``H(p) = h(s) + s H(p_S/s) + (1-s) H(q)``, in nats.

    Attributes
    ----------
    total : array
        ``H(p)``.
    binary : array
        ``h(s) = -s log s - (1-s) log(1-s)``: how undecided the row is between sink and
        content.
    within_sink : array
        ``H(p_S / s)``, the entropy of the sink part on its own (0 for a one-key sink).
    content : array
        ``H(q)``, the entropy of the content composition ``q = p_C / (1 - s)``.
    sink_mass : array
        ``s``, the mass on the sink keys.

    Notes
    -----
    ``within_sink`` and ``content`` are entropies of the parts, not weighted terms:
    ``total == binary + sink_mass * within_sink + (1 - sink_mass) * content``.
    """

    total: Any
    binary: Any
    within_sink: Any
    content: Any
    sink_mass: Any


@dataclass(frozen=True)
class EntropyChange:
    """The two-factor Shapley split of an entropy change between two states, in nats.

    Attributes
    ----------
    total : array
        ``H(p1) - H(p0)``.
    sink : array
        The part due to the sink (its mass and its internal spread): ``total - content``.
    content : array
        ``((1-s0) + (1-s1)) / 2 * (H(q1) - H(q0))``: the part due to attention sharpening or
        spreading among content keys.

    Notes
    -----
    ``sink + content == total`` exactly, and the parts stay additive under any average over
    rows, heads or layers, so "x% of the entropy drop is the sink" is well defined.
    """

    total: Any
    sink: Any
    content: Any


def _rows(x: Any, name: str, axis: int, *, allow_neg_inf: bool) -> tuple[Any, Any]:
    xp, x = as_array(x, name)
    x = move_axis_last(xp, x, axis, name)
    check_logs(xp, x, name, allow_neg_inf=allow_neg_inf)
    return xp, x


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
    closed = p / sums[..., None]
    is_zero = closed == 0
    if bool(xp.any(is_zero)):
        if zeros == "raise":
            raise AttncodaError(
                f"p has a zero at index {first_index(is_zero)}: a zero has no logarithm; "
                "pass zeros='replace' for multiplicative replacement (delta=(1/n_keys)**2 "
                "by default, as scikit-bio) or remove that key"
            )
        n = p.shape[-1]
        d = (1.0 / n) ** 2 if delta is None else float(delta)
        if not d > 0:
            raise AttncodaError(f"delta must be positive; got delta={d:g}")
        n_zero = xp.sum(xp.astype(is_zero, p.dtype), axis=-1, keepdims=True)
        shrink = 1 - n_zero * d
        if bool(xp.any(shrink <= 0)):
            raise AttncodaError(
                f"delta={d:g} is too large for rows with {int(to_numpy(n_zero).max())} zeros: "
                "zeros times delta must stay below 1; pass a smaller delta"
            )
        closed = xp.where(is_zero, xp.full_like(closed, d), shrink * closed)
    out = xp.log(closed)
    return out if axis in (-1, p.ndim - 1) else xp.moveaxis(out, -1, axis)


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
    xp, z = _rows(logp, "logp", axis, allow_neg_inf=False)
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
    xp, z = _rows(logp, "logp", axis, allow_neg_inf=False)
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


def entropy(logp: Any, axis: int = -1) -> Any:
    r"""Shannon entropy ``H(p) = -sum_j p_j log p_j`` of rows, in nats.

    Parameters
    ----------
    logp : array, shape (..., key_pos)
        Log-probabilities or logits; rows are closed with a log-softmax first. ``-inf``
        entries are keys of probability 0 and contribute 0.
    axis : int
        The key axis.

    Returns
    -------
    array, shape (...)

    Examples
    --------
    >>> import numpy as np
    >>> float(entropy(np.log(np.array([0.5, 0.5])))) == float(np.log(2))
    True
    """
    xp, z = _rows(logp, "logp", axis, allow_neg_inf=True)
    return _math.entropy_of_logs(xp, closed_logs(xp, z, "logp"))


def _entropy_parts(xp: Any, lp: Any, sink: tuple[int, ...], name: str):
    """``(H, h(s), H_S, H_q, log s, log(1-s))`` from closed log-probabilities."""
    lp_s, lp_c = _math.split_groups(xp, lp, sink)
    log_s, log_c = _math.logsumexp(xp, lp_s), _math.logsumexp(xp, lp_c)
    for part, logmass in (("content", log_c), ("sink", log_s)):
        lacks = (
            f"puts no mass on its {part} keys: the {part} composition is undefined there; "
            "drop that row or give it logits"
        )
        check_mass(xp, logmass, name, lacks)
    binary = -(xp.exp(log_s) * log_s + xp.exp(log_c) * log_c)
    h_s = _math.entropy_of_logs(xp, lp_s - log_s[..., None])
    h_q = _math.entropy_of_logs(xp, lp_c - log_c[..., None])
    return _math.entropy_of_logs(xp, lp), binary, h_s, h_q, log_s, log_c


def entropy_split(logp: Any, sink: Any = 0, axis: int = -1) -> EntropySplit:
    r"""Split the entropy of rows into a sink part and a content part, exactly.

    .. math:: H(p) = h(s) + s\,H(p_S/s) + (1-s)\,H(q), \qquad q = p_C / (1 - s)

    ``log(1 - s)`` is computed as the log-sum-exp of the content logs, never as ``1 - s``, so
    the content entropy stays exact when the sink takes nearly all the mass.

    Parameters
    ----------
    logp : array, shape (..., key_pos)
        Log-probabilities or logits (closed with a log-softmax first).
    sink : int or sequence of int
        Sink key positions.
    axis : int
        The key axis.

    Returns
    -------
    EntropySplit
        Each field of shape (...), in nats (``sink_mass`` is a probability).
    """
    xp, z = _rows(logp, "logp", axis, allow_neg_inf=True)
    s = sink_positions(sink, z.shape[-1])
    total, binary, h_s, h_q, log_s, _ = _entropy_parts(xp, closed_logs(xp, z, "logp"), s, "logp")
    return EntropySplit(
        total=total, binary=binary, within_sink=h_s, content=h_q, sink_mass=xp.exp(log_s)
    )


def entropy_change_split(logp0: Any, logp1: Any, sink: Any = 0, axis: int = -1) -> EntropyChange:
    r"""Split the entropy change from state 0 to state 1 into sink and content parts.

    The two-factor Shapley split of ``H(p) = A(s, p_S) + (1-s) H(q)``:

    .. math:: \Delta H_{content} = \tfrac{(1-s_0) + (1-s_1)}{2}\,(H(q_1) - H(q_0)),
              \qquad \Delta H_{sink} = \Delta H - \Delta H_{content}

    Parameters
    ----------
    logp0, logp1 : array, shape (..., key_pos)
        Rows of the two states (e.g. two training checkpoints), log-probabilities or logits.
    sink : int or sequence of int
        Sink key positions.
    axis : int
        The key axis.

    Returns
    -------
    EntropyChange
        ``total``, ``sink``, ``content`` in nats, each of shape (...); ``sink + content ==
        total`` exactly, and so for any mean over rows, heads or layers.
    """
    xp, a, b = check_pair(logp0, logp1, ("logp0", "logp1"), axis, allow_neg_inf=True)
    s = sink_positions(sink, a.shape[-1])
    h0, _, _, hq0, _, log_c0 = _entropy_parts(xp, closed_logs(xp, a, "logp0"), s, "logp0")
    h1, _, _, hq1, _, log_c1 = _entropy_parts(xp, closed_logs(xp, b, "logp1"), s, "logp1")
    total = h1 - h0
    content = (xp.exp(log_c0) + xp.exp(log_c1)) / 2 * (hq1 - hq0)
    return EntropyChange(total=total, sink=total - content, content=content)
