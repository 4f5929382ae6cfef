"""Benchmarks of attncoda.coda against the loops and libraries it replaces.

Importable: :func:`run` returns one :class:`Result` per comparison, and ``bench/run.py``
prints them. Every comparison first checks that both sides give the same numbers
(``np.allclose``), then times each side as the minimum of a few repeats after a warm-up.
Timings are reported, never asserted.

Comparisons
-----------
- ``head_distances`` JSD (convention ``keep``) against the head-distance loop of Clark et al.
  (2019), "What does BERT look at?" (``head_distances.py`` in clarkkev/attention-analysis):
  for each head, smooth (``0.001 / n + 0.999 p``), compare with all 144 heads at once, sum
  over rows. Also against a plain per-pair loop (for i, for j, numpy over rows).
- ``head_distances`` Aitchison against the analogous per-pair loop
  (``np.linalg.norm(clr_i - clr_j, axis=-1).mean()`` for every i, j).
- ``attncoda.clr`` against ``skbio.stats.composition.clr`` on a large matrix.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from attncoda import clr, head_distances


@dataclass(frozen=True)
class Result:
    """One comparison: seconds per call (min of repeats) and the speed-up ratio."""

    name: str
    ours_s: float
    reference_s: float
    target: float | None  # None: printed for information, not a goal (bench/README.md)
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.reference_s / self.ours_s

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.ratio >= self.target

    def as_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "met": self.met}


def best_of(fn: Callable[[], object], repeats: int = 3, warmup: int = 1) -> float:
    """Minimum wall time of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def attention(heads: int, rows: int, keys: int, seed: int = 0) -> np.ndarray:
    """Random attention (head, row, key_pos): softmax of scaled normal logits, first-key sink.

    The first key gets +4 on average (heavy sink: ~0.3-0.9 of each row), float64.
    """
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(heads, rows, keys)) * 1.5
    z[..., 0] += rng.uniform(2.0, 6.0, size=(heads, 1))
    z -= z.max(-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(-1, keepdims=True)


# ------------------------------------------------------------------------ the references


def clark_js_distances(attns_flat: np.ndarray, heads: range | None = None) -> np.ndarray:
    """Clark et al.'s head-distance loop, as published, for one document.

    ``attns_flat`` is (head, row, key_pos). For each head it smooths both that head's map and
    all heads' maps, then takes the Jensen–Shannon divergence against every head at once,
    summed over rows and keys. ``heads`` restricts the outer loop (the rows of the result)
    so a subset can be timed; every iteration costs the same.
    """
    n_heads = attns_flat.shape[0]
    js_distances = np.zeros([n_heads, n_heads])
    for head in heads if heads is not None else range(n_heads):
        head_attns = np.expand_dims(attns_flat[head], 0)
        head_attns_smoothed = (0.001 / head_attns.shape[1]) + (head_attns * 0.999)
        attns_flat_smoothed = (0.001 / attns_flat.shape[1]) + (attns_flat * 0.999)
        m = (head_attns_smoothed + attns_flat_smoothed) / 2
        js = -head_attns_smoothed * np.log(m / head_attns_smoothed)
        js += -attns_flat_smoothed * np.log(m / attns_flat_smoothed)
        js /= 2
        js = js.sum(-1).sum(-1)
        js_distances[head] += js
    return js_distances


def pair_loop_jsd(p: np.ndarray, pairs_of: range | None = None) -> np.ndarray:
    """Per-pair loop: for i, for j, numpy over rows; JSD summed over rows (smoothed rows)."""
    n_heads, rows = p.shape[0], p.shape[1]
    ps = 0.001 / rows + 0.999 * p
    out = np.zeros((n_heads, n_heads))
    for i in pairs_of if pairs_of is not None else range(n_heads):
        for j in range(n_heads):
            a, b = ps[i], ps[j]
            m = (a + b) / 2
            kl_a = np.sum(a * np.log(a / m), axis=-1)
            kl_b = np.sum(b * np.log(b / m), axis=-1)
            out[i, j] = np.sum((kl_a + kl_b) / 2)
    return out


def pair_loop_aitchison(logp: np.ndarray) -> np.ndarray:
    """Per-pair loop: clr of each head, then the mean row distance for every pair."""
    n_heads = logp.shape[0]
    clrs = logp - logp.mean(-1, keepdims=True)
    out = np.zeros((n_heads, n_heads))
    for i in range(n_heads):
        for j in range(n_heads):
            out[i, j] = np.linalg.norm(clrs[i] - clrs[j], axis=-1).mean()
    return out


# ------------------------------------------------------------------------- comparisons


def bench_jsd(heads: int, rows: int, keys: int, subset: int, repeats: int) -> list[Result]:
    """JSD (keep): ours on smoothed log-probabilities vs Clark's loop and a per-pair loop."""
    p = attention(heads, rows, keys)
    n_rows = p.shape[1]

    def ours() -> np.ndarray:
        # Clark's smoothing; rows stay closed because rows == keys here.
        logp = np.log(0.001 / n_rows + 0.999 * p)
        return head_distances(logp, "jsd", convention="keep") * n_rows  # mean -> sum

    sub = range(min(subset, heads))
    scale = heads / len(sub)
    d_ours = ours()
    d_clark = clark_js_distances(p, sub)
    d_pairs = pair_loop_jsd(p, sub)
    for name, ref in (("Clark", d_clark), ("per-pair", d_pairs)):
        if not np.allclose(d_ours[: len(sub)], ref[: len(sub)], rtol=1e-9, atol=1e-9):
            worst = float(np.abs(d_ours[: len(sub)] - ref[: len(sub)]).max())
            raise AssertionError(f"head_distances jsd disagrees with the {name} loop: {worst}")
    t_ours = best_of(ours, repeats)
    t_clark = best_of(lambda: clark_js_distances(p, sub), repeats) * scale
    t_pairs = best_of(lambda: pair_loop_jsd(p, sub), repeats) * scale
    shape = f"{heads}x{rows}x{keys}"
    timed = f"reference timed on {len(sub)} of {heads} heads (outer loop), scaled x{scale:g}"
    return [
        Result(f"head_distances jsd keep {shape} vs Clark loop", t_ours, t_clark, 10.0, timed),
        Result(f"head_distances jsd keep {shape} vs per-pair loop", t_ours, t_pairs, 10.0, timed),
    ]


def bench_aitchison(heads: int, rows: int, keys: int, repeats: int) -> Result:
    """Aitchison: ours vs the per-pair clr loop, both from log-probabilities."""
    logp = np.log(attention(heads, rows, keys, seed=1))
    d_ours = head_distances(logp, "aitchison")
    d_loop = pair_loop_aitchison(logp)
    if not np.allclose(d_ours, d_loop, rtol=1e-9, atol=1e-9):
        worst = float(np.abs(d_ours - d_loop).max())
        raise AssertionError(f"head_distances aitchison disagrees with the loop: {worst}")
    t_ours = best_of(lambda: head_distances(logp, "aitchison"), repeats)
    t_loop = best_of(lambda: pair_loop_aitchison(logp), max(1, repeats - 1))
    return Result(
        f"head_distances aitchison {heads}x{rows}x{keys} vs per-pair loop",
        t_ours,
        t_loop,
        None,  # retired: the reference is already vectorised over rows
        f"full {heads}x{heads} loop timed",
    )


def bench_clr(rows: int, keys: int, repeats: int) -> list[Result]:
    """attncoda.clr vs scikit-bio's clr on (rows, keys) probabilities."""
    from skbio.stats.composition import clr as skbio_clr

    p = attention(1, rows, keys, seed=2)[0]
    logp = np.log(p)
    if not np.allclose(clr(np.log(p)), skbio_clr(p), rtol=1e-12, atol=1e-12):
        raise AssertionError("attncoda.clr disagrees with skbio clr")
    t_ref = best_of(lambda: skbio_clr(p), repeats)
    t_from_p = best_of(lambda: clr(np.log(p)), repeats)
    t_from_logp = best_of(lambda: clr(logp), repeats)
    return [
        Result(
            f"clr(np.log(p)) {rows}x{keys} vs skbio clr(p)",
            t_from_p,
            t_ref,
            None,  # retired: scikit-bio's clr is already one vectorised numpy pass
            "ours includes the log",
        ),
        Result(
            f"clr(logp) {rows}x{keys} vs skbio clr(p)",
            t_from_logp,
            t_ref,
            None,
            "ours given log-probabilities",
        ),
    ]


def run(quick: bool = False, repeats: int = 3) -> list[Result]:
    """Every coda comparison; ``quick`` shrinks the sizes for a smoke run."""
    if quick:
        return [
            *bench_jsd(24, 32, 32, subset=6, repeats=1),
            bench_aitchison(24, 32, 32, repeats=1),
            *bench_clr(5_000, 32, repeats=1),
        ]
    return [
        *bench_jsd(144, 128, 128, subset=16, repeats=repeats),
        bench_aitchison(144, 128, 128, repeats=repeats),
        *bench_clr(100_000, 128, repeats=repeats),
    ]


def profile(top: int = 12) -> str:
    """cProfile of attncoda's side of each comparison, at full size: where the time goes."""
    import cProfile
    import io
    import pstats

    p = attention(144, 128, 128)
    logp = np.log(p)
    big = np.log(attention(1, 100_000, 128, seed=2)[0])
    calls = {
        "head_distances jsd keep": lambda: head_distances(logp, "jsd", convention="keep"),
        "head_distances aitchison": lambda: head_distances(logp, "aitchison"),
        "clr(logp) 100000x128": lambda: clr(big),
    }
    out = io.StringIO()
    for name, call in calls.items():
        call()
        prof = cProfile.Profile()
        prof.enable()
        call()
        prof.disable()
        out.write(f"\n=== {name}\n")
        pstats.Stats(prof, stream=out).strip_dirs().sort_stats("tottime").print_stats(top)
    return out.getvalue()


def table(results: list[Result]) -> str:
    """A plain-text table: name, ours (s), reference (s), ratio, target, met?."""
    width = max(len(r.name) for r in results)
    lines = [
        f"{'name':<{width}}  {'ours (s)':>10}  {'ref (s)':>10}  {'ratio':>8}  {'target':>7}  met?"
    ]
    for r in results:
        ratio = f"{r.ratio:.1f}x" if math.isfinite(r.ratio) else "inf"
        target = "retired" if r.target is None else f"{r.target:>6g}x"
        met = "-" if r.met is None else ("yes" if r.met else "NO")
        lines.append(
            f"{r.name:<{width}}  {r.ours_s:>10.4f}  {r.reference_s:>10.4f}  {ratio:>8}  "
            f"{target:>7}  {met}"
        )
    notes = [f"  - {r.name}: {r.note}" for r in results if r.note]
    return "\n".join(lines + (["notes:", *notes] if notes else []))
