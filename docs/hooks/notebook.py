"""mkdocs hook: the tutorial notebook is shown with the outputs committed in it.

The site renders ``docs/tutorials/quickstart.ipynb`` as committed (mkdocs-jupyter,
``execute: false``), so the build stays fast and needs no model; the notebook carries its
outputs, and the build fails if a code cell has none. tests/test_docs.py executes the
notebook once and checks that the committed outputs equal that fresh execution's
(:func:`differences`). After changing the notebook or what it prints, rewrite them with

    PYTHONPATH=src python docs/hooks/notebook.py

Outputs are kept in one normal form (:func:`normalise`): no stderr (warnings, progress
bars), no timing metadata, and only the HTML form of an output that has one.
"""

from __future__ import annotations

import base64
import copy
import math
import os
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "tutorials" / "quickstart.ipynb"
#: A figure inside an HTML view: a PNG, compared by its presence, not its pixels.
_PNG = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])")
#: Outputs must hold on any x86 CPU: a number may differ from the committed one by one unit
#: of the last digit it shows (rounding at a boundary) plus this share of its value (float32
#: rounding carried through sums and bootstrap counts: one triplet of 178,920 is 5.6e-6).
RTOL = 1e-4
#: And this much in absolute terms, for a value near zero that is the difference of two
#: float32 statistics of order 1 (a bin edge of the sink-mass gap, 4.434e-05 on one CPU and
#: 4.443e-05 on another): each statistic is a float32 mean whose rounding moves between CPUs
#: by about 1e-7 (one or two units of float32 roundoff, 2**-24 = 6e-8, at values near 1), so
#: their difference is good to about 2e-7 whatever its own size; 1e-6 is five times that.
ATOL = 1e-6


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
    mantissa, _, exponent = text.lower().partition("e")
    digits = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - digits)


def _split(text: str) -> tuple[list[str], list[str]]:
    """The words between numbers (whitespace collapsed, figures replaced) and the numbers."""
    text = _PNG.sub("data:image/png;base64,<figure>", text)
    numbers = _NUMBER.findall(text)
    words = [" ".join(w.split()) for w in _NUMBER.split(text)]
    return words, numbers


def differences(committed: Any, fresh: Any) -> list[str]:
    """What differs between the committed outputs and a fresh execution's (both normalised):
    the same outputs, the same text and figures, every number within tolerance."""
    found = []
    old, new = _texts(committed), _texts(fresh)
    if len(old) != len(new):
        return [f"{len(old)} code cells committed, {len(new)} executed"]
    for i, (a, b) in enumerate(zip(old, new, strict=True)):
        if [k for k, _ in a] != [k for k, _ in b]:
            found.append(f"code cell {i + 1}: outputs {[k for k, _ in a]} != {[k for k, _ in b]}")
            continue
        for (kind, x), (_, y) in zip(a, b, strict=True):
            if len(figures(x)) != len(figures(y)) or not all(
                f.startswith(b"\x89PNG\r\n\x1a\n") for f in figures(x) + figures(y)
            ):
                found.append(f"code cell {i + 1}, {kind}: not the same figures")
            (xw, xn), (yw, yn) = _split(x), _split(y)
            if xw != yw or len(xn) != len(yn):
                found.append(f"code cell {i + 1}, {kind}: the text differs")
                continue
            for p, q in zip(xn, yn, strict=True):
                want, got = float(p), float(q)
                tol = max(_unit(p) * (1 + 1e-9), ATOL)
                if not math.isclose(got, want, rel_tol=RTOL, abs_tol=tol):
                    found.append(f"code cell {i + 1}, {kind}: {q} where {p} is committed")
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
