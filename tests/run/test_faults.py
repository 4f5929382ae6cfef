"""A run folder under faults: one writer at a time, stale locks, damaged partitions, a full
disk or one that fills during a unit, a unit raising half-way, a pool worker killed mid-unit,
SIGTERM and a corrupt manifest. The other units finish, nothing half-written survives, and
each run that resumes ends with the tables of an uninterrupted run."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attncoda import AttncodaError
from attncoda.cli import main
from attncoda.run.config import run_config
from attncoda.run.plan import plan
from attncoda.run.reproduce import reproduce
from attncoda.store import files
from attncoda.store.lock import LOCK
from attncoda.store.runs import read_run_tables, slug
from tiny_runs import TINY_SETTINGS, assert_same_tables, done_units, run_tables


def _script(models, out: Path) -> str:
    return (
        "import sys\n"
        "from attncoda.run.reproduce import reproduce\n"
        "try:\n"
        f"    reproduce({models!r}, {str(out)!r}, settings={TINY_SETTINGS!r}, progress=False)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )


def _start(models, out: Path, until_done: int) -> subprocess.Popen:
    """A reproduce run in another process, returned once ``until_done`` units finished."""
    proc = subprocess.Popen([sys.executable, "-c", _script(models, out)])
    deadline = time.monotonic() + 180
    while done_units(out) < until_done and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before the test could interrupt it"
    return proc


def test_a_second_writer_is_refused_and_a_stale_lock_is_taken_over(
    tmp_path, models, uninterrupted, capsys
):
    out = tmp_path / "locked"
    proc = _start(models, out, until_done=2)
    try:
        holder = json.loads((out / LOCK).read_text())
        assert holder["pid"] == proc.pid and holder["host"] == socket.gethostname()
        with pytest.raises(AttncodaError) as info:
            reproduce(models, out, settings=TINY_SETTINGS, progress=False)
        assert str(info.value) == (
            f"{str(out)!r} is being written by pid {proc.pid} on {holder['host']} "
            f"(reproduce, since {holder['started']}): wait for it to finish, or give "
            f"another --out"
        )
    finally:
        proc.kill()  # SIGKILL: the lock stays behind, its pid gone
        proc.wait()
    assert (out / LOCK).is_file()
    result = reproduce(models, out, settings=TINY_SETTINGS, progress=False)
    assert f"took over the lock of {str(out)!r} from pid {proc.pid}" in capsys.readouterr().err
    assert result.skipped >= 2
    assert not (out / LOCK).exists()
    assert_same_tables(out, uninterrupted)


def test_report_reads_a_folder_that_is_being_written(tmp_path, uninterrupted):
    out = tmp_path / "copy"
    shutil.copytree(uninterrupted, out)
    record = {"pid": os.getpid(), "host": socket.gethostname(), "command": "reproduce"}
    (out / LOCK).write_text(json.dumps(record))
    (out / "report.html").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").is_file()
    with pytest.raises(AttncodaError, match=f"is being written by pid {os.getpid()}"):
        reproduce(
            [str(p) for p in json.loads((out / "manifest.json").read_text())["config"]["models"]],
            out,
            settings=TINY_SETTINGS,
            progress=False,
        )


def test_a_truncated_partition_is_detected_and_redone(tmp_path, models, uninterrupted, capsys):
    out = tmp_path / "damaged"
    shutil.copytree(uninterrupted, out)
    (out / LOCK).unlink(missing_ok=True)
    partition = next((out / "units" / "flips").glob("*/flips.parquet"))
    data = partition.read_bytes()
    partition.write_bytes(data[: len(data) // 2])
    result = reproduce(models, out, settings=TINY_SETTINGS, progress=True)
    assert result.ran == 1
    err = capsys.readouterr().err
    assert (
        f"its files do not match _done.json (flips.parquet has {len(data) // 2} bytes, "
        f"{len(data)} were written), redone"
    ) in err
    assert_same_tables(out, uninterrupted)


def _unfinished(out: Path) -> list[Path]:
    return [d for d in (out / "units").glob("*/*") if not (d / "_done.json").is_file()]


#: A smaller run than the uninterrupted one: its tables are those of the uninterrupted run
#: (the same settings, the same ops in this process), the units table aside.
SMALL = dict(experiments=["profile", "flips", "safety"], settings=TINY_SETTINGS, progress=False)


def _same_tables_as_uninterrupted(out: Path, uninterrupted: Path, tables: int = 6) -> None:
    """``out``'s ``tables`` tables (the units table among them) are the uninterrupted run's,
    bit for bit: the same settings and the same ops in this process."""
    import pandas as pd

    mine, whole = run_tables(out), run_tables(uninterrupted)
    assert len(mine) == tables
    for name in sorted(set(mine) - {"units.parquet"}):
        pd.testing.assert_frame_equal(mine[name], whole[name], check_exact=True, obj=name)


def test_a_full_disk_is_one_clear_error_and_the_rerun_resumes(
    tmp_path, models, uninterrupted, monkeypatch
):
    out = tmp_path / "full"
    run = {**SMALL, "experiments": ["profile", "flips"]}
    calls = {"n": 0}
    fsync = os.fsync

    def full_after_some_writes(fd):
        calls["n"] += 1
        if calls["n"] > 6:  # the manifest, then the first unit's files
            raise OSError(errno.ENOSPC, "No space left on device")
        return fsync(fd)

    monkeypatch.setattr(files.os, "fsync", full_after_some_writes)
    # Each unit after the disk filled fails with the full disk's message; the run's tables
    # cannot be written either, and that ends the run with the same one clear error.
    with pytest.raises(AttncodaError) as info:
        reproduce(models, out, **run)
    message = str(info.value)
    assert message.startswith(f"no space left on the device for '{out / 'tables'}/")
    assert message.endswith("free some space and rerun; nothing half-written was kept")
    assert not list(out.rglob("*.tmp")), "a temporary file was left behind"
    assert _unfinished(out) == [], "a unit's partial partition was left behind"
    assert not (out / LOCK).exists()
    finished = done_units(out)
    assert finished >= 1
    monkeypatch.setattr(files.os, "fsync", fsync)
    result = reproduce(models, out, **run)
    assert (result.skipped, result.ran, result.failed) == (finished, 4 - finished, {})
    assert set(read_run_tables(out)["flips"]["model"]) == set(models)
    # profile_heads, flips, flips_by_layer and units: those of the uninterrupted run
    _same_tables_as_uninterrupted(out, uninterrupted, tables=4)


def test_a_disk_that_fills_during_one_unit_fails_it_alone(
    tmp_path, models, uninterrupted, monkeypatch
):
    out = tmp_path / "filled"
    fsync = os.fsync
    flips = f"/units/flips/{slug(models[0])}@-/"  # the flips partition of the first model

    def full_for_flips(fd):
        if flips in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return fsync(fd)

    monkeypatch.setattr(files.os, "fsync", full_for_flips)
    result = reproduce(models, out, **SMALL)
    key = f"flips/{models[0]}@-"
    folder = out / "units" / "flips" / f"{slug(models[0])}@-"
    assert re.fullmatch(
        re.escape(f"AttncodaError: no space left on the device for {str(folder)!r}"[:-1])
        + r"/arrays\.npz' \(\d+ bytes\): free some space and rerun; nothing half-written "
        "was kept",
        result.failed[key],
    )
    # safety reads its tables: it fails naming it; every other unit finished
    assert set(result.failed) == {key, f"safety/{models[0]}@-"}
    assert result.failed[f"safety/{models[0]}@-"].startswith(f"AttncodaError: unit {key} failed")
    assert result.ran == 4
    assert not list(out.rglob("*.tmp")) and _unfinished(out) == []
    monkeypatch.setattr(files.os, "fsync", fsync)
    again = reproduce(models, out, **SMALL)
    assert (again.ran, again.failed) == (2, {})
    _same_tables_as_uninterrupted(out, uninterrupted)


def test_a_unit_raising_half_way_leaves_nothing_and_the_rerun_redoes_it(
    tmp_path, models, uninterrupted, monkeypatch
):
    from attncoda.store.files import write_table
    from attncoda.store.runs import RunStore

    out = tmp_path / "half"
    finish = RunStore.finish

    def half_way(self, unit, tables, facts=None):
        if unit.experiment == "profile" and unit.model == models[1]:
            name, frame = next(iter(tables.items()))
            write_table(frame, self.unit_dir(unit) / f"{name}.parquet")  # one table of two
            raise RuntimeError("the unit broke half-way")
        return finish(self, unit, tables, facts)

    monkeypatch.setattr(RunStore, "finish", half_way)
    result = reproduce(models, out, **SMALL)
    key = f"profile/{models[1]}@-"
    assert result.failed == {key: "RuntimeError: the unit broke half-way"}
    assert result.ran == 5
    assert _unfinished(out) == []
    assert not (out / "units" / "profile" / f"{slug(models[1])}@-").exists()
    units = read_run_tables(out)["units"].set_index(["experiment", "model"])
    assert units.loc[("profile", models[1]), "status"] == "failed"
    assert units.loc[("profile", models[1]), "note"] == "RuntimeError: the unit broke half-way"
    monkeypatch.setattr(RunStore, "finish", finish)
    again = reproduce(models, out, **SMALL)
    assert (again.ran, again.failed) == (1, {})
    _same_tables_as_uninterrupted(out, uninterrupted)


def _killer(models, out: Path, marker: Path) -> str:
    """A script that runs profile, flips and safety on two pool workers, the first worker to
    reach the end of a flips unit killing itself there (once: ``marker`` remembers it)."""
    return f"""
