"""What a report section reads (:class:`attncoda.experiments.view.Context`): the run
folder's tables by attribute, each one it needs a table with rows, any other ``None`` where
the run lacks it."""

from __future__ import annotations

import pytest

pd = pytest.importorskip("pandas")

from attncoda.experiments.view import Context  # noqa: E402


def test_a_section_reads_the_tables_by_attribute():
    flips = pd.DataFrame({"metric": ["tv"], "flip_rate": [0.25]})
    ctx = Context(frames={"flips": flips, "flips_by_layer": flips.iloc[:0]}, sink="first")
    assert ctx.tables.flips is flips and ctx.optional.flips is flips
    # a table without rows is as absent as one the folder lacks
    assert ctx.optional.flips_by_layer is None and ctx.optional.train is None
    for name in ("flips_by_layer", "train"):
        with pytest.raises(KeyError, match=name):
            getattr(ctx.tables, name)
    # the report builds a section only where the run holds every table its view needs
    assert ctx.holds(("flips",)) and ctx.holds(())
    assert not ctx.holds(("flips", "flips_by_layer"))
    # what numpy, copy or pickle ask an object for is not a table
    assert not hasattr(ctx.optional, "__array__") and not hasattr(ctx.tables, "__array__")
