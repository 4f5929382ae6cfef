"""``attncoda <command>``: parse, call, print. No logic lives here.

Each experiment command's options are built from the experiment's ``Settings``
(:func:`attncoda.cli._args.add_settings`); the bodies of the commands are in
:mod:`attncoda.cli._commands`.

Modules: ``_parser`` (the subcommands, :func:`build_parser` and :func:`main`), ``_args``
(options from settings fields, and the checks of every value before anything runs),
``_commands`` (each command's body: call the runner, print). The package is the top floor:
it may import every layer (api, report, run, experiments, capture, models, store, data,
coda), and nothing imports it.
"""

from __future__ import annotations

from attncoda.cli._parser import build_parser, main

__all__ = ["build_parser", "main"]
