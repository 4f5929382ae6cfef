"""Progress inside long work: lines every few seconds when stderr is no terminal, a bar on a
terminal, nothing unless asked for (attncoda._progress), and lines from inside the units of
a run that shows progress."""

from __future__ import annotations

import io
import sys

import pytest

from attncoda import _progress
from attncoda._progress import Meter, shown, steps


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_say_how_far_the_work_has_got_and_end_with_done(monkeypatch, capsys):
    monkeypatch.setattr(_progress, "EVERY", 0.0)
    assert list(steps("abc", desc="capture", unit="batch", force=True)) == ["a", "b", "c"]
    assert capsys.readouterr().err.splitlines() == [
        "capture: 1/3 batch (0 s)",
        "capture: 2/3 batch (0 s)",
        "capture: 3/3 batch, done (0 s)",
    ]


def test_short_work_writes_no_line_and_nothing_shows_unless_asked_for(monkeypatch, capsys):
    list(steps(range(5), desc="quick", unit="step", force=True))  # under 10 s
    monkeypatch.setattr(_progress, "EVERY", 0.0)
    list(steps(range(5), desc="hidden", unit="step"))  # not asked for
    with shown():
        with shown(False):
            list(steps(range(2), desc="off", unit="step"))
    assert capsys.readouterr().err == ""
    with shown():
        list(steps(range(2), desc="on", unit="step"))
    assert capsys.readouterr().err.splitlines()[-1] == "on: 2/2 step, done (0 s)"


def test_a_terminal_gets_a_bar_and_a_meter_reports_a_running_figure(monkeypatch):
    bar = Terminal()
    monkeypatch.setattr(sys, "stderr", bar)
    list(steps(range(3), desc="train-tiny", unit="step", force=True))
    assert "train-tiny:" in bar.getvalue() and "/3 [" in bar.getvalue()  # tqdm's bar
    out = io.StringIO()
    with Meter(desc="train-tiny", unit="step", total=4, every=0, stream=out) as meter:
        meter.update(2, "loss 1.250")
        meter.update(4, "loss 0.500")
    assert out.getvalue().splitlines() == [
        "train-tiny: 2/4 step (0 s, loss 1.250)",
        "train-tiny: 4/4 step, done (0 s, loss 0.500)",
    ]


def test_a_run_that_shows_progress_shows_it_inside_its_units(
    tiny_models, tmp_path, capsys, monkeypatch
):
    from attncoda.run.reproduce import run_experiment

    monkeypatch.setattr(_progress, "EVERY", 0.0)
    out = tmp_path / "run"
    settings = {"profile": {"docs": 2, "max_tokens": 16}}
    run_experiment("profile", tiny_models[:1], out, settings=settings, progress=True)
    assert "capture 2 windows: 1/1 batch, done" in capsys.readouterr().err
    run_experiment(
        "profile", tiny_models[1:], tmp_path / "quiet", settings=settings, progress=False
    )
    assert "capture" not in capsys.readouterr().err


@pytest.mark.parametrize("every", [0.0])
def test_the_flip_count_reports_its_blocks_inside_a_shown_block(every, monkeypatch, capsys):
    import numpy as np

    from attncoda.experiments.flips._count import count_rows

    monkeypatch.setattr(_progress, "EVERY", every)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 6)), rng.normal(size=(4, 6))
    with shown():
        count_rows(x, y, np.zeros(4), np.zeros(4))
    assert "flips: 4 pairs: 1/1 block, done" in capsys.readouterr().err


def test_what_a_process_does_between_steps_runs_after_every_step_shown_or_not(monkeypatch):
    # The pool's workers follow their share of the cores there, shown progress or not.
    calls = []
    monkeypatch.setattr(_progress, "_BETWEEN", [])
    _progress.between_steps(lambda: calls.append(len(calls)))
    assert list(steps(range(3), desc="quiet", unit="step", force=False)) == [0, 1, 2]
    assert len(calls) == 3
    assert list(steps(range(2), desc="shown", unit="step", force=True)) == [0, 1]
    assert len(calls) == 5
    meter = Meter(desc="train", unit="step", total=4, enabled=False)
    meter.update(1)
    assert len(calls) == 6
