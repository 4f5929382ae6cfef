"""Tests of :mod:`attncoda.data.tasks`: the Bigram-Backcopy task."""

from __future__ import annotations

import numpy as np
import pytest

from attncoda._errors import AttncodaError
from attncoda.data.tasks import BigramBackcopy, bos_attention, task_tokenizer


def test_transition_is_a_seeded_stochastic_matrix() -> None:
    task = BigramBackcopy(n_tokens=16, task_seed=3)
    assert task.transition.shape == (16, 16)
    np.testing.assert_allclose(task.transition.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (task.transition >= 0).all()
    again = BigramBackcopy(n_tokens=16, task_seed=3)
    np.testing.assert_array_equal(task.transition, again.transition)
    other = BigramBackcopy(n_tokens=16, task_seed=4)
    assert not np.array_equal(task.transition, other.transition)
    assert task.vocab_size == 18
    assert task.trigger_ids == (2, 3, 4)


def test_sample_follows_the_rules_of_the_task() -> None:
    task = BigramBackcopy(n_tokens=8, n_triggers=2, seq_len=40)
    ids = task.sample(500, np.random.default_rng(0))
    assert ids.shape == (500, 40) and ids.dtype == np.int64
    assert (ids[:, 0] == 0).all()
    assert (ids[:, 1:] >= 2).all() and (ids[:, 1:] < 10).all()
    assert not np.isin(ids[:, 1], task.trigger_ids).any()
    trigger = task.trigger_queries(ids)
    # Every token after a trigger copies the token before the trigger (a plain loop).
    n_copies = 0
    for row, is_trigger in zip(ids, trigger, strict=True):
        for i in range(2, 39):
            if is_trigger[i]:
                assert row[i + 1] == row[i - 1]
                n_copies += 1
    assert n_copies > 1000
    # Elsewhere the next token follows the bigram: empirical rows against the transition,
    # within 5 binomial standard deviations (a false alarm is about one in a million).
    counts = np.zeros((8, 8))
    for row, is_trigger in zip(ids, trigger, strict=True):
        for i in range(1, 39):
            if not is_trigger[i]:
                counts[row[i] - 2, row[i + 1] - 2] += 1
    for a in range(2, 8):  # non-trigger tokens
        n = counts[a].sum()
        assert n > 200
        p = task.transition[a]
        sd = np.sqrt(p * (1 - p) / n)
        assert (np.abs(counts[a] / n - p) <= 5 * sd + 1e-12).all()


def test_sample_is_deterministic_and_held_out_sequences_are_fixed() -> None:
    task = BigramBackcopy(n_tokens=8, seq_len=12)
    a = task.sample(4, np.random.default_rng(1))
    b = task.sample(4, np.random.default_rng(1))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(task.evaluation_sequences(5), task.evaluation_sequences(5))
    assert not np.array_equal(task.evaluation_sequences(4), a)


def test_round_trip_of_the_defining_numbers() -> None:
    task = BigramBackcopy(n_tokens=10, n_triggers=2, seq_len=16, concentration=0.5, task_seed=2)
    again = BigramBackcopy(**task.to_dict())
    np.testing.assert_array_equal(task.transition, again.transition)


def test_tokenizer_puts_bos_first() -> None:
    task = BigramBackcopy(n_tokens=8)
    tokenizer = task_tokenizer(task, 64)
    assert tokenizer("t5 t0 t5")["input_ids"] == [0, 7, 2, 7]
    assert len(tokenizer) == task.vocab_size
    assert tokenizer.bos_token_id == 0


def test_bos_attention_against_hand_computed_means() -> None:
    # batch 1, head 2, query 4, key 4; queries 1..3: query 2 is the trigger.
    probs = np.zeros((1, 2, 4, 4))
    probs[0, :, 0, 0] = 1.0
    probs[0, 0, 1, :2] = [0.9, 0.1]
    probs[0, 0, 2, :3] = [0.2, 0.7, 0.1]
    probs[0, 0, 3, :4] = [0.7, 0.1, 0.1, 0.1]
    probs[0, 1, 1:, 0] = 0.25
    probs[0, 1, 1, 1] = 0.75
    probs[0, 1, 2, 1:3] = [0.5, 0.25]
    probs[0, 1, 3, 1:4] = [0.25, 0.25, 0.25]
    trigger = np.array([[False, False, True, False]])
    t, n = bos_attention([probs], trigger)
    assert t == [[pytest.approx(0.2, abs=1e-15), pytest.approx(0.25, abs=1e-15)]]
    assert n == [[pytest.approx(0.8, abs=1e-15), pytest.approx(0.25, abs=1e-15)]]


def test_bos_attention_needs_both_kinds_of_query() -> None:
    with pytest.raises(AttncodaError, match="both trigger and non-trigger queries"):
        bos_attention([np.zeros((1, 1, 3, 3))], np.zeros((1, 3), dtype=bool))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_tokens": 3}, "n_tokens must be an integer of at least 4, got 3"),
        ({"n_triggers": 0}, "n_triggers must be an integer of at least 1, got 0"),
        ({"n_tokens": 4, "n_triggers": 4}, "n_triggers=4 leaves no ordinary token of 4"),
        ({"seq_len": 2}, "seq_len must be an integer of at least 4, got 2"),
        ({"concentration": 0.0}, "concentration must be a finite number above 0, got 0.0"),
    ],
)
def test_bad_task_arguments_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(AttncodaError, match=message):
        BigramBackcopy(**kwargs)
