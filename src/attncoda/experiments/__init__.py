"""Experiments: pure functions over captured attention (docs/design.md, "The experiments")."""
