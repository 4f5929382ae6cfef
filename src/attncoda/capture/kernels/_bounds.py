"""Derived float32 error bounds of the row statistics, per row (docs/design.md, "The fast
path", "Error bounds").

Each bound is the distance of one path's float32 evaluation of a statistic from the same
statistic computed in exact arithmetic from the *same* float32 queries and keys (their
scores ``z_j = scaling * q . k_j`` taken exactly). The fast path (:mod:`attncoda.capture.
kernels._sdpa`) and the exact path (:func:`attncoda.capture.stats.row_statistics`) are both
float32 computations and neither is the other's reference, so their difference is bounded
by the sum of their two bounds, :func:`difference_bounds`.

The bounds are worst-case (no cancellation of rounding errors assumed, any summation order,
any kernel blocking) and first order in the float32 unit roundoff ``u = 2**-24``; the
constants are rounded up to absorb the second-order terms while ``n u < 1e-2`` (up to
``n = 160,000`` keys). Their drivers, per row:

- ``n`` visible keys, ``m`` of them content keys; ``d`` the head dim;
- ``A = scaling * ||q|| * max_j ||k_j||`` over the keys the row sees: it bounds every
  ``|z_j|`` and every ``scaling * sum_i |q_i k_ji|`` (Cauchy-Schwarz);
- the sink mass ``s``, the entropy ``H`` and the content entropy ``H(q)`` (nats).

Every float32 evaluation of a row is the exact row of *perturbed* scores ``zeta_j`` with
``|zeta_j - z_j| <= eta`` (:func:`score_perturbation`), plus the rounding of its weighted
sums. Two facts carry the rest: the sink mass moves by at most ``2 s (1 - s) eta`` under such
a perturbation (``ds = (1 - s) sum_S p dz - s sum_C p dz``), and an entropy by at most
``2 H eta`` (``dH = -sum_j p_j (log p_j + H) dz_j`` and ``E_p |log p + H| <= 2 H``).
"""

from __future__ import annotations

import numpy as np

from attncoda._errors import AttncodaError

__all__ = [
    "FLOAT64_ROUNDOFF", "SCORE_ROUNDINGS", "UNIT_ROUNDOFF", "float64_part", "difference_bounds",
    "exact_bounds", "fast_bounds", "fused_bounds", "score_perturbation", "score_scale",
]  # fmt: skip

#: float32 unit roundoff (half an ulp of 1).
UNIT_ROUNDOFF = 2.0**-24
#: float64 unit roundoff: the float64 steps after the float32 sums still round, which is
#: what is left of the sink mass's bound once ``s (1 - s) eta`` vanishes as ``s -> 1``.
FLOAT64_ROUNDOFF = 2.0**-53


def float64_part(n_keys, scale, sink_mass):
    """``2 s (A + ln n + 8) u64``: the float64 steps of the sink mass (``exp(z - lse)``
    with ``|lse| <= A + ln n``, the sums and the division), ``u64 = 2**-53``."""
    n = np.maximum(np.asarray(n_keys, dtype=np.float64), 1.0)
    a = np.asarray(scale, dtype=np.float64)
    s = np.clip(np.asarray(sink_mass, dtype=np.float64), 0.0, 1.0)
    return 2.0 * s * (a + np.log(n) + 8.0) * FLOAT64_ROUNDOFF


#: The input dtypes the bounds cover, and how many roundings of size ``u A`` their float32
#: score takes beyond the ``d - 1`` additions of its dot product: float32 products are
#: rounded (one more), the products of two bfloat16 or float16 numbers are exact in float32
#: (8 + 8 and 11 + 11 significant bits, within float32's 24), and the scaling is one
#: rounding in every dtype (docs/design.md, "Precision per dtype").
SCORE_ROUNDINGS = {"float32": 3, "bfloat16": 2, "float16": 2}


def _score_roundings(dtype) -> int:
    name = str(dtype).removeprefix("torch.")
    if name not in SCORE_ROUNDINGS:
        raise AttncodaError(
            f"no error bound is derived for inputs in {name}: use 'float32', 'bfloat16' or "
            f"'float16' (the dtype of the layer's queries and keys)"
        )
    return SCORE_ROUNDINGS[name]


