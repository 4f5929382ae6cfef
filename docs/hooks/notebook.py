"""mkdocs hook: the tutorial notebook is shown with the outputs committed in it.

The site renders ``docs/tutorials/quickstart.ipynb`` as committed (mkdocs-jupyter,
``execute: false``), so the build stays fast and needs no model; the notebook carries its
outputs, and the build fails if a code cell has none. tests/test_docs.py executes the
notebook and checks that the committed outputs hold the same evidence as that fresh
execution's (:func:`differences`): the same text, and every table held by the rule of its
columns that ``attncoda compare`` holds two runs to, plus a unit of the last digit shown.
After changing the notebook or what it prints, rewrite them with

    PYTHONPATH=src python docs/hooks/notebook.py

Outputs are kept in one normal form (:func:`normalise`): no stderr (warnings, progress
bars), no timing metadata, and only the HTML form of an output that has one.
"""

from __future__ import annotations

import base64
import copy
import html.parser
import os
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "tutorials" / "quickstart.ipynb"
#: A figure inside an HTML view: a PNG, compared by its presence, not its pixels.
_PNG = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])")
#: A table inside an HTML output (pandas' ``to_html``; tables do not nest).
_TABLE = re.compile(r"<table\b.*?</table>", re.S)


def execute(nb: Any, folder: str | os.PathLike[str]) -> Any:
    """Run ``nb`` in place in a new kernel whose working folder is ``folder``; this tree's
    ``src`` comes first on the kernel's path."""
    import nbclient

    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env_path])
    try:
        client = nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
        )
        client.execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
    return nb


def normalise(nb: Any) -> Any:
    """A copy of ``nb`` with its outputs in the committed form."""
    nb = copy.deepcopy(nb)
    nb.metadata["language_info"] = {"name": "python"}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.outputs:
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                continue
            data = out.get("data", {})
            if "text/html" in data:
                data.pop("text/plain", None)
            out.get("metadata", {}).clear()
            kept.append(out)
        cell.outputs = kept
    return nb


def _texts(nb: Any) -> list[list[tuple[str, str]]]:
    """Per code cell: ``(kind, text)`` of each output, kind being its type and MIME type."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        shown = []
        for out in cell.outputs:
            kind = out["output_type"]
            if kind == "stream":
                shown.append((f"stream {out['name']}", out["text"]))
            elif kind == "error":
                shown.append(("error", f"{out['ename']}: {out['evalue']}"))
            else:
                shown += [(f"{kind} {mime}", str(v)) for mime, v in sorted(out["data"].items())]
        cells.append(shown)
    return cells


def figures(text: str) -> list[bytes]:
    """The PNG figures embedded in an HTML output."""
    return [base64.b64decode(p) for p in _PNG.findall(text)]


def _unit(text: str) -> float:
    """One unit of the last digit ``text`` shows (``0.0003075`` -> 1e-7)."""
    mantissa, _, exponent = text.lower().partition("e")
    digits = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - digits)


class _Cells(html.parser.HTMLParser):
    """The rows of one HTML table (pandas' ``to_html``), each a list of its cells' text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _frame(table: str) -> tuple[Any, dict[str, Any]]:
    """A table of an output as a frame (numbers as numbers) and, per numeric column, one
    unit of the last digit each cell shows (what printing it to those digits can move)."""
    import numpy as np
    import pandas as pd

    parser = _Cells()
    parser.feed(table)
    head, *rows = [r for r in parser.rows if r]
    head = [name or "index" for name in head]
    frame = pd.DataFrame(rows, columns=head)
    units = {}
    for column in frame.columns:
        texts = frame[column]
        if not all(t in ("NaN", "nan") or _NUMBER.fullmatch(t) for t in texts):
            continue
        whole = all(t not in ("NaN", "nan") and re.fullmatch(r"[-+]?\d+", t) for t in texts)
        frame[column] = texts.astype("int64" if whole else "float64")
        units[column] = np.array([0.0 if whole or t in ("NaN", "nan") else _unit(t) for t in texts])
    return frame, units


def _compared(cell: int, kind: str, old: str, new: str) -> list[str]:
    """What differs between a committed output and a fresh one: the text around the tables
    exactly, the figures by their presence, each table through the rule its columns hold
    (:func:`attncoda.compare`'s, plus a unit of the last digit shown)."""
    import numpy as np

    from attncoda.experiments.contract import compare_frames
    from attncoda.run.compare import column_rules

    where = f"code cell {cell}, {kind}"
    found = []
    pictures = [figures(old), figures(new)]
    if len(pictures[0]) != len(pictures[1]) or not all(
        f.startswith(b"\x89PNG\r\n\x1a\n") for f in pictures[0] + pictures[1]
    ):
        found.append(f"{where}: not the same figures")
    words = [_PNG.sub("<figure>", _TABLE.sub("<table/>", t)) for t in (old, new)]
    if words[0] != words[1]:
        found.append(f"{where}: the text differs")
    for (a, units_a), (b, units_b) in (
        (_frame(x), _frame(y))
        for x, y in zip(_TABLE.findall(old), _TABLE.findall(new), strict=False)
    ):
        shown = {c: np.fmax(units_a[c], units_b[c]) for c in units_a if c in units_b}
        if list(a.dtypes) != list(b.dtypes):
            found.append(f"{where}: a table's columns differ in kind")
            continue
        compared = compare_frames("output", a, b, column_rules(), shown)
        if compared.why is not None:
            found.append(f"{where}: {compared.why}")
        found += [f"{where}: {c.line()}" for c in compared.cells]
    return found


def differences(committed: Any, fresh: Any) -> list[str]:
    """What differs between the committed outputs and a fresh execution's (both normalised):
    the same outputs, the same text and figures, every table held by the rule of its
    columns (docs/design.md, "The same evidence, by one rule")."""
    found = []
    old, new = _texts(committed), _texts(fresh)
    if len(old) != len(new):
        return [f"{len(old)} code cells committed, {len(new)} executed"]
    for i, (a, b) in enumerate(zip(old, new, strict=True)):
        if [k for k, _ in a] != [k for k, _ in b]:
            found.append(f"code cell {i + 1}: outputs {[k for k, _ in a]} != {[k for k, _ in b]}")
            continue
        for (kind, x), (_, y) in zip(a, b, strict=True):
            found += _compared(i + 1, kind, x, y)
    return found


def on_files(files: Any, **kwargs: object) -> Any:
    import nbformat
    from mkdocs.exceptions import PluginError

    nb = nbformat.read(NOTEBOOK, as_version=4)
    bare = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and not c.outputs]
    if bare:
        raise PluginError(
            f"{NOTEBOOK.relative_to(ROOT)}: code cells {bare} have no outputs; "
            "run 'python docs/hooks/notebook.py' to write them"
        )
    return files


if __name__ == "__main__":
    import tempfile

    import nbformat

    with tempfile.TemporaryDirectory() as folder:
        nb = execute(nbformat.read(NOTEBOOK, as_version=4), folder)
    nbformat.write(normalise(nb), NOTEBOOK)
    print(f"wrote the outputs of {NOTEBOOK.relative_to(ROOT)}")
