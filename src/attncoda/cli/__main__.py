"""``python -m attncoda.cli``: the ``attncoda`` console script."""

from attncoda.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
