"""The documents a recording keeps: opened by a pass that starts a sequence, grown by the
passes that continue its KV cache, folded in pass by pass, and assembled into one
:class:`Capture` (docs/design.md, "Recording the user's own passes").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attncoda._errors import AttncodaError
from attncoda.capture._result import BatchDocuments, Capture, assemble
from attncoda.capture.sinks import resolve_sinks
from attncoda.capture.stats import Recorder

__all__ = ["Documents"]


@dataclass
class Documents:
    """The documents one sequence-starting pass opened, grown by the passes that continue
    its cache. Positions are padded ``(batch, pos)`` coordinates of the whole sequence."""

    first_doc: int
    mask: torch.Tensor
    ids: torch.Tensor
    offsets: torch.Tensor
    sink_keys: torch.Tensor
    sinks: list[np.ndarray]
    n_prompt: np.ndarray
    stats: list[dict[str, list[torch.Tensor]]] = field(default_factory=list)
    rows: list[list[list[torch.Tensor]]] = field(default_factory=list)
    record: list[list[np.ndarray]] = field(default_factory=list)
    virtual: list[bool] = field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.mask.shape[1])

    @classmethod
    def start(cls, mask, ids, spec, tokenizer, first_doc: int) -> Documents:
        """The documents of a pass without cached positions: one per batch row of the 0/1
        ``mask`` and token ``ids`` ``(batch, pos)``, their sinks resolved from ``spec``."""
        real = mask.bool()
        docs = [ids[b][real[b]].numpy() for b in range(ids.shape[0])]
        sinks = resolve_sinks(spec, docs, tokenizer)
        offsets = real.long().argmax(-1)
        sink_keys = torch.zeros_like(real)
        for doc, (pos, off) in enumerate(zip(sinks, offsets.tolist(), strict=True)):
            sink_keys[doc, torch.as_tensor(pos, dtype=torch.long) + off] = True
        return cls(
            first_doc=first_doc,
            mask=mask,
            ids=ids,
            offsets=offsets,
            sink_keys=sink_keys,
            sinks=sinks,
            n_prompt=real.sum(-1).numpy().astype(np.int64),
            record=[[] for _ in docs],
        )

    def extend(self, mask, ids) -> None:
        """Append the new positions of a pass that continues the cache: its whole ``mask``
        ``(batch, past + q)`` and its new ``ids`` ``(batch, q)``."""
        past = self.length
        if not bool((mask[:, :past] == self.mask).all()):
            raise AttncodaError(
                "a recorded forward pass changes the attention_mask of its cached positions: "
                "keep the mask of the cached positions as it was"
            )
        self.mask = mask
        self.ids = torch.cat([self.ids, ids], dim=1)
        extra = torch.zeros((mask.shape[0], mask.shape[1] - past), dtype=torch.bool)
        self.sink_keys = torch.cat([self.sink_keys, extra], dim=1)

    def fold(self, rec: Recorder) -> None:
        """Keep the statistics, rows and recorded positions of one finished pass."""
        if self.stats and len(self.stats) != len(rec.stats):
            raise AttncodaError(
                f"a recorded forward pass ran {len(rec.stats)} attention layers where the "
                f"pass that started its sequence ran {len(self.stats)}: recording needs "
                f"every pass over all layers"
            )
        if not self.stats:
            self.stats = [{name: [] for name in rec.stats[0]} for _ in rec.stats]
            self.rows = [[[] for _ in rec.plan.record] for _ in rec.stats]
            self.virtual = list(rec.virtual)
        for layer, stats in enumerate(rec.stats):
            for name, value in stats.items():
                self.stats[layer][name].append(value)
            for doc, rows in enumerate(rec.rows[layer]):
                self.rows[layer][doc].append(rows)
        for doc, positions in enumerate(rec.plan.record):
            real = positions.numpy() + rec.plan.past - int(self.offsets[doc])
            self.record[doc].append(real.astype(np.int64))

    def capture(self, learned: bool, virtual: int, about: dict[str, Any]) -> Capture:
        """The :class:`Capture` of these documents: the passes' statistics joined along the
        query positions, each earlier pass's rows widened to the final keys; ``learned``
        appends the learned sink as the last key, ``about`` (with ``n_prompt`` added) is
        passed to :func:`assemble`."""
        real = self.mask.bool()
        docs = [self.ids[b][real[b]].numpy() for b in range(real.shape[0])]
        widths = [len(doc) for doc in docs]
        stats = [
            {name: torch.cat(parts, dim=2) for name, parts in layer.items()} for layer in self.stats
        ]
        rows = [
            [
                torch.cat([_widen(part, width, virtual) for part in parts], dim=1)
                for parts, width in zip(layer, widths, strict=True)
            ]
            for layer in self.rows
        ]
        record = [np.concatenate(parts) for parts in self.record]
        sinks = self.sinks
        if learned:
            sinks = [np.append(s, len(doc)) for s, doc in zip(sinks, docs, strict=True)]
        filled = _Filled(stats=stats, rows=rows, virtual=self.virtual)
        about = {**about, "n_prompt": self.n_prompt}
        return assemble(filled, BatchDocuments(docs, sinks, record, self.offsets), about)


@dataclass
class _Filled:
    """The per-layer statistics and rows of a group of documents, as :func:`assemble`
    reads them from a :class:`Recorder`."""

    stats: list[dict[str, torch.Tensor]]
    rows: list[list[torch.Tensor]]
    virtual: list[bool]


def _widen(rows: torch.Tensor, width: int, virtual: int) -> torch.Tensor:
    """Rows ``(head, r, w + virtual)`` of an earlier pass padded with ``-inf`` to the
    document's final ``width`` token columns (keys it could not see yet), the virtual key
    kept last."""
    tokens = rows.shape[-1] - virtual
    if tokens == width:
        return rows
    out = torch.full((*rows.shape[:-1], width + virtual), -math.inf)
    out[..., :tokens] = rows[..., :tokens]
    if virtual:
        out[..., -1] = rows[..., -1]
    return out
