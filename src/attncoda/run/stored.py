"""What a finished unit keeps in its partition for the units and the finish that read it
back: its :class:`~attncoda.experiments.contract.Tables` (:func:`read_unit`) and its
arrays, kept beside its tables (:func:`write_arrays`, :data:`ARRAYS`)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attncoda.experiments.contract import Tables
from attncoda.store.runs import RunStore, Unit

__all__ = ["ARRAYS", "read_unit", "write_arrays"]

#: Where a unit's :attr:`Tables.arrays` are kept, beside its tables (one ``.npz``).
ARRAYS = "arrays.npz"


def read_unit(store: RunStore, unit: Unit) -> Tables:
    """The :class:`Tables` a finished unit stored: its partitions (with the run's key
    columns), the summary in its facts and its arrays."""
    import numpy as np

    from attncoda.store import read_json
    from attncoda.store.runs import DONE

    done = read_json(store.unit_dir(unit) / DONE)
    frames = {name: store.partition(unit, name) for name in done.get("tables", [])}
    path = store.unit_dir(unit) / ARRAYS
    arrays: dict[str, Any] = {}
    if path.is_file():
        with np.load(io.BytesIO(path.read_bytes())) as data:
            arrays = {key: data[key] for key in data.files}
    return Tables(frames=frames, summary=done.get("facts", {}).get("summary", {}), arrays=arrays)


def write_arrays(arrays: Mapping[str, Any], folder: Path) -> None:
    """Keep ``arrays`` in ``folder`` (one ``.npz``, written atomically)."""
    import numpy as np

    from attncoda.store import atomic_write_bytes

    buffer = io.BytesIO()
    np.savez(buffer, **dict(arrays))
    atomic_write_bytes(folder / ARRAYS, buffer.getvalue())
