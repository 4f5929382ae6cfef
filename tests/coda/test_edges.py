"""Numerical edges never give NaN: the identities hold, or the call is refused by name.

Rows whose sink takes all but 1e-12 of the mass, logits of +-1e4, a row with a single
content key, a -inf log-probability on a visible key, and half-precision tensors, on numpy
and torch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attncoda as ac
from attncoda._errors import AttncodaError


def _finite(backend, *values) -> None:
    for value in values:
        assert np.isfinite(backend.numpy(value)).all()


def _logsoftmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    return z - (z.max() + np.log(np.exp(z - z.max()).sum()))


def test_a_sink_of_all_but_1e_12_keeps_the_content_exact(backend):
    # Sink logit 0, content logits log(1e-12 * q): s = 1 / (1 + 1e-12).
    q = np.array([0.5, 0.3, 0.2])
    z = np.concatenate([[0.0], np.log(1e-12 * q)])
    logp = backend.array(_logsoftmax(z), "float64")
    split = ac.entropy_split(logp, sink=0)
    _finite(backend, split.total, split.binary, split.content, split.sink_mass)
    h_q = -(q * np.log(q)).sum()
    assert math.isclose(float(split.content), h_q, rel_tol=1e-12)
    s = float(split.sink_mass)
    assert abs(s - 1 / (1 + 1e-12)) <= 2e-16
    # 1 - s from the float s would lose four digits to cancellation: use the exact value.
    rest = 1e-12 / (1 + 1e-12)
    rebuilt = float(split.binary) + s * float(split.within_sink) + rest * float(split.content)
    assert math.isclose(float(split.total), rebuilt, rel_tol=1e-9)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_logits_of_1e4_stay_finite_and_pythagorean(backend, dtype):
    a = backend.array(_logsoftmax([1e4, -1e4, 0.0, 3.0]), dtype)
    b = backend.array(_logsoftmax([-1e4, 1e4, 2.0, 0.0]), dtype)
    split = ac.aitchison_split(a, b, sink=0)
    _finite(backend, split.total, split.sink, split.content)
    total, parts = float(split.total) ** 2, float(split.sink) ** 2 + float(split.content) ** 2
    # Distances near 3e4 in float32 keep ~7 significant digits.
    assert math.isclose(total, parts, rel_tol=1e-5 if dtype == "float32" else 1e-12)
    _finite(backend, ac.entropy(a), ac.row_distance(a, b, "jsd", convention="drop"))


def test_a_minus_inf_on_a_visible_key_is_zero_mass_or_a_named_refusal(backend):
    logp = backend.array([math.log(0.5), -math.inf, math.log(0.3), math.log(0.2)], "float64")
    split = ac.entropy_split(logp, sink=0)
    expected = -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2))
    assert math.isclose(float(split.total), expected, rel_tol=1e-12)
    with pytest.raises(AttncodaError, match="-inf"):
        ac.aitchison_split(logp, logp, sink=0)


def test_a_row_of_one_sink_and_one_content_key(backend):
    logp = backend.array([math.log(0.9), math.log(0.1)], "float64")
    split = ac.entropy_split(logp, sink=0)
    assert float(split.content) == 0.0  # one content key: H(q) = 0 exactly
    assert math.isclose(float(split.total), float(split.binary), rel_tol=1e-12)
    with pytest.raises(AttncodaError, match="no content keys remain"):
        ac.entropy_split(backend.array([0.0], "float64"), sink=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_rows_give_finite_splits(dtype):
    logp = torch.log_softmax(torch.tensor([6.0, -3.0, 0.0, 1.0]), -1).to(dtype)
    split = ac.entropy_split(logp, sink=0)
    for value in (split.total, split.binary, split.content, split.sink_mass):
        assert value.dtype == dtype and torch.isfinite(value).all()
