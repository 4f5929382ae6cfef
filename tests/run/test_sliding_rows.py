"""Head-pair experiments refuse rows whose heads see different keys (sliding windows)."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import capture_windows  # noqa: E402
from attncoda.run.captured import Captured, head_rows  # noqa: E402


def _tiny_gemma3():
    """Gemma 3's layout in miniature: layer 0 slides a 4-key window, layer 1 is full."""
    torch = pytest.importorskip("torch")
    import transformers

    config = transformers.Gemma3TextConfig(
        vocab_size=120,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=8,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
    )
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _rows(model, length: int):
    ids = [np.arange(length) % 100 + 4]
    cap = capture_windows(model, ids, sink="first", record_rows="all")
    return Captured(spec="tiny-gemma3", info=None, capture=cap)


def test_rows_within_the_window_pass():
    # Up to 4 tokens, the sliding layer sees every key the full layer sees.
    rows = head_rows(_rows(_tiny_gemma3(), 4))
    assert rows.docs[0].key_mask.sum(-1).tolist() == [1, 2, 3, 4]


def test_rows_longer_than_the_window_are_refused():
    captured = _rows(_tiny_gemma3(), 6)
    # What the capture recorded, checked by hand: the last row of the sliding layer sees the
    # 4 keys 2..5 (not the sink, key 0), the full layer's sees all 6.
    visible = np.isfinite(captured.capture.rows[0])
    assert visible[0, 0, 5].tolist() == [0, 0, 1, 1, 1, 1] and visible[1, 0, 5].sum() == 6
    message = (
        "the recorded rows of 'tiny-gemma3' do not see the same keys in every head: layer "
        "1 head 0 sees 5 keys in recorded row 4 where layer 0 head 0 sees 4 (a "
        "sliding-window layer); flips, cluster and safety compare heads over the same keys, "
        "so use windows no longer than the model's sliding window (e.g. at most 512 tokens "
        "for gemma3)"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        head_rows(captured)
