"""The null of a collapse share and the edges of its verdicts (docs/design.md, "Verdicts
and ratios within rounding"): the rounding of each change of a pair's means, and whether a
share is null, on its edge, or of parts whose signs are not resolved.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from attncoda.experiments.contract import (
    FLOAT32_UNIT_ROUNDOFF,
    row_statistic_rounding,
    within_rounding,
)

__all__ = [
    "PART_MAGNITUDES",
    "SHARES",
    "ShareVerdict",
    "part_rounding",
    "share_rounding",
    "share_verdict",
]

#: The share and its range over the two orderings (columns of the pair table).
SHARES = ("sink_share", "sink_share_low", "sink_share_high")

#: The means each change of the pair table is made of: its rounding is
#: ``u (n + 2) (M + log n)`` with ``M`` the sum of their absolute values (:func:`part_rounding`),
#: the allowance :class:`~attncoda.experiments.contract.RowStatistic` gives it with these
#: columns as its ``magnitude``. The change of entropy is made of the two entropies; a
#: content part ``c (H(q_1) - H(q_0))`` (``c`` a content mass in [0, 1]) of the two content
#: entropies: its ``H(q)`` carry ``c`` times their rounding and its masses ``u (n + 2) s``
#: times ``|H(q_1) - H(q_0)| <= H(q_0) + H(q_1)``, and ``c + s <= 1``; a sink part, the
#: change less a content part, of all four.
PART_MAGNITUDES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "delta_entropy": ("entropy_from", "entropy_to"),
        "delta_content": ("content_entropy_from", "content_entropy_to"),
        **{
            name: ("entropy_from", "entropy_to", "content_entropy_from", "content_entropy_to")
            for name in ("delta_sink", "delta_sink_sink_first", "delta_sink_content_first")
        },
    }
)


def part_rounding(name: str, means: Mapping[str, float], keys: int) -> float:
    """How far float32 rounding can move the change ``name`` of one level's means (nats):
    ``u (n + 2) (M + log n)``, ``M`` the means of :data:`PART_MAGNITUDES` summed in absolute
    value, ``n = keys`` the most keys a row sees
    (:func:`~attncoda.experiments.contract.row_statistic_rounding`). NaN where a mean is."""
    magnitude = math.fsum(abs(float(means[column])) for column in PART_MAGNITUDES[name])
    return row_statistic_rounding(keys, magnitude)


def share_rounding(entropy_from: float, entropy_to: float, keys: int) -> float:
    """The rounding bound of a mean entropy change, ``u (n + 2) (entropy_from + entropy_to +
    log n)`` nats (``u = 2**-24``, ``n`` the most keys a row sees: the windows' padded
    length): a share over a ``|delta_entropy|`` within it is null.

    Each row entropy is a float32 sum over its keys, which its rounding moves by up to
    ``(n + 2) u H`` (the accumulation term of the exact path's bound, docs/design.md "Error
    bounds"), and the rows' rounded logs by ``u H <= u log n`` each; a difference of two
    mean entropies by the sum of theirs. It is :func:`part_rounding` of ``delta_entropy``,
    the allowance that :class:`~attncoda.experiments.contract.RowStatistic` gives the column
    between two runs: one formula for the null and for the comparison."""
    return part_rounding(
        "delta_entropy", {"entropy_from": entropy_from, "entropy_to": entropy_to}, keys
    )


def _moved(name: str, means: Mapping[str, float], keys: int) -> float:
    """How far :func:`part_rounding` of ``name`` itself moves between two runs: ``u (n + 2)``
    times the rounding of each mean it is made of (a bound moves with its magnitudes)."""
    return (
        FLOAT32_UNIT_ROUNDOFF
        * (max(keys, 1) + 2)
        * math.fsum(row_statistic_rounding(keys, means[c]) for c in PART_MAGNITUDES[name])
    )


@dataclass(frozen=True)
class ShareVerdict:
    """The share of one level's means and the verdicts it is decided by.

    Attributes
    ----------
    shares : dict of str to float or None
        ``sink_share``, ``sink_share_low``, ``sink_share_high``; None where undefined.
    note : str
        ``sink_share_note``: why the share is undefined, that it lies outside ``[0, 1]``,
        that a part's sign is not resolved, or ``""``.
    share_edge : bool
        ``|delta_entropy|`` lies within its rounding of the null bound (either side), so
        that another run may null a share measured here or measure one nulled here. A share
        nulled by rounding always is: ``|dH| <= e`` lies within ``e`` of ``e``.
    note_edge : bool
        The note may read otherwise on another run: ``share_edge``, or, for a share
        measured here, a part (``delta_sink`` or ``delta_content``) within twice its
        rounding of 0 (within it the note says its sign is not resolved; another run moves
        the part by up to its rounding, across 0 or across the rounding).
    """

    shares: dict[str, float | None]
    note: str
    share_edge: bool
    note_edge: bool


def share_verdict(means: Mapping[str, float], atol: float, keys: int) -> ShareVerdict:
    """The Shapley share of one level's means, its range over the two orderings, its note,
    and whether each verdict lies on its edge (:class:`ShareVerdict`).

    Parameters
    ----------
    means : mapping of str to float
        One level's means (the names of :data:`COLUMNS` ``mean_sink_mass_from`` ...
        ``delta_sink_content_first``, nats).
    atol : float
        ``share_atol``: a share is also null where ``|delta_entropy| <= atol`` nats.
    keys : int
        The most keys a row sees (``n_keys``).

    Returns
    -------
    ShareVerdict
    """
    delta, delta_sink = means["delta_entropy"], means["delta_sink"]
    bound = share_rounding(means["entropy_from"], means["entropy_to"], keys)
    # The null is decided at the wider of the rounding and share_atol (a setting, exact);
    # the change moves by its rounding, and a rounding threshold with its entropies.
    threshold, moves = atol, 0.0
    if bound >= atol:
        threshold, moves = bound, _moved("delta_entropy", means, keys)
    share_edge = bool(abs(abs(delta) - threshold) <= bound + moves)
    if within_rounding(delta, threshold):
        # The change itself is not printed: its last digits are what two devices differ in.
        note = (
            f"|delta_entropy| is within its float32 rounding {bound:.2g} nats "
            f"(u (n + 2) (H before + H after + log n), n = {keys} keys): share undefined"
            if bound >= atol
            else f"|delta_entropy| <= share_atol {atol:g} nats: share undefined"
        )
        return ShareVerdict(dict.fromkeys(SHARES), note, share_edge, share_edge)
    orderings = sorted(
        (means["delta_sink_sink_first"] / delta, means["delta_sink_content_first"] / delta)
    )
    shares: dict[str, float | None] = dict(
        zip(SHARES, (delta_sink / delta, *orderings), strict=True)
    )
    unresolved, near = [], False
    for part in ("sink", "content"):
        name = f"delta_{part}"
        rounding = part_rounding(name, means, keys)
        if within_rounding(means[name], rounding):
            unresolved.append(part)
        near |= abs(means[name]) <= 2 * rounding + _moved(name, means, keys)
    note = ""
    if unresolved:
        several = len(unresolved) > 1
        note = (
            f"the {' and '.join(unresolved)} part{'s lie' if several else ' lies'} within "
            f"{'their' if several else 'its'} float32 rounding of 0: whether the share lies "
            "in [0, 1] is not resolved"
        )
    elif delta_sink * means["delta_content"] < 0:
        note = "sink and content parts have opposite signs: share outside [0, 1]"
    return ShareVerdict(shares, note, share_edge, share_edge or bool(near))
