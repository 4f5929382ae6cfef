"""The GGUF path of :func:`attncoda.load_model`: dequantise once, cache as safetensors.

transformers reads a GGUF file in seconds but refuses to ``save_pretrained`` the result, so a
plain model is rebuilt from its config and saved, with its tokenizer, into a folder of the
user cache keyed by the file's name, size and modification time, by one process at a time.
The folder is written under a temporary name, synced and renamed, and carries a metadata file
listing every file's size: a half-written or damaged folder is never read
(:mod:`attncoda.models._folders`).
"""

from __future__ import annotations

import contextlib
import copy
import errno
import functools
import hashlib
import json
import os
import shutil
import struct
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from accelerate import init_empty_weights
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

from attncoda._errors import AttncodaError
from attncoda.models._folders import (
    TEMP_PREFIX,
    discard_folder,
    folder_meta,
    publish_folder,
    read_or_make,
)

# Bump when the layout of a GGUF cache folder changes: old folders are then never read.
_CACHE_FORMAT = 1
_CACHE_META = "attncoda-cache.json"


def cache_dir() -> Path:
    """Return the folder where attncoda caches dequantised models.

    ``$ATTNCODA_CACHE`` if set, else ``$XDG_CACHE_HOME/attncoda``, else
    ``~/.cache/attncoda``. The folder is not created here.

    Returns
    -------
    pathlib.Path
    """
    explicit = os.environ.get("ATTNCODA_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "attncoda"
    return Path.home() / ".cache" / "attncoda"


def sha256_file(path: Path) -> str:
    """Hex sha256 of the file at ``path``, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def load_gguf(
    path: Path, dtype: torch.dtype, notes: list[str], placement: dict[str, Any] | None = None
) -> tuple[Any, Any, bool, str]:
    """Return ``(model, tokenizer, from_cache, fingerprint)`` for a GGUF file.

    ``placement`` (``device_map``, ``max_memory``, ``offload_folder``) is passed to
    ``from_pretrained`` on the cached float32 folder: a placed model is always read from
    the cache, so its first load writes the cache and reads it back.
    """
    final = cache_dir() / "gguf" / _cache_key(path)
    return read_or_make(
        final,
        _read_cache_meta,
        lambda meta: _cached(final, meta, dtype, notes, placement),
        lambda: _dequantised(path, final, dtype, notes, placement),
    )


def _cached(
    final: Path,
    meta: dict[str, Any],
    dtype: torch.dtype,
    notes: list[str],
    placement: dict[str, Any] | None,
) -> tuple[Any, Any, bool, str]:
    """The warm half of :func:`load_gguf`: the model and tokenizer of the cache ``final``."""
    model = _from_cache(final, dtype, placement)
    tokenizer = None
    if meta["tokenizer"]:
        tokenizer = AutoTokenizer.from_pretrained(final)
    else:
        notes.append("no tokenizer: transformers could not read one from the GGUF file")
    return model, tokenizer, True, meta["fingerprint"]


def _dequantised(
    path: Path,
    final: Path,
    dtype: torch.dtype,
    notes: list[str],
    placement: dict[str, Any] | None,
) -> tuple[Any, Any, bool, str]:
    """The cold half of :func:`load_gguf`: dequantise ``path`` and write its cache ``final``
    (under :func:`~attncoda.models._folders.one_writer`)."""
    discard_superseded(final.parent)
    with _parsed_once():
        model, tokenizer = _dequantise(path)
    if tokenizer is None:
        notes.append("no tokenizer: transformers could not read one from the GGUF file")
    fingerprint = f"sha256:{sha256_file(path)}"
    try:
        _write_cache(final, model, tokenizer, path, fingerprint)
    except OSError as err:
        message = f"GGUF cache not written to {str(final)!r}: {err}"
        if placement:
            raise AttncodaError(
                f"{message}; a GGUF model is placed by a device map from that cache: make the "
                f"folder writable or set ATTNCODA_CACHE to one that is, or load without "
                f"device_map"
            ) from err
        warnings.warn(message, RuntimeWarning, stacklevel=6)
        notes.append("GGUF cache not written; the next load dequantises again")
        return _retype(model, dtype), tokenizer, False, fingerprint
    if dtype != torch.float32 or placement:
        # Read back what later loads will read, so the first load gives the same model.
        model = _from_cache(final, dtype, placement)
    return model, tokenizer, False, fingerprint


def gguf_cached(path: Path) -> bool:
    """Whether the GGUF file at ``path`` has a complete dequantised copy in the cache."""
    try:
        key = _cache_key(path)
    except OSError:
        return False
    return _read_cache_meta(cache_dir() / "gguf" / key) is not None


def _from_cache(folder: Path, dtype: torch.dtype, placement: dict[str, Any] | None = None) -> Any:
    try:
        return AutoModelForCausalLM.from_pretrained(
            folder, attn_implementation="eager", dtype=dtype, **(placement or {})
        )
    except (ValueError, KeyError, RuntimeError) as err:
        if not placement:
            raise
        raise AttncodaError(
            f"transformers {transformers.__version__} cannot load the cached GGUF model "
            f"{str(folder)!r}{placed_as(placement)}: {err}"
        ) from err


def placed_as(placement: dict[str, Any] | None) -> str:
    """`` with device_map=...`` (and its memory limits) for a message, or ``""``."""
    if not placement:
        return ""
    limits = placement.get("max_memory")
    return f" with device_map={placement['device_map']!r}" + (
        f" and max_memory={limits!r}" if limits else ""
    )


def _retype(model: Any, dtype: torch.dtype) -> Any:
    """``model`` in ``dtype`` as ``from_pretrained(..., dtype=dtype)`` would build it.

    ``Module.to(dtype)`` would also cast float32 buffers that transformers keeps in float32
    (the RoPE ``inv_freq``), and so change the logits.
    """
    if dtype == torch.float32:
        return model
    typed = AutoModelForCausalLM.from_config(model.config, attn_implementation="eager", dtype=dtype)
    typed.load_state_dict(model.state_dict())
    return typed


def _cache_key(path: Path) -> str:
    stat = path.stat()
    stamp = f"{path.name}|{stat.st_size}|{stat.st_mtime_ns}|{_CACHE_FORMAT}"
    return f"{path.stem}-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}"


@contextlib.contextmanager
def _parsed_once() -> Iterator[None]:
    """gguf-py's file reader and tensor-name map, each made once inside, the reader over a plain
    array. transformers parses a GGUF file's header three times (its config, its weights, its
    tokenizer: a vocabulary read entry by entry) and builds the tensor-name map once per
    module (397 times for SmolLM2); both are pure functions of their arguments. The reader
    slices the mapped file once or more per vocabulary entry, and numpy's ``memmap`` subclass
    runs Python code on every slice: a plain view of the same mapped bytes reads Gemma 3's
    header in 3 s, not 12. SmolLM2's first load took 24 s before both, 5.8 s after."""
    import gguf

    class PlainReader(gguf.GGUFReader):  # type: ignore[misc]
        @property
        def data(self) -> Any:
            return self._plain

        @data.setter
        def data(self, mapped: Any) -> None:  # the view keeps the mapping open
            self._plain = mapped.view(np.ndarray)

    saved = {name: getattr(gguf, name) for name in ("GGUFReader", "get_tensor_name_map")}
    made = {"GGUFReader": functools.lru_cache(maxsize=1)(PlainReader)}
    made["get_tensor_name_map"] = functools.lru_cache(maxsize=None)(saved["get_tensor_name_map"])
    for name, value in made.items():
        setattr(gguf, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(gguf, name, value)


def _dequantise(path: Path) -> tuple[Any, Any]:
    """Dequantise a GGUF file into a plain float32 model (and its tokenizer, or None)."""
    try:
        # Without an explicit dequantising GgufConfig, transformers 5.x looks for matmul
        # kernels on the Hub for the file's quantisation types; eager attention likewise
        # keeps it from asking for a kernel-backed implementation.
        quantised = AutoModelForCausalLM.from_pretrained(
            path.parent,
            gguf_file=path.name,
            attn_implementation="eager",
            dtype=torch.float32,
            quantization_config=GgufConfig(dequantize=True),
        )
    except (ValueError, KeyError, OSError, EOFError, IndexError, struct.error) as err:
        # gguf-py unpacks the header with struct: a truncated file is a struct.error
        text = str(err).strip()
        said = text.splitlines()[0].rstrip(".") if text else type(err).__name__
        raise AttncodaError(
            f"transformers {transformers.__version__} cannot load the GGUF file "
            f"{str(path)!r}: {said}; if the file is truncated or damaged, download it again "
            "(or check the path)"
        ) from err
    # save_pretrained refuses a model loaded through the GGUF quantiser: rebuild a plain
    # model of the same config and give it the dequantised weights. Its parameters are
    # made on the meta device and then *are* the dequantised tensors (assign=True), so the
    # weights are in memory once, not twice (Qwen2.5-1.5B: 7 GB, not 14); its buffers (the
    # RoPE frequencies) are computed as from_config computes them.
    config = copy.deepcopy(quantised.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", dtype=torch.float32
        )
    model.load_state_dict(quantised.state_dict(), assign=True)
    del quantised
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    left = [name for name, p in model.named_parameters() if p.is_meta]
    if left:
        raise AttncodaError(
            f"transformers {transformers.__version__} gave no weights for {left[:3]} when "
            f"dequantising the GGUF file {str(path)!r}"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (ValueError, KeyError, OSError):
        tokenizer = None
    return model, tokenizer


def _read_cache_meta(folder: Path) -> dict[str, Any] | None:
    """The cache metadata if ``folder`` is a complete cache folder, else None."""
    return folder_meta(folder, _CACHE_META, _CACHE_FORMAT)


def _write_cache(final: Path, model: Any, tokenizer: Any, gguf: Path, fingerprint: str) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    # Refused before a byte is written when the weights cannot fit (Qwen2.5-1.5B: 7.1 GB):
    # the caller warns and goes on with the model in memory.
    needed = sum(p.numel() * p.element_size() for p in model.parameters())
    free = shutil.disk_usage(final.parent).free
    if free < needed:
        raise OSError(
            errno.ENOSPC,
            f"the float32 weights need {needed / 1e9:.2f} GB and the disk has "
            f"{free / 1e9:.2f} GB free",
        )
    temp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{final.name}-", dir=final.parent))
    try:
        model.save_pretrained(temp)
        if tokenizer is not None:
            tokenizer.save_pretrained(temp)
        stat = gguf.stat()
        meta = {
            "format": _CACHE_FORMAT,
            "gguf_name": gguf.name,
            "gguf_path": str(gguf.resolve()),
            "gguf_size": stat.st_size,
            "gguf_mtime_ns": stat.st_mtime_ns,
            "fingerprint": fingerprint,
            "tokenizer": tokenizer is not None,
            "transformers_version": transformers.__version__,
            "files": {p.name: p.stat().st_size for p in sorted(temp.iterdir()) if p.is_file()},
        }
        (temp / _CACHE_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        publish_folder(temp, final, lambda folder: _read_cache_meta(folder) is not None)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def discard_superseded(parent: Path) -> None:
    """Remove the cache folders whose GGUF file is gone or changed since they were written.

    No load reads them again (the key of a changed file is another), so without this every
    reinstall of a model's wheel, or every fresh virtual environment, would leave its whole
    float32 copy behind (0.5 GB for SmolLM2, 6.7 GB for Qwen2.5-Coder). A complete folder
    that does not record its file (written before the path was recorded, when every
    environment made its own copy) goes too; an incomplete one, or one of another cache
    format, is left to its writer.
    """
    if not parent.is_dir():
        return
    for folder in parent.iterdir():
        if folder.name.startswith(TEMP_PREFIX):
            continue
        meta = _read_cache_meta(folder)
        if meta is None:
            continue
        try:
            stat = Path(meta["gguf_path"]).stat()
            current = (stat.st_size, stat.st_mtime_ns) == (meta["gguf_size"], meta["gguf_mtime_ns"])
        except (KeyError, OSError):
            current = False
        if not current:
            discard_folder(folder)
