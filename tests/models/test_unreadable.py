"""A model whose files cannot be read is an AttncodaError naming the file and what to do (a
truncated safetensors, a config.json that does not parse, a GGUF file with a bad header,
a damaged file of a hub snapshot), and the spec check before a run does not read the
weights (docs/design.md, "A run keeps going")."""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.models.load import load_model  # noqa: E402
from attncoda.models.peak import BASE, OVERHEAD, peak_bytes  # noqa: E402
from attncoda.models.resolve import check_spec  # noqa: E402
from attncoda.models.shipped import checkpoint_folder  # noqa: E402

RESAVE = "re-download the model, re-save it with save_pretrained, or check the path"


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    """A copy of the smallest shipped checkpoint (a train-tiny GPT-NeoX folder)."""
    folder = tmp_path / "model"
    shutil.copytree(checkpoint_folder("bigram-backcopy", "step0"), folder)
    return folder


def _truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


@pytest.mark.parametrize("keep", [3, 1000, -10], ids=["no-header", "header-cut", "data-cut"])
def test_a_truncated_safetensors_names_the_file(checkpoint, keep):
    weights = checkpoint / "model.safetensors"
    size = weights.stat().st_size
    _truncate(weights, keep if keep > 0 else size + keep)
    with pytest.raises(AttncodaError) as info:
        load_model(str(checkpoint))
    message = str(info.value)
    assert message.startswith(f"model file {str(weights.resolve())!r} cannot be read (")
    assert message.endswith(f"): it is truncated or damaged; {RESAVE}")
    # The safetensors library's own words are kept: they say what is wrong with the file.
    assert "SafetensorError: " in message


def test_a_config_that_does_not_parse_names_the_file(checkpoint):
    config = checkpoint / "config.json"
    config.write_text('{"model_type": "gpt_neox", ')
    with pytest.raises(AttncodaError) as info:
        load_model(str(checkpoint))
    assert str(info.value) == (
        f"model file {str(config.resolve())!r} does not parse as JSON (JSONDecodeError: "
        f"Expecting property name enclosed in double quotes: line 1 column 28 (char 27)): "
        f"{RESAVE}"
    )


@pytest.mark.parametrize(
    ("data", "said"),
    [
        # magic, version 3, 5 tensors, 1000 metadata entries, then nothing
        (
            b"GGUF" + struct.pack("<IQQ", 3, 5, 1000),
            "unpack_from requires a buffer of at least 32 bytes for unpacking 8 bytes at "
            "offset 24 (actual buffer size is 24)",
        ),
        (b"NOTAGGUF" * 8, None),
    ],
    ids=["header-cut", "no-magic"],
)
def test_a_gguf_with_a_bad_header_names_the_file(tmp_path, data, said):
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    with pytest.raises(AttncodaError) as info:
        load_model(str(path))
    message = str(info.value)
    prefix = f"transformers {transformers.__version__} cannot load the GGUF file {str(path)!r}: "
    assert message.startswith(prefix)
    assert message.endswith(
        "; if the file is truncated or damaged, download it again (or check the path)"
    )
    if said is not None:
        assert message[len(prefix) :].startswith(said)
    else:
        assert "GGUF magic" in message


def test_a_damaged_file_of_a_cached_hub_model_names_it(checkpoint, tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = hub / "models--tiny-org--tiny" / "snapshots" / commit
    shutil.copytree(checkpoint, snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    weights = snapshot / "model.safetensors"
    _truncate(weights, 1000)
    with pytest.raises(AttncodaError) as info:
        load_model("tiny-org/tiny")
    message = str(info.value)
    assert re.match(rf"^model file {re.escape(repr(str(weights)))} cannot be read \(", message)
    assert message.endswith(
        "): it is truncated or damaged; delete 'tiny-org/tiny' from the Hugging Face cache "
        "and load it again with the network on, or give a local folder containing config.json"
    )


def test_the_spec_check_does_not_read_the_weights(checkpoint, monkeypatch):
    weights = checkpoint / "model.safetensors"
    _truncate(weights, 1000)
    (checkpoint / "config.json").write_text("{")
    opened = []
    real_open = Path.open

    def watch(self, *args, **kwargs):
        opened.append(self.name)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", watch)
    check_spec(str(checkpoint))  # passes: the folder has config.json; nothing is read
    assert peak_bytes(str(checkpoint)) == int(BASE + 1000 * 2 * OVERHEAD)  # sizes only
    assert opened == []
