"""What ``attncoda profile`` prints: per model, what its rows read and per-layer means."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["layer_summary", "summary"]


def layer_summary(heads: pd.DataFrame) -> pd.DataFrame:
    """Per-layer means of the head table (for the printed summary)."""
    cols = ["sink_mass", "entropy", "content_entropy", "binary_term", "content_term"]
    return heads.groupby("layer", sort=True)[cols].mean().reset_index()


def _layers(layers: pd.DataFrame) -> list[str]:
    lines = [
        f"{'layer':>5}  {'sink mass':>9}  {'H(p)':>7}  {'H(q)':>7}  {'sink part':>9}  "
        f"{'content part':>12}   (nats; means over rows with content)"
    ]
    for row in layers.itertuples(index=False):
        lines.append(
            f"{row.layer:>5}  {row.sink_mass:>9.3f}  {row.entropy:>7.3f}  "
            f"{row.content_entropy:>7.3f}  {row.binary_term:>9.3f}  {row.content_term:>12.3f}"
        )
    return lines


def summary(
    tables: Mapping[str, pd.DataFrame],
    facts: Callable[[str, str], Mapping[str, Any]],
    sink: str,
) -> str:
    """Per model: the windows (or documents of given attention) read, then the per-layer
    means of sink mass, H(p), H(q) and the exact split's two parts (nats)."""
    lines = []
    heads = tables["profile_heads"]
    for (model, revision), part in heads.groupby(["model", "revision"], sort=False):
        read = facts(model, revision).get("read", {})
        if "documents" in read:
            given = read["documents"]
            lines.append(f"{model}: {given} documents of given attention, sink = {sink}")
        else:
            n = read.get("windows", "?")
            windows = f"{n} window{'s' if n != 1 else ''}"
            lines.append(
                f"{model}: {windows} of up to {read.get('max_tokens', '?')} tokens, sink = {sink}"
            )
        lines += _layers(layer_summary(part))
    return "\n".join(lines)
