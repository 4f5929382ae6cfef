"""Experiments: pure functions over captured attention (DESIGN.md §3)."""
