"""The machine a benchmark ran on, in one line (every bench script names it beside its
figures)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["machine"]


def machine() -> str:
    """The machine in one line: CPU model (with its family and model numbers, which tell an
    Intel Xeon's or AMD EPYC's generation), cores, memory, OS, and the load when measured."""
    from attncoda.store.manifest import cpu_model

    model = cpu_model()
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 2**20:.1f} GiB memory"
    except (OSError, ValueError, IndexError):
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    return f"{model}, {os.cpu_count()} cores{memory}, {platform.platform()}{load}"
