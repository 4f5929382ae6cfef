"""Numerical edges of capture's row statistics: no NaN at s -> 1, s -> 0, logits of +-1e4, or
a -inf log-probability on a visible key (left out of the row and counted)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from attncoda.capture.stats import row_statistics  # noqa: E402


def test_row_statistics_drop_a_minus_inf_key_and_count_it():
    logits = torch.tensor([[[[0.0, -math.inf, -1.0, -2.0], [0.0, -5.0, -1.0, -2.0]]]])
    visible = torch.ones(1, 1, 2, 4, dtype=torch.bool)
    sink = torch.tensor([[True, False, False, False]])
    stats = row_statistics(torch.log_softmax(logits, -1), visible, sink)
    for value in stats.values():
        assert torch.isfinite(value.double()).all()
    assert stats["n_zero"].flatten().tolist() == [1, 0]
    assert stats["n_keys"].flatten().tolist() == [3, 4]
    # The first row equals the row without that key.
    alone = row_statistics(
        torch.log_softmax(logits[..., :1, [0, 2, 3]], -1),
        torch.ones(1, 1, 1, 3, dtype=torch.bool),
        sink[:, :3],
    )
    for name in ("sink_mass", "entropy", "content_entropy", "sink_balance"):
        assert torch.allclose(stats[name][..., 0], alone[name][..., 0], atol=1e-6)


def test_row_statistics_at_the_edges_of_the_sink_mass():
    # s -> 1: content logits 27.6 nats below the sink (s = 1 - 1e-12), and s -> 0.
    content = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    rows = torch.stack(
        [
            torch.cat([torch.zeros(1), content + math.log(1e-12)]),
            torch.cat([torch.tensor([-1e4]), content]),
            torch.cat([torch.tensor([1e4]), torch.tensor([-1e4, 0.0, 3.0])]),
        ]
    )[None, None]
    visible = torch.ones(1, 1, 3, 4, dtype=torch.bool)
    sink = torch.tensor([[True, False, False, False]])
    stats = row_statistics(torch.log_softmax(rows, -1), visible, sink)
    for value in stats.values():
        assert torch.isfinite(value.double()).all()
    h_q = float(-(content.exp() * content).sum())
    # float32 log-rows: H(q) keeps float32 precision even at s = 1 - 1e-12, because q is
    # taken from the content logs, never from 1 - s.
    assert math.isclose(float(stats["content_entropy"][0, 0, 0]), h_q, rel_tol=1e-5)
    assert math.isclose(float(stats["content_entropy"][0, 0, 1]), h_q, rel_tol=1e-5)
    assert float(stats["sink_mass"][0, 0, 1]) == 0.0
    assert float(stats["sink_mass"][0, 0, 2]) == 1.0
