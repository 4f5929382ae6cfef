"""mkdocs hook: pages that show a section of README.md, the source of truth for results.

A line ``<!-- attncoda:readme Results on the embedded models -->`` becomes that section of
the README (from its heading to the next heading of the same or a higher level), its
headings moved up one level under the page's title and its links to files under ``docs/``
made relative to the page. The tables are the README's own text, never a copy.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARKER = re.compile(r"^<!-- attncoda:readme (.+?) -->$", re.M)
_HEADING = re.compile(r"^(#+) (.+)$")
_LINK = re.compile(r"(\]\()(docs/)([^)\s]+)(\))")


def section(title: str, text: str | None = None) -> str:
    """The README's section headed ``title`` (any level), heading line left out."""
    lines = (README.read_text(encoding="utf-8") if text is None else text).splitlines()
    start = level = None
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading is None:
            continue
        if start is None:
            if heading.group(2).strip() == title:
                start, level = i + 1, len(heading.group(1))
        elif len(heading.group(1)) <= level:
            return "\n".join(lines[start:i]).strip("\n")
    if start is None:
        raise ValueError(f"README.md has no section {title!r}: fix the page's marker")
    return "\n".join(lines[start:]).strip("\n")


def _for_page(body: str, page_path: str) -> str:
    """Headings one level up (under the page's ``#`` title), ``docs/`` links relative."""
    folder = posixpath.dirname(page_path)
    lifted = []
    fenced = False
    for line in body.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading and len(heading.group(1)) > 2:
            line = line[1:]
        lifted.append(line)

    def relative(m: re.Match[str]) -> str:
        return m.group(1) + posixpath.relpath(m.group(3), folder or ".") + m.group(4)

    return _LINK.sub(relative, "\n".join(lifted))


def expand(markdown: str, page_path: str) -> str:
    """``markdown`` with every README marker replaced by its section."""
    return MARKER.sub(lambda m: _for_page(section(m.group(1)), page_path), markdown)


def on_page_markdown(markdown: str, page, **kwargs: object) -> str:
    return expand(markdown, page.file.src_uri)
