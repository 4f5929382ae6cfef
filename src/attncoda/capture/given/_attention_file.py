"""Attention files saved by a past run (``--attentions``): ``.npz``, ``.pt`` or
``.safetensors``, read without unpickling anything but tensors, and every file that holds
something else refused in one line that says what it holds and what is accepted.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attncoda._errors import AttncodaError
from attncoda.capture.names import ATTENTION_FILES

from ._inputs import transformer_lens_layers

__all__ = ["read_attentions"]

_ARRAY_KEYS = ("attentions", "attention", "attn", "patterns", "scores", "logits")
_TOKEN_KEYS = ("input_ids", "tokens", "token_ids")


def read_attentions(path: str | Path) -> dict[str, Any]:
    """Attention saved by a past run: ``.npz``, ``.pt`` or ``.safetensors``.

    The file holds one array ``(batch, layer, head, query_pos, key_pos)`` (or ``(layer,
    head, query_pos, key_pos)``) under ``attentions`` (or ``attn``, ``patterns``,
    ``scores``, ``logits``, or as its only array), or per-layer arrays under TransformerLens
    hook names; optionally ``input_ids`` (or ``tokens``) and ``attention_mask``. A ``.pt``
    file may also hold a Hugging Face attentions tuple.

    Returns
    -------
    dict
        ``attn`` (for :func:`from_attentions`), ``tokens`` and ``attention_mask`` (None when
        absent), and ``kind`` when the key says (``scores``/``logits`` -> ``"logits"``).
    """
    path = Path(path)
    if path.suffix not in ATTENTION_FILES:
        raise AttncodaError(
            f"attention file {str(path)!r} is not one of {', '.join(ATTENTION_FILES)}: save "
            f"the array with numpy.savez, torch.save or safetensors"
        )
    if not path.is_file():
        raise AttncodaError(f"attention file {str(path)!r} does not exist")
    content = _load(path)
    if not isinstance(content, Mapping):
        _check_held(path, content, None)
        return {"attn": content, "tokens": None, "attention_mask": None, "kind": None}
    tokens = next((content[k] for k in _TOKEN_KEYS if k in content), None)
    mask = content.get("attention_mask")
    if transformer_lens_layers(content) is not None:
        return {"attn": dict(content), "tokens": tokens, "attention_mask": mask, "kind": None}
    arrays = [k for k in _ARRAY_KEYS if k in content]
    others = [k for k in content if k not in (*_TOKEN_KEYS, "attention_mask")]
    key = arrays[0] if arrays else (others[0] if len(others) == 1 else None)
    if key is None:
        raise AttncodaError(
            f"attention file {str(path)!r} holds {sorted(content)}: name the attention array "
            f"'attentions' (or save only that array)"
        )
    kind = "logits" if key in ("scores", "logits") else None
    _check_held(path, content[key], key)
    return {"attn": content[key], "tokens": tokens, "attention_mask": mask, "kind": kind}


#: What ``--attentions`` accepts, as the messages about a file that holds something else say.
_ACCEPTED = (
    "give a .npz file from numpy.savez, a .pt file from torch.save of a tensor (or of a "
    "dict, tuple or list of tensors), or a .safetensors file"
)
# How each reader's files begin: a zip archive (.npz, and .pt since PyTorch 1.6), a pickle
# (protocol 2 or later: .pt before 1.6), a lone .npy array.
_ZIP, _PICKLE, _NPY = (b"PK\x03\x04", b"PK\x05\x06"), b"\x80", b"\x93NUMPY"


def _holds(head: bytes) -> str:
    """What a file whose first bytes are ``head`` holds, in words, for messages."""
    if not head:
        return "nothing (it is empty)"
    if head.startswith(_ZIP):
        return "a zip archive"
    if head.startswith(_PICKLE):
        return "a pickle"
    if head.startswith(_NPY):
        return "a lone numpy array (.npy): save it with numpy.savez instead"
    if b"\0" not in head:
        try:
            head.decode("utf-8")
            return "text"
        except UnicodeDecodeError as err:
            if err.start >= len(head) - 3:  # a character cut at the end of the sample
                return "text"
    return "data of no format it accepts"


def _load(path: Path) -> Any:
    """The content of an attention file, read without running any pickled code.

    Every failure is one message that says what the file holds and what is accepted;
    PyTorch's own advice (to load with ``weights_only=False``, which runs arbitrary code
    from the file) is never passed on.
    """
    with path.open("rb") as handle:
        head = handle.read(64)
    where = f"attention file {str(path)!r}"
    archive = head.startswith(_ZIP)
    if (
        path.suffix == ".npz"
        and not archive
        or path.suffix == ".pt"
        and not (archive or head.startswith(_PICKLE))
    ):
        raise AttncodaError(f"{where} holds {_holds(head)}, not a {path.suffix} file: {_ACCEPTED}")
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        if path.suffix == ".pt":
            return torch.load(path, map_location="cpu", weights_only=True)
        from safetensors.torch import load_file

        return load_file(str(path))
    except pickle.UnpicklingError:
        # weights_only refuses any global it does not know: the file pickled an object.
        raise AttncodaError(
            f"{where} holds a pickled object that is not a tensor or array: save a tensor "
            f"with torch.save(tensor) or a numpy array with numpy.savez"
        ) from None
    except ValueError as err:
        if "allow_pickle" in str(err):  # an array of Python objects inside the .npz
            raise AttncodaError(
                f"{where} holds an array of Python objects, not numbers: save numeric arrays "
                f"with numpy.savez"
            ) from None
        raise AttncodaError(_damaged(where, path, head, err)) from None
    except Exception as err:  # the readers raise many types for a damaged file
        raise AttncodaError(_damaged(where, path, head, err)) from None


def _damaged(where: str, path: Path, head: bytes, err: Exception) -> str:
    """The message of a file its reader could not read: truncated, damaged, or another
    format (a safetensors file has no magic bytes to check first)."""
    if path.suffix == ".safetensors" and _holds(head) in ("text", "nothing (it is empty)"):
        return f"{where} holds {_holds(head)}, not a .safetensors file: {_ACCEPTED}"
    if path.suffix == ".pt" and head.startswith(_PICKLE):
        return (
            f"{where} holds a pickle that torch.load cannot read (truncated, or not written "
            f"by torch.save): save a tensor with torch.save(tensor) or a numpy array with "
            f"numpy.savez"
        )
    # The first sentence: what failed, without the reader's advice that follows it.
    what = str(err).strip().splitlines()[0].split(". ")[0] if str(err).strip() else "no detail"
    writer = {".npz": "numpy.savez", ".pt": "torch.save"}.get(path.suffix, "safetensors")
    return (
        f"{where} is truncated or damaged ({type(err).__name__}: {what}): write it again "
        f"with {writer}"
    )


def _check_held(path: Path, value: Any, key: str | None) -> None:
    """Refuse attention that is not numbers of a shape :func:`from_attentions` reads."""
    where = f"attention file {str(path)!r}" + (f" under {key!r}" if key is not None else "")
    if isinstance(value, (tuple, list)):
        if not value:
            raise AttncodaError(f"{where} holds an empty {type(value).__name__}: {_ACCEPTED}")
        for item in value:
            if not isinstance(item, (torch.Tensor, np.ndarray)) or item.ndim != 4:
                raise AttncodaError(
                    f"{where} holds a {type(value).__name__} with "
                    f"{_described(item)}: give one (batch, head, query_pos, key_pos) tensor "
                    f"per layer, or one (layer, head, query_pos, key_pos) array per document"
                )
        return
    if not isinstance(value, (torch.Tensor, np.ndarray)):
        raise AttncodaError(f"{where} holds {_described(value)}, not an array: {_ACCEPTED}")
    if isinstance(value, torch.Tensor):
        numeric = value.dtype != torch.bool and not value.is_complex()
    else:
        numeric = value.dtype.kind in "fiu"
    if not numeric or value.ndim not in (4, 5):
        raise AttncodaError(
            f"{where} holds {_described(value)}: give attention of shape (batch, layer, head, "
            f"query_pos, key_pos) or (layer, head, query_pos, key_pos), as numbers"
        )


def _described(value: Any) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"an array of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"a Python {type(value).__name__}"
