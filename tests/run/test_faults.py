"""A run folder under faults: one writer at a time, stale locks, damaged partitions, a full
disk, SIGTERM and a corrupt manifest. Each run that resumes ends with the tables of an
uninterrupted run."""

from __future__ import annotations

import errno
import json
import os
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
from tiny_runs import TINY_SETTINGS, assert_same_tables, done_units


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


def test_a_full_disk_is_one_clear_error_and_the_rerun_resumes(
    tmp_path, models, uninterrupted, monkeypatch
):
    out = tmp_path / "full"
    calls = {"n": 0}
    fsync = os.fsync

    def full_after_some_writes(fd):
        calls["n"] += 1
        if calls["n"] > 12:
            raise OSError(errno.ENOSPC, "No space left on device")
        return fsync(fd)

    monkeypatch.setattr(files.os, "fsync", full_after_some_writes)
    with pytest.raises(AttncodaError) as info:
        reproduce(models, out, settings=TINY_SETTINGS, progress=False)
    message = str(info.value)
    assert message.startswith("unit ") and "no space left on the device for " in message
    assert message.endswith("free some space and rerun; nothing half-written was kept")
    assert not list(out.rglob("*.tmp")), "a temporary file was left behind"
    assert not (out / LOCK).exists()
    monkeypatch.setattr(files.os, "fsync", fsync)
    result = reproduce(models, out, settings=TINY_SETTINGS, progress=False)
    assert result.skipped >= 1
    assert_same_tables(out, uninterrupted)


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
