"""attncoda's version: the one place it is written (the package metadata reads it too), at
the bottom layer, so that any module may state it without importing the top package."""

__version__ = "0.1.0"