def score_perturbation(n_keys, head_dim: int, scale, dtype="float32", softcap=None):
    """``eta = (d + 2) u A + (8 n + 6 A + 8) u``: how far a float32 pass moves each score.

    ``(d + 2) u A`` is the float32 score of float32 inputs (a ``d``-term dot product in any
    order, then the scaling). For bfloat16 and float16 inputs the score is the float32 dot
    product of their exact float32 copies: its products are exact in float32, so the term is
    ``(d + 1) u A`` (:data:`SCORE_ROUNDINGS`). A soft-cap ``tanh(z / c) c`` in float32 adds
    ``4 u c`` (a division, a ``tanh`` to two ulps and a product; ``tanh`` is 1-Lipschitz, so
    the moves before it pass through no larger). ``(8 n + 6 A + 8) u`` is what the softmax
    or log-sum-exp adds, written as a move of each score: ``exp(z_j - M)`` of a rounded
    difference (``2 A u``) to one ulp (``2 u``); the running-maximum rescalings of a fused
    kernel (at most ``n`` of them, each one rounded product and one exp, ``3 u``, and a
    rounded difference; those differences sum to at most ``2 A`` since the maximum only
    grows); the ``n``-term sum of positive terms (``n u``); the division or the final log
    (``2 u ln n <= 2 n u``) and the add of the maximum back (``u (A + ln n)``).

    Parameters
    ----------
    n_keys : array_like
        Visible keys per row.
    head_dim : int
        ``d``.
    scale : array_like
        ``A`` per row (:func:`score_scale`).
    dtype : str or torch.dtype
        The dtype of the layer's queries and keys: ``"float32"``, ``"bfloat16"`` or
        ``"float16"`` (the statistics are float32 computations in each).
    softcap : float, optional
        The soft-cap ``c`` of the scores (Gemma 2), if any.

    Returns
    -------
    numpy.ndarray
        ``eta`` per row, in score units (nats).
    """
    n = np.asarray(n_keys, dtype=np.float64)
    a = np.asarray(scale, dtype=np.float64)
    u = UNIT_ROUNDOFF
    dot = head_dim - 1 + _score_roundings(dtype)
    capped = 0.0 if softcap is None else 4.0 * u * abs(float(softcap))
    return dot * u * a + (8.0 * n + 6.0 * a + 8.0) * u + capped


