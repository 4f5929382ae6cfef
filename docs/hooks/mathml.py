"""mkdocs hook: LaTeX formulas rendered to MathML when the site is built.

A display formula is a block of lines between two lines ``$$``; an inline one is written
``\\(...\\)``. Both become MathML (``latex2mathml``), which browsers render natively, so the
pages need no script and no font from the network. Code blocks are left alone.
"""

from __future__ import annotations

import re

_INLINE = re.compile(r"\\\((.+?)\\\)")


def _mathml(latex: str, display: str) -> str:
    from latex2mathml.converter import convert

    mathml = convert(latex.strip(), display=display)
    # Markdown reads a line that starts with <math> as a block of raw HTML: an inline
    # formula at the start of a line would become a paragraph of its own.
    return mathml if display == "block" else f'<span class="math">{mathml}</span>'


def render(markdown: str) -> str:
    """``markdown`` with its ``$$`` blocks and ``\\(...\\)`` spans turned into MathML."""
    out: list[str] = []
    block: list[str] | None = None
    fenced = False
    for line in markdown.splitlines():
        if block is not None:
            if line.strip() == "$$":
                out += ["", _mathml("\n".join(block), "block"), ""]
                block = None
            else:
                block.append(line)
            continue
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.strip() == "$$":
            block = []
            continue
        out.append(line if fenced else _INLINE.sub(lambda m: _mathml(m.group(1), "inline"), line))
    if block is not None:
        raise ValueError("a $$ block is not closed")
    return "\n".join(out)


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    return render(markdown)
