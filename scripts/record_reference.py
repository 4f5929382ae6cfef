"""Record one ``make demo`` run as the reference run the README and the site quote.

``python scripts/record_reference.py`` runs ``make demo`` into a fresh run folder under
``/usr/bin/time``, then copies its ``manifest.json`` and its ``tables/`` (those under
:data:`MAX_TABLE_BYTES`) into ``src/attncoda/run/reference/`` (it ships with the package:
``attncoda compare`` checks a run against it), adding to the manifest the command's wall
time (``wall_seconds``), its peak memory (``peak_rss_mib``), each unit's seconds
(``units``) and the tables left out (``left_out``); then it rewrites the README's headline
table from them (``docs/hooks/results.py``).
``--from DIR --wall-seconds S`` records a run made otherwise.

A release tool: the reference changes only when the demo's results are meant to change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "src" / "attncoda" / "run" / "reference"


def _demo(out: Path) -> tuple[float, float | None]:
    """Run ``make demo`` into ``out``; its wall seconds and peak memory (MiB)."""
    log = out.parent / "time.txt"
    command = ["/usr/bin/time", "-v", "-o", str(log), "make", "demo", f"DEMO_OUT={out}"]
    subprocess.run(command, cwd=ROOT, check=True)
    text = log.read_text()
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text)
    assert wall is not None, text
    hours, minutes, seconds = (float(g or 0) for g in wall.groups())
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    return hours * 3600 + minutes * 60 + seconds, peak and int(peak.group(1)) / 1024


#: A table larger than this is left out of the reference (the site quotes none of them):
#: one row per pair of heads (cluster_distances, 1.8 MB for the demo's models) would
#: multiply the size of the committed reference.
MAX_TABLE_BYTES = 500_000


def record(run: Path, wall_seconds: float, peak_mib: float | None) -> None:
    """Copy the run folder ``run``'s manifest and tables into the reference folder."""
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    units = {}
    for done in sorted((run / "units").glob("*/*/_done.json")):
        facts = json.loads(done.read_text(encoding="utf-8")).get("facts", {})
        units[f"{done.parent.parent.name}/{done.parent.name}"] = facts.get("seconds")
    tables = sorted((run / "tables").glob("*.parquet"))
    left_out = [t for t in tables if t.stat().st_size > MAX_TABLE_BYTES]
    manifest.update(
        wall_seconds=round(wall_seconds, 1),
        peak_rss_mib=peak_mib and round(peak_mib),
        units=units,
        recorded_from="make demo",
        left_out=[t.stem for t in left_out],
    )
    if REFERENCE.exists():
        shutil.rmtree(REFERENCE)
    (REFERENCE / "tables").mkdir(parents=True)
    for table in tables:
        if table in left_out:
            print(f"not recorded: {table.name} ({table.stat().st_size:,} bytes)")
            continue
        shutil.copy2(table, REFERENCE / "tables" / table.name)
    (REFERENCE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    import results

    _measured(results)

    readme = ROOT / "README.md"
    readme.write_text(results.readme_with_headline(readme.read_text(encoding="utf-8")))


def _measured(results: object) -> None:
    """Write what the shipped checkpoints gave in this run into their manifest, the figures a
    retrain is set beside (:func:`attncoda.run.train.retrain_table`)."""
    sys.path.insert(0, str(ROOT / "src"))
    from attncoda.models.shipped import ASSETS, MANIFEST, UNSEEN

    path = ASSETS / MANIFEST
    shipped = json.loads(path.read_text(encoding="utf-8"))
    predictor = results.table("predictor").set_index("model")  # type: ignore[attr-defined]
    shipped["measured"] = {
        "by": "src/attncoda/run/reference (make demo)",
        "collapse_sink_share": results.value("collapse.sink_share"),  # type: ignore[attr-defined]
        "flip_rate": {name: float(predictor.loc[name, "measured"]) for name in UNSEEN},
    }
    path.write_text(json.dumps(shipped, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="run", type=Path, help="a finished demo run folder")
    parser.add_argument("--wall-seconds", type=float, help="its wall time, with --from")
    parser.add_argument("--peak-mib", type=float, help="its peak memory, with --from")
    args = parser.parse_args(argv)
    if args.run is None:
        out = Path(tempfile.mkdtemp(prefix="attncoda-reference-")) / "demo"
        wall, peak = _demo(out)
        record(out, wall, peak)
    else:
        record(args.run, args.wall_seconds, args.peak_mib)
    size = sum(p.stat().st_size for p in REFERENCE.rglob("*") if p.is_file())
    print(f"recorded into {REFERENCE.relative_to(ROOT)} ({size / 1e6:.2f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
