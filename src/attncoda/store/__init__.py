"""Results on disk: tidy Parquet tables and a JSON run manifest, written atomically."""

from attncoda.store.files import (
    atomic_write_bytes,
    atomic_write_json,
    read_json,
    read_table,
    write_table,
)
from attncoda.store.manifest import cpu_model, package_versions, run_manifest, write_manifest

__all__ = [
    "atomic_write_bytes",
    "atomic_write_json",
    "cpu_model",
    "package_versions",
    "read_json",
    "read_table",
    "run_manifest",
    "write_manifest",
    "write_table",
]
