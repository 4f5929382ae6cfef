"""Attention files that hold something else: one message that says what the file holds and
what ``--attentions`` accepts, never PyTorch's advice to load with ``weights_only=False``."""

from __future__ import annotations

import collections
import fractions
import pickle
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture.given import read_attentions  # noqa: E402

ACCEPTED = (
    "give a .npz file from numpy.savez, a .pt file from torch.save of a tensor (or of a "
    "dict, tuple or list of tensors), or a .safetensors file"
)
PICKLED = (
    "holds a pickled object that is not a tensor or array: save a tensor with "
    "torch.save(tensor) or a numpy array with numpy.savez"
)
SHAPE = (
    "give attention of shape (batch, layer, head, query_pos, key_pos) or (layer, head, "
    "query_pos, key_pos), as numbers"
)


def _half(path):
    data = path.read_bytes()
    return data[: len(data) // 2]


def _write(d, name):
    """Write the file ``name`` into ``d`` and return its message (after the file's name)."""
    from safetensors.torch import save_file

    good = torch.rand(1, 2, 4, 4).softmax(-1)
    path = d / name
    if name == "object.pt":  # a real pickle of an arbitrary object, through torch.save
        torch.save({"attentions": fractions.Fraction(1, 3)}, path)
        return PICKLED
    if name == "counter.pt":  # pickle.dump, not torch.save
        path.write_bytes(pickle.dumps(collections.Counter("abc"), protocol=2))
        return (
            "holds a pickle that torch.load cannot read (truncated, or not written by "
            "torch.save): save a tensor with torch.save(tensor) or a numpy array with "
            "numpy.savez"
        )
    if name == "truncated.pt":
        torch.save(good, d / "full.pt")
        path.write_bytes(_half(d / "full.pt"))
        return (
            "is truncated or damaged (RuntimeError: PytorchStreamReader failed reading zip "
            "archive: failed finding central directory): write it again with torch.save"
        )
    if name == "truncated.npz":
        np.savez(d / "full.npz", attentions=good.numpy())
        path.write_bytes(_half(d / "full.npz"))
        return (
            "is truncated or damaged (BadZipFile: File is not a zip file): write it again "
            "with numpy.savez"
        )
    if name == "truncated.safetensors":
        save_file({"attentions": good}, str(d / "full.safetensors"))
        path.write_bytes(_half(d / "full.safetensors"))
        return (
            "is truncated or damaged (SafetensorError: Error while deserializing header: "
            "incomplete metadata, file not fully covered): write it again with safetensors"
        )
    if name.startswith("text."):
        path.write_text("layer,head,value\n0,0,0.5\n")
        return f"holds text, not a {path.suffix} file: {ACCEPTED}"
    if name == "empty.pt":
        path.write_bytes(b"")
        return f"holds nothing (it is empty), not a .pt file: {ACCEPTED}"
    if name == "lone.npz":  # np.save's .npy bytes under the .npz name
        np.save(d / "lone.npy", good.numpy())
        path.write_bytes((d / "lone.npy").read_bytes())
        return (
            "holds a lone numpy array (.npy): save it with numpy.savez instead, not a .npz "
            f"file: {ACCEPTED}"
        )
    if name == "shape.npz":
        np.savez(path, attentions=np.full((4, 4), 0.25))
        return f"under 'attentions' holds an array of shape (4, 4) and dtype float64: {SHAPE}"
    if name == "shape.pt":
        torch.save(torch.full((2, 4, 4), 0.25), path)
        return f"holds an array of shape (2, 4, 4) and dtype torch.float32: {SHAPE}"
    if name == "words.npz":
        np.savez(path, attentions=np.array([[[["a"]]]]))
        return f"under 'attentions' holds an array of shape (1, 1, 1, 1) and dtype <U1: {SHAPE}"
    if name == "objects.npz":
        np.savez(path, attentions=np.array([{"a": 1}], dtype=object))
        return "holds an array of Python objects, not numbers: save numeric arrays with numpy.savez"
    if name == "number.pt":
        torch.save(5, path)
        return f"holds a Python int, not an array: {ACCEPTED}"
    if name == "layers.pt":  # a tuple, as Hugging Face's attentions, of the wrong shape
        torch.save((torch.rand(2, 3),), path)
        return (
            "holds a tuple with an array of shape (2, 3) and dtype torch.float32: give one "
            "(batch, head, query_pos, key_pos) tensor per layer, or one (layer, head, "
            "query_pos, key_pos) array per document"
        )
    raise AssertionError(name)


NAMES = [
    "object.pt",
    "counter.pt",
    "truncated.pt",
    "truncated.npz",
    "truncated.safetensors",
    "text.pt",
    "text.npz",
    "text.safetensors",
    "empty.pt",
    "lone.npz",
    "shape.npz",
    "shape.pt",
    "words.npz",
    "objects.npz",
    "number.pt",
    "layers.pt",
]


@pytest.mark.parametrize("name", NAMES)
def test_a_bad_attention_file_is_one_line_naming_what_it_holds(name, tmp_path):
    message = f"attention file {str(tmp_path / name)!r} {_write(tmp_path, name)}"
    with pytest.raises(AttncodaError) as info:
        read_attentions(tmp_path / name)
    assert str(info.value) == message
    assert "\n" not in message and "weights_only" not in message


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".safetensors"])
def test_good_files_are_still_read(suffix, tmp_path):
    from safetensors.torch import save_file

    good = torch.rand(1, 2, 3, 4, 4).softmax(-1)  # (batch, layer, head, query_pos, key_pos)
    path = tmp_path / f"a{suffix}"
    if suffix == ".npz":
        np.savez(path, attentions=good.numpy())
    elif suffix == ".pt":
        torch.save(tuple(good[:, i] for i in range(2)), path)  # a Hugging Face tuple
    else:
        save_file({"attentions": good}, str(path))
    found = read_attentions(path)
    held = found["attn"]
    stacked = torch.stack(held, 1) if isinstance(held, tuple) else torch.as_tensor(held)
    assert torch.equal(stacked, good)


def test_pytorchs_own_refusal_is_what_the_message_replaces(tmp_path):
    """The reference: torch.load itself refuses the pickled object (weights_only=True) with
    its long advice, which the message above replaces with one line."""
    _write(tmp_path, "object.pt")
    with pytest.raises(pickle.UnpicklingError, match=re.escape("weights_only")):
        torch.load(tmp_path / "object.pt", weights_only=True)