import json, os, signal
from pathlib import Path

if __name__ == "__mp_main__":  # a pool worker: spawn imports this script under that name
    from attncoda.run import execute

    remember = execute.remember

    def killed_mid_unit(unit, *args):
        marker = Path({str(marker)!r})
        if unit.experiment == "flips" and not marker.exists():
            marker.write_text(unit.key)  # its arrays are written, its tables not yet
            os.kill(os.getpid(), signal.SIGKILL)
        return remember(unit, *args)

    execute.remember = killed_mid_unit

if __name__ == "__main__":
    from attncoda.run.reproduce import reproduce

    result = reproduce(
        {models!r}, {str(out)!r}, experiments=["profile", "flips", "safety"],
        settings={TINY_SETTINGS!r}, progress=False, workers=2,
    )
    print(json.dumps({{"ran": result.ran, "failed": result.failed}}))
"""


def test_a_worker_killed_mid_unit_fails_that_unit_and_the_pool_goes_on(tmp_path, models):
    out, marker = tmp_path / "killed", tmp_path / "killed-once"
    script = tmp_path / "killer.py"
    script.write_text(_killer(models, out, marker))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    reported = json.loads(done.stdout.strip().splitlines()[-1])
    killed = marker.read_text()
    model = killed.split("/", 1)[1].rsplit("@", 1)[0]
    assert reported["failed"] == {
        killed: "AttncodaError: the worker process running it died (killed by SIGKILL): rerun "
        "the same command to run it again, with fewer --workers if memory ran out",
        f"safety/{model}@-": (
            f"AttncodaError: unit {killed} failed, so its tables are missing (AttncodaError: "
            "the worker process running it died (killed by SIGKILL): rerun the same command "
            "to run it again, with fewer --workers if memory ran out)"
        ),
    }
    assert reported["ran"] == 4
    assert _unfinished(out) == [], "the killed unit's partial partition was left behind"
    units = read_run_tables(out)["units"]
    assert sorted(units["status"]) == ["done"] * 4 + ["failed"] * 2
    again = reproduce(models, out, **SMALL)
    assert (again.ran, again.skipped, again.failed) == (2, 4, {})
    assert set(read_run_tables(out)["safety"]["model"]) == set(models)


def test_sigterm_ends_the_run_between_units_and_the_rerun_resumes(tmp_path, models, uninterrupted):
    out = tmp_path / "terminated"
    total = len(plan(run_config(models, settings=TINY_SETTINGS)).units)
    proc = _start(models, out, until_done=3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130
    finished = done_units(out)
    assert 3 <= finished < total
    partial = [d for d in (out / "units").glob("*/*") if not (d / "_done.json").is_file()]
    assert partial == [], "the interrupted unit's folder was left behind"
    assert not (out / LOCK).exists()
    result = reproduce(models, out, settings=TINY_SETTINGS, progress=False)
    assert result.skipped == finished and result.ran == total - finished
    assert_same_tables(out, uninterrupted)


def test_a_corrupt_manifest_is_named(tmp_path, models):
    out = tmp_path / "corrupt"
    out.mkdir()
    (out / "manifest.json").write_text('{"command": "reproduce", "config": ')
    with pytest.raises(AttncodaError) as info:
        reproduce(models, out, settings=TINY_SETTINGS, progress=False)
    assert str(info.value).startswith(
        f"the run manifest {str(out / 'manifest.json')!r} is corrupt ("
    )
    assert str(info.value).endswith("): move the folder aside, or give another --out")