def _log_content(sink_mass):
    s = np.clip(np.asarray(sink_mass, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        return np.where(s < 1.0, np.abs(np.log1p(-s)), 0.0)


def fast_bounds(  # params: the drivers by name, as docs/design.md "Error bounds" has them
    *, n_keys, head_dim, scale, sink_mass, entropy, content_entropy, dtype="float32", softcap=None
):
    """Bounds of the fast path's sink mass, ``H`` and ``H(q)`` against exact arithmetic.

    - ``|ds| <= 2 s (1 - s) eta`` (plus :func:`float64_part`): ``s = sigma(lse_S - lse_C)``
      moves by ``s (1 - s)`` times the moves of the two log-sum-exps, each at most ``eta``.
    - ``|dH(q)| <= (2 H(q) + 2) eta + (4 m + d) u A``: ``H(q) = lse_C - E_q[z]``; the
      kernel's ``lse_C`` is within ``eta`` of the log-sum-exp of the perturbed scores, its
      weights are their softmax (``2 H(q) eta``, and ``eta`` for ``E[zeta - z]``), and
      ``E_q[z] = scaling * q . E_q[k]`` adds the rounding of the weighted key sum (numerator
      and denominator, ``2 m`` rounded adds and rescalings each) and of the final ``d``-term
      dot product, on terms of size at most ``A``. This term, not ``eta``, is the reason
      ``H(q)`` is never divided by ``1 - s``: nothing here grows as ``s -> 1``.
    - ``|dH| <= (4 + 4 H) eta + (1 - s) B[H(q)]``: ``H = -sum_S p log p + (1 - s) (H(q) -
      log(1 - s))``; the sink terms move by ``sum_S p |1 + log p| 2 eta <= 2 (s + H) eta``,
      ``log(1 - s) = lse_C - lse`` by ``2 s eta``, and ``(1 - s) (H(q) - log(1 - s)) <= H``
      times the relative move of ``1 - s`` (``2 s eta``).

    Parameters
    ----------
    n_keys : array_like
        Visible keys per row (``n``; ``m <= n`` is used for the content keys).
    head_dim : int
        ``d``.
    scale : array_like
        ``A`` per row (:func:`score_scale`).
    sink_mass, entropy, content_entropy : array_like
        ``s``, ``H`` and ``H(q)`` per row (nats), either path's value (the bounds are first
        order, so which one does not matter).
    dtype : str or torch.dtype
        The dtype of the layer's queries and keys (:func:`score_perturbation`). The bound is
        against exact arithmetic on those very queries and keys: for bfloat16 and float16
        models, the path computes their scores in float32, where the products are exact.
    softcap : float, optional
        The scores' soft-cap ``c``, if any (:func:`score_perturbation`).

    Returns
    -------
    dict
        ``"sink_mass"``, ``"entropy"``, ``"content_entropy"``: float64 arrays of the
        broadcast shape.
    """
    u = UNIT_ROUNDOFF
    n, a, s, h, hq = _drivers(n_keys, scale, sink_mass, entropy, content_entropy)
    eta = score_perturbation(n, head_dim, a, dtype, softcap)
    content = (2.0 * hq + 2.0) * eta + (4.0 * n + head_dim) * u * a
    return {
        "sink_mass": 2.0 * s * (1.0 - s) * eta + float64_part(n, a, s),
        "entropy": (4.0 + 4.0 * h) * eta + (1.0 - s) * content,
        "content_entropy": content,
    }


def exact_bounds(  # params: the drivers by name, as docs/design.md "Error bounds" has them
    *, n_keys, head_dim, scale, sink_mass, entropy, content_entropy, dtype="float32", softcap=None
):
    """Bounds of the exact path's sink mass, ``H`` and ``H(q)`` against exact arithmetic.

    The exact path takes a float32 softmax ``p`` and log-softmax ``log p`` of the float32
    scores and derives the statistics in float64 from four float32 row sums
    (:func:`attncoda.capture.stats.row_statistics`).

    - ``|ds| <= 2 s (1 - s) eta`` (plus :func:`float64_part`): ``s = S / (S + C)``; a
      common factor of the probabilities cancels, and the ``m``-term sum ``C`` is inside
      ``eta``.
    - ``|dH| <= (2 H + 2) eta + (n + 2) u H``: ``H = log T - sum p log p / T`` with ``T``
      the row's float32 mass (within ``eta`` of 1); the perturbed row moves ``H`` by
      ``2 H eta``, the logs by ``eta``, and the ``n``-term float32 sum ``sum p log p`` is
      rounded relative to ``sum p |log p| = H``.
    - ``|dH(q)| <= (2 H(q) + 2) eta + (n + 4) u H / (1 - s)``: ``H(q) = log C - (sum p log p
      - sum_S p log p) / C``; the whole-row sum's rounding is divided by ``C = 1 - s``.
      ``H / (1 - s) <= 1 + |log(1 - s)| + H(q) + s H(p_S / s) / (1 - s)`` stays moderate
      for a one-key sink as ``s -> 1``.

    Parameters and Returns as :func:`fast_bounds`.
    """
    u = UNIT_ROUNDOFF
    n, a, s, h, hq = _drivers(n_keys, scale, sink_mass, entropy, content_entropy)
    eta = score_perturbation(n, head_dim, a, dtype, softcap)
    with np.errstate(divide="ignore", invalid="ignore"):
        over = np.where(s < 1.0, h / (1.0 - s), np.inf)
    return {
        "sink_mass": 2.0 * s * (1.0 - s) * eta + float64_part(n, a, s),
        "entropy": (2.0 * h + 2.0) * eta + (n + 2.0) * u * h,
        "content_entropy": (2.0 * hq + 2.0) * eta + (n + 4.0) * u * over,
    }


def _drivers(n_keys, scale, sink_mass, entropy, content_entropy):
    """``n``, ``A``, ``s`` (clipped to [0, 1]), ``|H|`` and ``|H(q)|`` as float64 arrays."""
    return (
        np.asarray(n_keys, dtype=np.float64),
        np.asarray(scale, dtype=np.float64),
        np.clip(np.asarray(sink_mass, dtype=np.float64), 0.0, 1.0),
        np.abs(np.asarray(entropy, dtype=np.float64)),
        np.abs(np.asarray(content_entropy, dtype=np.float64)),
    )


def difference_bounds(**drivers):
    """Bounds of ``|fast - exact|`` per statistic: :func:`fast_bounds` plus
    :func:`exact_bounds` (both paths are float32; each is bounded against exact arithmetic
    on the same queries and keys). Keywords as :func:`fast_bounds`."""
    fast, exact = fast_bounds(**drivers), exact_bounds(**drivers)
    return {name: fast[name] + exact[name] for name in fast}


def score_scale(query, key, scaling: float):
    """``A = scaling * ||q_i|| * max_{j <= i} ||k_j||`` per causal row: ``(batch, head, q)``.

    Parameters
    ----------
    query : torch.Tensor
        ``(batch, head, query_pos, head_dim)``.
    key : torch.Tensor
        ``(batch, kv_head, key_pos, head_dim)``, unexpanded under grouped-query attention,
        queries and keys aligned (``query_pos == key_pos``).
    scaling : float
        Score scale.

    Returns
    -------
    numpy.ndarray
        float64 ``(batch, head, query_pos)``. The maximum runs over keys ``0..i``, a superset
        of what any causal mask (padding, sliding window) lets row ``i`` see, so ``A`` is an
        upper bound there too.
    """
    import torch

    group = query.shape[1] // key.shape[1]
    q_norm = torch.linalg.vector_norm(query.to(torch.float64), dim=-1)
    k_norm = torch.linalg.vector_norm(key.to(torch.float64), dim=-1)
    k_max = torch.cummax(k_norm, dim=-1).values.repeat_interleave(group, 1)
    return (abs(scaling) * q_norm * k_max[..., : query.shape[2]]).cpu().numpy()


#: Compiled-kernel terms (docs/design.md, "Bounds per kernel"): the relative error of one
#: ``tf32x3`` product (the dropped low-by-low term and the low part's own rounding).
TF32X3_PRODUCT = 12.0 * UNIT_ROUNDOFF


def fused_bounds(problem, z, content, visible, compiled=None):
    """Per-row bounds of the fused kernel against exact arithmetic (docs/design.md, "The
    fused kernel" and "Bounds per kernel"), from the row's own float64 scores.

    Every term is a move of each score by at most ``dz`` (first order, ``u = 2**-24``):

    - the score's rounding, ``gamma_d scaling sum_t |q_t k_t|`` with ``gamma_d = d u / (1 -
      d u)``, and a few ulps of the scale and the soft-cap;
    - the kernel's log2 units: ``log2 e`` folded into the scale (one rounding of the scale,
      one of the product) and the conversions of ``lse_C``, ``H(q)`` and ``sum_C z`` back
      to nats, ``3 u Z``;
    - compiled on NVIDIA (``compiled`` is ``"ieee"`` or ``"tf32x3"``, the dot precision):
      tensor-core additions truncated (``d u`` more on the dot product), ``tf32x3``
      products (``12 u`` each, float32 only), ``ex2.approx`` (2 ulp, and the rounded
      argument ``x log2 e``: ``(2 n + 4 Z + 4) u``) and FMA contraction (``2 u Z``).

    Then, with ``Z`` the row's largest visible ``|z|`` and ``n`` its content keys:
    ``H(q)`` and ``H`` move by ``2 Z dz + (n + 4) u (2 Z + log n + 1)``; ``lse_C`` by ``dz
    + (n + 3) u + u Z``; the sink mass by a quarter of twice ``dz`` plus that; the balance by
    ``sqrt(n + 1) (2 dz + (n + 1) u Z)``; the output by ``max |v|`` times twice the
    ``lse_C`` bound plus ``(n + d + 4) u``.

    Parameters
    ----------
    problem : attncoda.capture.kernels.Problem
        Its queries, keys, values, scaling and soft-cap.
    z : torch.Tensor
        float64 ``(batch, head, query_pos, keys)``: the exact scores (soft-capped), with any
        virtual key as a column.
    content : torch.Tensor
        ``(batch, head, query_pos)``: content keys per row.
    visible : torch.Tensor
        bool, broadcastable to ``z``: the keys each row sees.
    compiled : {None, "ieee", "tf32x3"}
        None for IEEE float32 arithmetic (the interpreter); else the compiled kernel's dot
        precision.

    Returns
    -------
    dict
        float64 tensors ``(batch, head, query_pos)``: ``sink_mass``, ``entropy``,
        ``content_entropy``, ``within_sink_entropy``, ``sink_balance``, ``output``.
    """
    import torch

    query, key, scaling, softcap = problem.query, problem.key, problem.scaling, problem.softcap
    u = UNIT_ROUNDOFF
    d = query.shape[-1]
    h, kv = query.shape[1], key.shape[1]
    gamma = d * u / (1 - d * u)
    qa = query.double().abs()
    ka = key.double().abs().repeat_interleave(h // kv, 1)
    spread = torch.matmul(qa, ka.transpose(-1, -2)).amax(-1) * abs(scaling)
    big = torch.where(visible, z.abs(), 0.0).amax(-1)
    n = content.clamp(min=1).double()
    dz = gamma * spread + 4 * u * 30 + 3 * u * big
    if softcap is not None:
        dz = dz + 4 * u * softcap
    if compiled is not None:
        dz = dz + d * u * spread + (2 * n + 4 * big + 4) * u + 2 * u * big
        if compiled == "tf32x3":
            dz = dz + TF32X3_PRODUCT * spread
    accumulate = (n + 4) * u * (2 * big + torch.log(n) + 1)
    e_entropy = 2 * big * dz + accumulate
    e_lse = dz + (n + 3) * u + u * big
    return {
        "sink_mass": 0.25 * (2 * dz + e_lse),
        "entropy": e_entropy,
        "content_entropy": e_entropy,
        "within_sink_entropy": 2 * big * dz + 8 * u,
        "sink_balance": (n + 1).sqrt() * (2 * dz + (n + 1) * u * big),
        "output": problem.value.double().abs().max() * (2 * e_lse + (n + d + 4) * u),
    }
