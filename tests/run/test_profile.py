"""Acceptance: ``attncoda profile`` head sink mass equals transformers' eager attention."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("name", "docs"), [("minilm", 8), ("smollm2", 4)])
def test_head_sink_mass_equals_eager_output_attentions(tmp_path, name, docs):
    from attncoda.models.load import load_model
    from attncoda.run.captured import corpus_windows
    from attncoda.run.reproduce import run_experiment

    settings = {"profile": {"docs": docs, "max_tokens": 128}}
    run_experiment("profile", [name], tmp_path, settings=settings, progress=False)
    heads = pd.read_parquet(tmp_path / "tables" / "profile_heads.parquet")
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == [
        "profile_heads.parquet",
        "units.parquet",
    ]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["command"] == "profile"
    assert manifest["config"]["models"] == [name] and manifest["config"]["sink"] == "first"
    assert manifest["config"]["settings"] == {"profile": {"docs": docs, "max_tokens": 128}}
    assert len(manifest["config"]["corpus"]["sha256"]) == 64

    model, tokenizer, info = load_model(name)

    windows, _ = corpus_windows(tokenizer, text=None, max_tokens=128, docs=docs)
    total, count = 0.0, 0
    with torch.no_grad():
        for w in windows:
            ids = torch.tensor([w.input_ids])
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
            att = torch.cat(out.attentions, dim=1)[0].double().numpy()  # (L*H, q, k)
            # Rows with content: every row of a bidirectional model; causal query 0 has only
            # the sink key and is left out.
            first = 1 if info.causal else 0
            total = total + att[:, first:, 0].sum(-1)
            count += att.shape[1] - first
    expected = total / count
    with_content = heads["n_rows"] - heads["n_rows_no_content"]
    assert (with_content == count).all()  # every window read whole
    got = heads.sort_values(["layer", "head"])["sink_mass"].to_numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    if name == "minilm":
        assert (tokenizer.convert_ids_to_tokens(windows[0].input_ids[0])) == "[CLS]"
