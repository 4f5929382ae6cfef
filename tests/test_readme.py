"""The README's Python example of the experiments runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[1] / "README.md"


def _api_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    (block,) = [b for b in blocks if 'ac.flips("minilm"' in b]
    return block


def test_the_api_example_of_the_readme_runs(tmp_path):
    code = (
        "import attncoda as ac\n"
        + _api_example()
        + "\nassert set(r.tables) == {'flips', 'flips_by_layer'}\n"
        + "assert len(r.tables['flips']) == 5 and r.path is None\n"
        + "from pathlib import Path\n"
        + "assert (Path('runs/smollm2') / 'tables' / 'profile_heads.parquet').is_file()\n"
        + "print('OK')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("OK")
