"""Row metrics under an explicit convention, and head-by-head distance matrices
(docs/design.md, "Conventions and the head distance").

Classic metrics (``cosine``, ``jsd``, ``entropy_gap``, ``hellinger``, ``tv``) depend on
whether the sink keys are kept (``convention="keep"``) or dropped and the rest renormalised
(``convention="drop"``), so they require the convention. The compositional metrics
(``aitchison``, ``aitchison_sink``, ``aitchison_content``) take none: the Aitchison distance
splits exactly into its sink and content terms. The blocked passes over head pairs behind
:func:`head_distances` are in :mod:`attncoda.coda._pairs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import array_api_compat
import numpy as np

from attncoda._errors import AttncodaError
from attncoda.coda import _math, _pairs
from attncoda.coda._validate import (
    CLASSIC_METRICS,
    CONVENTIONS,
    as_array,
    check_convention,
    check_logs,
    check_pair,
    closed_logs,
    sink_positions,
)
from attncoda.coda.geometry import aitchison_split

__all__ = ["CLASSIC_METRICS", "CONVENTIONS", "head_distances", "row_distance"]


def _classic(xp: Any, metric: str, la: Any, lb: Any) -> Any:
    """A classic metric between closed log-probability rows (last axis)."""
    if metric == "jsd":
        lm = xp.logaddexp(la, lb) - math.log(2.0)
        h_m = _math.entropy_of_logs(xp, lm)
        d = h_m - (_math.entropy_of_logs(xp, la) + _math.entropy_of_logs(xp, lb)) / 2
        return xp.clip(d, min=0.0)
    if metric == "entropy_gap":
        return xp.abs(_math.entropy_of_logs(xp, la) - _math.entropy_of_logs(xp, lb))
    pa, pb = xp.exp(la), xp.exp(lb)
    if metric == "cosine":
        cos = xp.sum(pa * pb, axis=-1) / (_math.norm(xp, pa) * _math.norm(xp, pb))
        return xp.clip(1 - cos, min=0.0)
    if metric == "hellinger":
        return _math.norm(xp, xp.sqrt(pa) - xp.sqrt(pb)) / math.sqrt(2.0)
    return xp.sum(xp.abs(pa - pb), axis=-1) / 2  # tv


def row_distance(
    logp: Any,
    logq: Any,
    metric: str,
    *,
    convention: str | None = None,
    sink: Any = 0,
    axis: int = -1,
) -> Any:
    r"""Distance between attention rows under a named metric and convention.

    Parameters
    ----------
    logp, logq : array, shape (..., key_pos)
        Log-probabilities or logits over the same keys; they broadcast.
    metric : str
        ``"cosine"`` (``1 - cos``), ``"jsd"`` (Jensen–Shannon divergence
        ``H((p+q)/2) - (H(p)+H(q))/2`` in nats), ``"entropy_gap"`` (``|H(p) - H(q)|``),
        ``"hellinger"`` (``||sqrt p - sqrt q|| / sqrt 2``), ``"tv"`` (``||p - q||_1 / 2``);
        or ``"aitchison"``, ``"aitchison_sink"`` (``|b - b'|``), ``"aitchison_content"``.
    convention : {"keep", "drop"}
        Required by the classic metrics, refused by the Aitchison ones. ``"keep"`` compares
        the rows as they are; ``"drop"`` removes the sink keys and renormalises (``q``).
    sink : int or sequence of int
        Sink key positions.
    axis : int
        The key axis.

    Returns
    -------
    array, shape (...)

    Examples
    --------
    >>> import numpy as np
    >>> p, q = np.log([0.90, 0.05, 0.05]), np.log([0.50, 0.25, 0.25])
    >>> round(float(row_distance(p, q, "jsd", convention="keep")), 4)
    0.1017
    >>> float(row_distance(p, q, "jsd", convention="drop"))
    0.0
    """
    check_convention(metric, convention)
    classic = metric in CLASSIC_METRICS
    xp, a, b = check_pair(logp, logq, ("logp", "logq"), axis, allow_neg_inf=classic)
    s = sink_positions(sink, a.shape[-1])
    if metric not in CLASSIC_METRICS:
        split = aitchison_split(a, b, sink=s)
        return {"aitchison": split.total, "aitchison_sink": split.sink}.get(metric, split.content)
    if convention == "drop":
        a, b = _math.split_groups(xp, a, s)[1], _math.split_groups(xp, b, s)[1]
    return _classic(xp, metric, closed_logs(xp, a, "logp"), closed_logs(xp, b, "logq"))


def _rows_in_use(xp: Any, mask: Any, sink: tuple[int, ...]) -> Any:
    """Indices of rows with every sink key present and at least two content keys.

    A row that cannot see a sink key (a causal query before a token sink, say) has no
    sink/content split, and a row with fewer than two content keys has no content to compare:
    both are left out.
    """
    n_valid = xp.sum(xp.astype(mask, xp.int64), axis=-1)
    has_sink = xp.all(xp.take(mask, _math.index(xp, mask, sink), axis=-1), axis=-1)
    used = has_sink & (n_valid - len(sink) >= 2)
    if not bool(xp.any(used)):
        raise AttncodaError(
            f"no row has at least 2 content keys ({mask.shape[0]} rows, sink {list(sink)}): "
            "head distances are means over rows with m >= 2 content keys"
        )
    return xp.nonzero(used)[0]


def _key_mask(xp: Any, key_mask: Any, z: Any) -> Any:
    rows, keys = z.shape[1], z.shape[2]
    device = array_api_compat.device(z)
    if key_mask is None:
        return xp.ones((rows, keys), dtype=xp.bool, device=device)
    mask = xp.asarray(key_mask, device=device)
    if mask.dtype != xp.bool:
        raise AttncodaError(f"key_mask must be boolean; got dtype {mask.dtype}")
    if tuple(mask.shape) != (rows, keys):
        raise AttncodaError(
            f"key_mask must have shape (rows, keys) = {(rows, keys)}; got {tuple(mask.shape)}"
        )
    return mask


def _is_every_row(used: Any, rows: int) -> bool:
    """Whether ``used`` is ``0, 1, ..., rows - 1`` (host check of a small index array)."""
    index = np.asarray(array_api_compat.to_device(used, "cpu"))
    return index.shape[0] == rows and bool((index == np.arange(rows)).all())


def _masked_mean(xp: Any, z: Any, mask: Any) -> Any:
    zero = xp.zeros_like(z)
    n = xp.sum(xp.astype(mask, z.dtype), axis=-1)
    return xp.sum(xp.where(mask, z, zero), axis=-1) / n


def _centred(xp: Any, z: Any, mask: Any) -> Any:
    """clr over the keys in ``mask`` (zeros elsewhere), shape kept."""
    return xp.where(mask, z - _masked_mean(xp, z, mask)[..., None], xp.zeros_like(z))


def head_distances(
    logp_rows: Any,
    metric: str,
    *,
    convention: str | None = None,
    sink: Any = 0,
    key_mask: Any = None,
) -> Any:
    r"""Head-by-head distance matrix: the mean row metric over shared query positions.

    ``D[a, b]`` is the mean, over rows ``r`` with every sink key present and at least two
    content keys (``m >= 2``), of ``row_distance(logp_rows[a, r], logp_rows[b, r], metric)``.
    Rows with fewer content keys are left out for every metric alike, so ``keep`` and
    ``drop`` average over the same rows.

    Parameters
    ----------
    logp_rows : array, shape (head, row, key_pos)
        Log-probabilities or logits of each head's rows at the same query positions of the
        same documents (row ``r`` of every head is the same query).
    metric : str
        As in :func:`row_distance`.
    convention : {"keep", "drop"}
        Required by the classic metrics, refused by the Aitchison ones.
    sink : int or sequence of int
        Sink key positions.
    key_mask : bool array, shape (row, key_pos), optional
        Which keys exist in each row (causal rows of different lengths come in padded). An
        absent key is structural: it is not a zero, and its entries in ``logp_rows`` are
        ignored whatever they hold.

    Returns
    -------
    array, shape (head, head)
        Symmetric with a zero diagonal, of the input's type, dtype and device.

    Notes
    -----
    Cosine, Hellinger and the Aitchison family use one Gram matrix per row (a batched
    matmul; nearly equal rows are recomputed from their difference, so identical heads are
    at distance exactly 0); JSD and TV use a blocked elementwise pass over the upper triangle, with
    ``sum m log m = (sum (p+q) log (p+q)) / 2 - log 2``. Rows are processed sorted by their
    extent, each block only over the keys its rows see (causal rows: half the work). On
    numpy the products run on one BLAS thread and the elementwise blocks on a few Python
    threads; torch input runs where it lies (the GPU when the rows are there).
    """
    check_convention(metric, convention)
    xp, z = as_array(logp_rows, "logp_rows")
    if z.ndim != 3:
        raise AttncodaError(
            f"logp_rows must have shape (heads, rows, keys); got shape {tuple(z.shape)}"
        )
    s = sink_positions(sink, z.shape[2])
    rows = _rows(xp, z, _key_mask(xp, key_mask, z), s, metric)
    if metric in CLASSIC_METRICS:
        out = _classic_distances(xp, metric, convention, rows)
    else:
        out = _aitchison_distances(xp, metric, rows, len(s))
    # Rounding in a Gram matrix can leave it a hair off symmetric and off zero on the
    # diagonal; the distance is symmetric with D[a, a] = 0 by definition.
    eye = xp.eye(z.shape[0], dtype=rows.z.dtype, device=array_api_compat.device(rows.z))
    return (out + xp.permute_dims(out, (1, 0))) / 2 * (1 - eye)


@dataclass(frozen=True)
class _Rows:
    """The rows a head distance averages over, sorted by their extent (one past the last key
    they see): each block of rows reads only its keys (a mean does not depend on the order)."""

    z: Any  # (head, row, key_pos): the logs of the rows in use
    mask: Any  # (row, key_pos): the keys that exist
    content: Any  # (row, key_pos): the keys that exist and are no sink key
    is_sink: Any  # (key_pos,)
    width: Any  # host ints, (row,): each row's extent, non-decreasing


def _rows(xp: Any, z: Any, mask: Any, sink: tuple[int, ...], metric: str) -> _Rows:
    """The rows in use (:func:`_rows_in_use`) of ``z`` (head, row, key_pos) and of its key
    ``mask``, their logs checked in the caller's coordinates on the keys that exist
    (``-inf`` allowed for classic metrics), sorted by extent (rows in order: no copy)."""
    rows, keys = z.shape[1], z.shape[2]
    used = _rows_in_use(xp, mask, sink)
    row_used = xp.zeros(rows, dtype=xp.bool, device=array_api_compat.device(z))
    row_used[used] = True
    check_logs(
        xp,
        xp.where(mask & row_used[:, None], z, xp.zeros_like(z)),
        "logp_rows",
        allow_neg_inf=metric in CLASSIC_METRICS,
    )
    device = array_api_compat.device(z)
    mask = xp.take(mask, used, axis=0)
    extent = xp.max(xp.where(mask, xp.arange(1, keys + 1, device=device), 0), axis=-1)
    order = xp.argsort(extent, stable=True)
    used = xp.take(used, order)
    if not _is_every_row(used, rows):
        z = xp.take(z, used, axis=1)
        mask = xp.take(mask, order, axis=0)
    width = np.asarray(array_api_compat.to_device(xp.take(extent, order), "cpu"))
    is_sink = xp.asarray([j in sink for j in range(keys)], device=array_api_compat.device(z))
    return _Rows(z=z, mask=mask, content=mask & ~is_sink, is_sink=is_sink, width=width)


def _aitchison_distances(xp: Any, metric: str, rows: _Rows, k: int) -> Any:
    """Mean over rows of an Aitchison distance (``k`` sink keys), shape (head, head)."""
    z, width = rows.z, rows.width
    content3 = xp.broadcast_to(rows.content, z.shape)
    if metric == "aitchison":
        return _pairs.gram_mean(
            xp, _centred(xp, z, xp.broadcast_to(rows.mask, z.shape)), "euclid", width
        )
    if metric == "aitchison_content":
        return _pairs.gram_mean(xp, _centred(xp, z, content3), "euclid", width)
    m = xp.sum(xp.astype(rows.content, z.dtype), axis=-1)
    sink3 = xp.broadcast_to(rows.mask & rows.is_sink, z.shape)
    b = xp.sqrt(k * m / (k + m)) * (_masked_mean(xp, z, sink3) - _masked_mean(xp, z, content3))
    return xp.mean(xp.abs(b[:, None, :] - b[None, :, :]), axis=-1)


def _classic_distances(xp: Any, metric: str, convention: str | None, rows: _Rows) -> Any:
    """Mean over rows of a classic metric under ``convention``, shape (head, head)."""
    z, width = rows.z, rows.width
    keep = rows.content if convention == "drop" else rows.mask
    zk = xp.where(xp.broadcast_to(keep, z.shape), z, xp.full_like(z, -math.inf))
    lp = zk - _math.logsumexp(xp, zk)[..., None]
    if metric == "entropy_gap":
        h = _math.entropy_of_logs(xp, lp)
        return xp.mean(xp.abs(h[:, None, :] - h[None, :, :]), axis=-1)
    if metric == "cosine":
        p = xp.exp(lp)
        return _pairs.gram_mean(xp, p / _math.norm(xp, p)[..., None], "cosine", width)
    if metric == "hellinger":
        return _pairs.gram_mean(xp, xp.exp(lp / 2), "euclid", width) / math.sqrt(2.0)
    h = _math.entropy_of_logs(xp, lp)
    return _pairs.pairwise_mean(xp, xp.exp(lp), metric, h, width)
