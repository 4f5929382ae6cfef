"""Report tables label each model with its family when the run's tables carry one."""

from __future__ import annotations

import pandas as pd

from attncoda.experiments.view import groups


def test_groups_label_names_the_family():
    frame = pd.DataFrame(
        {
            "model": ["gemma3", "gemma3", "mpnet"],
            "revision": ["-", "-", "-"],
            "family": ["Gemma 3", "Gemma 3", "MPNet"],
            "value": [1, 2, 3],
        }
    )
    labels = [(label, list(g["value"])) for label, g in groups(frame)]
    assert labels == [("gemma3 (Gemma 3)", [1, 2]), ("mpnet (MPNet)", [3])]
    # Tables from before the family column keep the bare label.
    assert [label for label, _ in groups(frame.drop(columns="family"))] == ["gemma3", "mpnet"]


def test_models_table_names_the_family():
    from attncoda.report.html import _models

    info = {
        "mpnet@-": {"family": "MPNet", "n_layers": 12, "n_heads": 12},
        "gemma3@-": {"family": "Gemma 3", "causal": True},
        "old@-": {"model_type": "gpt_neox"},  # a manifest from before the family field
    }
    html = _models(info, ["gemma3", "mpnet", "old"], "sink = first")
    assert "<th>family</th>" in html
    assert html.index("<td>Gemma 3</td>") < html.index("<td>MPNet</td>")
    assert "<td>gpt_neox</td>" in html


def test_models_table_keeps_the_run_order_when_a_revision_holds_an_at():
    from attncoda.report.html import _models

    info = {
        "train-tiny@step0": {"family": "GPT-NeoX"},
        "a/b@x@y": {"family": "Llama"},
        "minilm@-": {"family": "BERT"},
    }
    html = _models(info, ["minilm", "a/b@x@y"], "sink = first")
    rows = [html.index(f"<td>{label}</td>") for label in ("minilm", "a/b@x@y", "train-tiny@step0")]
    assert rows == sorted(rows)


def test_models_table_names_the_forward_and_a_half_precision_drift():
    from attncoda.report.html import _models

    info = {
        "smollm2@-": {"family": "Llama", "dtype": "bfloat16", "forward": "fast:cpp"},
        "mpnet@-": {"capture_mode": "outputs", "dtype": "float16", "read_dtype": "float16"},
        "minilm@-": {"dtype": "float32", "forward": "eager"},
    }
    html = _models(info, ["smollm2", "mpnet", "minilm"], "sink = first")
    assert "routed scores; forward: fast:cpp; bfloat16 forward: from layer 1 on" in html
    assert "rows read in float16 carry the model&#x27;s rounding" in html  # escaped
    assert "<td>routed scores; forward: eager</td>" in html
