"""Attention handed in instead of a model, read from a file or given as a capture: its
:class:`Captured` and manifest facts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.run.captured import Captured

__all__ = ["GivenInfo", "capture_file", "handed_in"]


@dataclass(frozen=True)
class GivenInfo:
    """What a manifest records of attention read from a file instead of a model."""

    spec: str
    path: str
    fingerprint: str
    kind: str
    n_layers: int
    n_heads: int
    causal: bool
    source: str = "attentions file"
    architecture: str = "given attention"
    family: str = "given attention"
    capture_mode: str = "given"

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), "n_kv_heads": self.n_heads, "prepends_bos": None}


def capture_file(
    path: str,
    *,
    tokens: str | None = None,
    kind: str | None = None,
    sink: str = "first",
    record_rows: Any = "auto",
    seed: int = 0,
) -> Captured:
    """The :class:`Captured` of attention saved in ``path`` (``.npz``, ``.pt`` or
    ``.safetensors``; see :func:`attncoda.capture.given.read_attentions`), with token ids
    from the file or from ``tokens`` (a file of one array)."""
    from attncoda.capture.given import from_attentions, read_attentions

    found = read_attentions(path)
    ids = found["tokens"] if tokens is None else _read_ids(tokens)
    chosen = kind or found["kind"] or "probs"
    cap = from_attentions(
        found["attn"],
        kind=chosen,
        sink=sink,
        tokens=ids,
        attention_mask=found["attention_mask"],
        record_rows=record_rows,
        seed=seed,
    )
    name = Path(path).name
    info = GivenInfo(
        spec=name,
        path=str(Path(path).resolve()),
        fingerprint="sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest(),
        kind=chosen,
        n_layers=cap.n_layers,
        n_heads=cap.n_heads,
        causal=cap.causal,
    )
    config = {
        "model": name,
        "attentions": info.path,
        "kind": chosen,
        "sink": sink,
        "record_rows": record_rows,
        "seed": seed,
    }
    return Captured(spec=name, info=info, capture=cap, config=config)


def handed_in(cap: Any, label: str) -> Captured:
    """The :class:`Captured` of a capture handed to an experiment function, labelled
    ``label``: what the runner reads when it is lent (:func:`attncoda.run.loaded.lend`)."""
    info = GivenInfo(
        spec=label,
        path="",
        fingerprint="",
        kind="capture",
        n_layers=cap.n_layers,
        n_heads=cap.n_heads,
        causal=cap.causal,
        source="capture",
    )
    config = {"model": label, "attentions": "capture", "sink": cap.sink_spec}
    return Captured(spec=label, info=info, capture=cap, config=config)


def _read_ids(path: str) -> Any:
    """Token ids ``(batch, pos)`` from a ``.npy``, ``.npz`` (``input_ids`` or its only
    array) or ``.pt`` file."""
    file = Path(path)
    if not file.is_file():
        raise AttncodaError(f"token file {path!r} does not exist")
    try:
        if file.suffix == ".npy":
            return np.load(file, allow_pickle=False)
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as data:
                key = "input_ids" if "input_ids" in data.files else data.files[0]
                return data[key]
        if file.suffix == ".pt":
            import torch

            return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # the readers raise many types for a damaged file
        raise AttncodaError(
            f"token file {path!r} could not be read ({type(err).__name__}: {err})"
        ) from None
    raise AttncodaError(f"token file {path!r} is not .npy, .npz or .pt: save the ids with numpy")
