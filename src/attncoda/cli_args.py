"""Every command-line argument checked after parsing and before anything is loaded.

:func:`validate` reads the parsed arguments by name, so each check is written once for every
command that has the option: integers and their ranges, sink specs, metric, experiment,
prune channel, order and ablation names, corpus files that exist and hold text, predictor
files that parse, saved-attention files that exist. It imports neither torch nor
transformers, so a bad call is refused in well under a second.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.capture.names import ATTENTION_FILES

#: The smallest value of each integer option (by its argparse destination).
AT_LEAST = {
    "max_tokens": 1,
    "docs": 1,
    "batch_size": 1,
    "n_boot": 1,
    "clusters": 2,
    "bins": 1,
    "profile_docs": 1,
    "eval_docs": 1,
    "rows_docs": 1,
    "train_steps": 1,
    "steps": 1,
    "window": 2,
    "threads": 1,
    "retries": 0,
    "ray_local": 1,
    "seed": 0,
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _integers(args: argparse.Namespace) -> None:
    for name, least in AT_LEAST.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise AttncodaError(
                f"{_flag(name)} must be an integer of at least {least}; got {value!r}"
            )
    lr = getattr(args, "lr", None)
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        raise AttncodaError(f"--lr must be a finite number above 0; got {lr!r}")
    ks = getattr(args, "k", None)
    if ks is not None:
        if not ks:
            raise AttncodaError("--k is empty: give a comma list of head counts, e.g. 1,2,4")
        for k in ks:
            if k < 1:
                raise AttncodaError(f"--k holds {k}: every head count must be at least 1")


def _names(args: argparse.Namespace, name: str, allowed: tuple[str, ...], what: str) -> None:
    given = getattr(args, name, None)
    if given is None:
        return
    if not given:
        raise AttncodaError(f"{_flag(name)} is empty: give a comma list of {', '.join(allowed)}")
    unknown = [g for g in given if g not in allowed]
    if unknown:
        raise AttncodaError(
            f"unknown {what} {', '.join(repr(u) for u in unknown)} in {_flag(name)}: use a "
            f"comma list of {', '.join(allowed)}"
        )


def _files(args: argparse.Namespace) -> None:
    text = getattr(args, "text", None)
    if text is not None:
        from attncoda.data.corpus import read_corpus

        read_corpus(text)  # exists, UTF-8, at least one document, or a named error
    predictor = getattr(args, "predictor", None)
    if predictor is not None and predictor != "shipped":
        if not Path(predictor).is_file():
            raise AttncodaError(
                f"predictor file {predictor!r} does not exist: give a file written by "
                f"'attncoda predictor fit', or 'shipped'"
            )
        from attncoda.experiments.predictor import Predictor

        Predictor.from_json(predictor)
    for name in ("attentions", "tokens"):
        value = getattr(args, name, None)
        files = [value] if isinstance(value, str) else list(value or [])
        for file in files:
            if not Path(file).is_file():
                kind = "attention" if name == "attentions" else "token"
                raise AttncodaError(f"{kind} file {file!r} does not exist")
            if name == "attentions" and Path(file).suffix not in ATTENTION_FILES:
                raise AttncodaError(
                    f"attention file {file!r} is not one of {', '.join(ATTENTION_FILES)}: save "
                    f"the array with numpy.savez, torch.save or safetensors"
                )


def validate(args: argparse.Namespace) -> None:
    """Check every parsed argument ``args`` has; raise the first problem.

    Raises
    ------
    AttncodaError
        With a message that names the option and its value and says what to give instead.
    """
    from attncoda.capture.sinks import parse_sink
    from attncoda.experiments.prune import ABLATIONS, CHANNELS, ORDERS
    from attncoda.run.units import EXPERIMENTS

    _integers(args)
    if getattr(args, "sink", None) is not None:
        parse_sink(args.sink)
    models = getattr(args, "models", None)
    if isinstance(models, tuple) and not models:
        raise AttncodaError("--models is empty: give a comma list of models, e.g. smollm2,minilm")
    _names(args, "experiments", EXPERIMENTS, "experiment")
    _names(args, "channels", CHANNELS, "channel")
    _names(args, "order", ORDERS, "order")
    _names(args, "ablation", ABLATIONS, "ablation")
    _files(args)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``attncoda: error: ...``, exit 2."""

    def error(self, message: str) -> Any:  # argparse's hook; it must not return
        self.exit(2, f"attncoda: error: {message}\n")


__all__ = ["AT_LEAST", "Parser", "validate"]
