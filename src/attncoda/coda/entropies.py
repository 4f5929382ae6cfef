"""The entropy of attention rows and its exact sink/content splits, of one state and of a
change between two (docs/design.md, "The mathematics").

Every function takes log-probabilities or logits as numpy arrays or torch tensors (CPU or
GPU), works along ``axis`` (the keys, ``key_pos``), broadcasts over the other axes, and
returns arrays of the input's type, dtype and device. All entropies are in nats. The sink
``S`` is a key position or a sequence of distinct positions; the content ``C`` is every
other key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attncoda.coda import _math
from attncoda.coda._validate import (
    check_mass,
    check_pair,
    check_rows,
    closed_logs,
    sink_positions,
)

__all__ = ["EntropyChange", "EntropySplit", "entropy", "entropy_change_split", "entropy_split"]


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
    xp, z = check_rows(logp, "logp", axis, allow_neg_inf=True)
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
    xp, z = check_rows(logp, "logp", axis, allow_neg_inf=True)
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
