"""``attncoda <command>``: parse, call, print. No logic lives here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from attncoda._errors import AttncodaError


def _demo(args: argparse.Namespace) -> int:
    from attncoda.report.worked_example import worked_example

    print(worked_example())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``attncoda`` command."""
    parser = argparse.ArgumentParser(
        prog="attncoda",
        description="Attention rows as compositional data: exact sink/content splits.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="print the worked example of keep vs drop vs Aitchison")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``attncoda`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except AttncodaError as exc:
        print(f"attncoda: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
