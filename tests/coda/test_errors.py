"""Every refusal of attncoda.coda: one AttncodaError, one exact message per failure.

Each message is written out in full here and asserted exactly; a final test checks that no
two failures share a message.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attncoda
from attncoda import (
    AttncodaError,
    aitchison,
    aitchison_split,
    clr,
    entropy,
    entropy_change_split,
    entropy_split,
    head_distances,
    log_probs,
    row_distance,
    sink_balance,
)

Z3 = np.log([0.5, 0.3, 0.2])
ROWS = np.zeros((2, 5, 5))
CAUSAL = np.tril(np.ones((5, 5), dtype=bool))


def _with(array: np.ndarray, index, value) -> np.ndarray:
    out = array.copy()
    out[index] = value
    return out


MISSING_CONVENTION = (
    "metric {!r} needs convention='keep' (the row as is, sink included) or convention='drop' "
    "(sink keys removed, the rest renormalised): the two answer different questions, so there "
    "is no default"
)
NO_CONVENTION = (
    "metric {!r} takes no convention (got convention='keep'): it is computed on the whole "
    "composition and splits exactly into sink and content parts; leave convention out"
)
NEG_INF_TAIL = (
    ": log-ratio (Aitchison) quantities need every key to have positive mass; rebuild the rows "
    "with log_probs(p, zeros='replace') or pass logits"
)
SINK_TYPE = "sink must be an int or a sequence of distinct ints (key positions); got {}"

# (id, call, exact message)
CASES = [
    # log_probs
    (
        "zero-raise",
        lambda: log_probs(np.array([0.5, 0.5, 0.0])),
        "p has a zero at index (2,): a zero has no logarithm; pass zeros='replace' for "
        "multiplicative replacement (delta=(1/n_keys)**2 by default, as scikit-bio) or remove "
        "that key",
    ),
    (
        "negative",
        lambda: log_probs(np.array([0.6, 0.5, -0.1])),
        "p contains a negative entry -0.1 at index (2,): probabilities must be non-negative",
    ),
    (
        "nan-probability",
        lambda: log_probs(np.array([0.5, np.nan, 0.5])),
        "p contains NaN at index (1,): attention rows must be finite probabilities",
    ),
    (
        "inf-probability",
        lambda: log_probs(np.array([np.inf, 0.5, 0.5])),
        "p contains +inf at index (0,): attention rows must be finite probabilities",
    ),
    (
        "sum-1.1",
        lambda: log_probs(np.array([0.5, 0.6])),
        "rows of p must sum to 1 within atol=1e-06; the row sums to 1.1; normalise the rows "
        "(p / p.sum(axis, keepdims=True)) or pass atol",
    ),
    (
        "sum-1.1-worst-row",
        lambda: log_probs(np.array([[0.5, 0.5], [0.5, 0.6], [0.3, 0.69]])),
        "rows of p must sum to 1 within atol=1e-06; row (1,) sums to 1.1 (the worst row); "
        "normalise the rows (p / p.sum(axis, keepdims=True)) or pass atol",
    ),
    (
        "sum-float32-tolerance",
        lambda: log_probs(np.array([0.5, 0.5005], dtype=np.float32)),
        "rows of p must sum to 1 within atol=0.0001; the row sums to 1.000499963760376; "
        "normalise the rows (p / p.sum(axis, keepdims=True)) or pass atol",
    ),
    (
        "unknown-zeros-policy",
        lambda: log_probs(np.array([0.5, 0.5]), zeros="drop"),
        "zeros must be 'raise' or 'replace'; got 'drop'",
    ),
    (
        "delta-too-large",
        lambda: log_probs(np.array([0.5, 0.5, 0.0, 0.0]), zeros="replace", delta=0.6),
        "delta=0.6 is too large for rows with 2 zeros: zeros times delta must stay below 1; "
        "pass a smaller delta",
    ),
    # the log-ratio functions
    (
        "nan-log",
        lambda: clr(np.array([0.0, np.nan])),
        "logp contains NaN at index (1,): rows must be finite log-probabilities or logits",
    ),
    (
        "plus-inf-log",
        lambda: clr(np.array([np.inf, 0.0])),
        "logp contains +inf at index (0,): rows must be finite log-probabilities or logits",
    ),
    (
        "minus-inf-clr",
        lambda: clr(np.array([0.0, -np.inf])),
        "logp contains -inf (a probability of exactly 0) at index (1,)" + NEG_INF_TAIL,
    ),
    (
        "minus-inf-aitchison-second",
        lambda: aitchison(Z3, _with(Z3, 2, -np.inf)),
        "logq contains -inf (a probability of exactly 0) at index (2,)" + NEG_INF_TAIL,
    ),
    (
        "scalar",
        lambda: clr(1.0),
        "logp must have at least one axis (the keys); got a scalar",
    ),
    (
        "not-an-array",
        lambda: clr("abc"),
        "logp must be a numpy array or a torch tensor; got str",
    ),
    (
        "complex",
        lambda: clr(np.array([1 + 1j, 2])),
        "logp must be real; got dtype complex128",
    ),
    (
        "axis-out-of-range",
        lambda: clr(np.zeros((3, 4)), axis=2),
        "axis 2 is out of range for logp with 2 axes (shape (3, 4))",
    ),
    (
        "axis-not-int",
        lambda: clr(np.zeros((3, 4)), axis=1.0),
        "axis must be an int; got 1.0",
    ),
    # sinks
    (
        "sink-out-of-range",
        lambda: sink_balance(Z3, sink=3),
        "sink index 3 is out of range for rows of 3 keys: use a position in 0..2",
    ),
    (
        "sink-negative",
        lambda: aitchison_split(Z3, Z3, sink=[0, -1]),
        "sink index -1 is out of range for rows of 3 keys: use a position in 0..2",
    ),
    (
        "sink-duplicate",
        lambda: entropy_split(Z3, sink=[1, 1]),
        "sink positions must be distinct; got [1, 1]",
    ),
    (
        "sink-covers-all-keys",
        lambda: sink_balance(Z3, sink=[2, 0, 1]),
        "sink [2, 0, 1] covers all 3 keys of each row: no content keys remain; use fewer sink "
        "positions or longer rows",
    ),
    (
        "sink-empty",
        lambda: sink_balance(Z3, sink=[]),
        "sink must name at least one key position; got an empty sequence",
    ),
    ("sink-str", lambda: sink_balance(Z3, sink="0"), SINK_TYPE.format("'0'")),
    ("sink-float", lambda: sink_balance(Z3, sink=1.5), SINK_TYPE.format("1.5")),
    ("sink-bool", lambda: sink_balance(Z3, sink=True), SINK_TYPE.format("True")),
    ("sink-float-item", lambda: sink_balance(Z3, sink=[0, 1.0]), SINK_TYPE.format("[0, 1.0]")),
    # metrics and conventions
    *[
        (
            f"missing-convention-{m}",
            lambda m=m: row_distance(Z3, Z3, m),
            MISSING_CONVENTION.format(m),
        )
        for m in ("cosine", "jsd", "entropy_gap", "hellinger", "tv")
    ],
    *[
        (
            f"convention-given-{m}",
            lambda m=m: row_distance(Z3, Z3, m, convention="keep"),
            NO_CONVENTION.format(m),
        )
        for m in ("aitchison", "aitchison_sink", "aitchison_content")
    ],
    (
        "unknown-metric",
        lambda: row_distance(Z3, Z3, "kl", convention="keep"),
        "unknown metric 'kl': use one of cosine, jsd, entropy_gap, hellinger, tv, aitchison, "
        "aitchison_sink, aitchison_content",
    ),
    (
        "unknown-convention",
        lambda: row_distance(Z3, Z3, "jsd", convention="both"),
        "convention must be 'keep' or 'drop'; got 'both'",
    ),
    # pairs of arrays
    (
        "shapes-do-not-broadcast",
        lambda: aitchison(Z3, np.zeros(4)),
        "logp of shape (3,) and logq of shape (4,) do not broadcast; give rows over the same keys",
    ),
    (
        "keys-differ-along-axis",
        lambda: entropy_change_split(np.zeros((4, 5)), np.zeros(5), axis=0),
        "logp0 and logp1 must have the same number of keys along axis 0; got 4 and 5",
    ),
    (
        "numpy-and-torch",
        lambda: row_distance(Z3, torch.as_tensor(Z3), "aitchison"),
        "logp and logq must be the same kind of array; got ndarray and Tensor",
    ),
    (
        "dtypes-differ",
        lambda: aitchison(Z3, Z3.astype(np.float32)),
        "logp and logq must have the same dtype; got float64 and float32",
    ),
    # entropies
    (
        "all-minus-inf-row",
        lambda: entropy(np.array([[0.0, 0.0], [-np.inf, -np.inf]])),
        "row (1,) of logp has no key with positive probability (every entry is -inf)",
    ),
    (
        "no-content-mass",
        lambda: entropy_split(np.array([[0.0, -np.inf, -np.inf]]), sink=0),
        "row (0,) of logp puts no mass on its content keys: the content composition is "
        "undefined there; drop that row or give it logits",
    ),
    (
        "no-sink-mass",
        lambda: entropy_change_split(Z3[None], np.array([[-np.inf, 0.0, 0.0]]), sink=0),
        "row (0,) of logp1 puts no mass on its sink keys: the sink composition is undefined "
        "there; drop that row or give it logits",
    ),
    # head distances
    (
        "head-distances-not-3d",
        lambda: head_distances(np.zeros((3, 4)), "aitchison"),
        "logp_rows must have shape (heads, rows, keys); got shape (3, 4)",
    ),
    (
        "key-mask-shape",
        lambda: head_distances(ROWS, "aitchison", key_mask=np.ones((5, 4), dtype=bool)),
        "key_mask must have shape (rows, keys) = (5, 5); got (5, 4)",
    ),
    (
        "key-mask-not-bool",
        lambda: head_distances(ROWS, "aitchison", key_mask=np.ones((5, 5), dtype=np.int64)),
        "key_mask must be boolean; got dtype int64",
    ),
    (
        "no-usable-rows",
        lambda: head_distances(np.zeros((2, 4, 2)), "jsd", convention="keep"),
        "no row has at least 2 content keys (4 rows, sink [0]): head distances are means over "
        "rows with m >= 2 content keys",
    ),
    (
        "head-distances-minus-inf-aitchison",
        lambda: head_distances(_with(ROWS, (1, 2, 3), -np.inf), "aitchison_content"),
        "logp_rows contains -inf (a probability of exactly 0) at index (1, 2, 3)" + NEG_INF_TAIL,
    ),
]


def test_attncoda_error_is_a_value_error():
    assert issubclass(AttncodaError, ValueError)
    assert attncoda.AttncodaError is AttncodaError


@pytest.mark.parametrize(("call", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_exact_message(call, message):
    with pytest.raises(AttncodaError, match=re.escape(message)) as info:
        call()
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_every_failure_has_its_own_message():
    messages = [message for _, _, message in CASES]
    duplicates = {m for m in messages if messages.count(m) > 1}
    assert not duplicates
    assert len(set(messages)) == len(CASES)


TORCH_CASES = {
    "zero-raise": lambda: log_probs(torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)),
    "negative": lambda: log_probs(torch.tensor([0.6, 0.5, -0.1], dtype=torch.float64)),
    "nan-probability": lambda: log_probs(torch.tensor([0.5, float("nan"), 0.5])),
    "sum-1.1": lambda: log_probs(torch.tensor([0.5, 0.6], dtype=torch.float64)),
    "minus-inf-clr": lambda: clr(torch.tensor([0.0, -float("inf")])),
    "nan-log": lambda: clr(torch.tensor([0.0, float("nan")])),
    "sink-out-of-range": lambda: sink_balance(torch.as_tensor(Z3), sink=3),
    "key-mask-shape": lambda: head_distances(
        torch.zeros(2, 5, 5), "aitchison", key_mask=torch.ones(5, 4, dtype=torch.bool)
    ),
    "no-usable-rows": lambda: head_distances(torch.zeros(2, 4, 2), "jsd", convention="keep"),
}


@pytest.mark.parametrize("case_id", sorted(TORCH_CASES))
def test_torch_inputs_get_the_same_messages(case_id):
    message = {c[0]: c[2] for c in CASES}[case_id]
    with pytest.raises(AttncodaError, match=re.escape(message)) as info:
        TORCH_CASES[case_id]()
    assert str(info.value) == message


def test_head_distances_refuses_a_missing_convention_as_row_distance_does():
    # The same failure, so the same message as row_distance's.
    with pytest.raises(AttncodaError) as info:
        head_distances(ROWS, "hellinger")
    assert str(info.value) == MISSING_CONVENTION.format("hellinger")


def test_head_distances_mask_not_bool_on_torch():
    with pytest.raises(AttncodaError) as info:
        head_distances(torch.zeros(2, 5, 5), "aitchison", key_mask=torch.ones(5, 5))
    assert str(info.value) == "key_mask must be boolean; got dtype torch.float32"


# ---------------------------------------------------------------------- edge cases


@pytest.mark.parametrize("delta", [-0.1, 0])
def test_a_delta_that_is_not_positive_is_refused_as_such(delta):
    # The replacement of zeros needs delta > 0; the message says so, not "too large".
    message = f"delta must be positive; got delta={delta!r}"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        log_probs(np.array([0.5, 0.5, 0.0]), zeros="replace", delta=delta)


def test_head_distances_error_names_the_row_of_the_input():
    # Under a causal mask rows 0 and 1 (m < 2 with sink 0) are left out before the check; a
    # -inf at logp_rows[1, 3, 2] is reported at that index of the array the caller passed,
    # not at its position in the filtered rows, (1, 1, 2).
    rows = _with(ROWS, (1, 3, 2), -np.inf)
    message = "logp_rows contains -inf (a probability of exactly 0) at index (1, 3, 2)" + (
        NEG_INF_TAIL
    )
    with pytest.raises(AttncodaError, match=re.escape(message)):
        head_distances(rows, "aitchison", key_mask=CAUSAL)
