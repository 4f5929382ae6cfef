"""mkdocs hook: the API page documents every public name, written by its public path.

Pages name a public object as ``attncoda.<name>``, the path a user types, never the module
that defines it today: an entry ``::: attncoda.recording`` and a link
``[recording](../reference/api.md#attncoda.recording)``. The hook rewrites both to the path
that defines the object now (``attncoda.capture.recording.recording``), which mkdocstrings
renders and whose heading id it gives, so modules can move without a page changing.

A page holding the line ``<!-- attncoda:every-public-name -->`` must have an entry for every
name of ``attncoda.__all__``: a name without one fails the build, and once rendered each
entry's heading must be in the page's HTML.
"""

from __future__ import annotations

import inspect
import re

MARKER = "<!-- attncoda:every-public-name -->"
_ENTRY = re.compile(r"^::: attncoda\.(\w+)$", re.M)
_LINK = re.compile(r"#attncoda\.(\w+)\)")


def public_names() -> list[str]:
    import attncoda

    return list(attncoda.__all__)


def path(name: str) -> str:
    """The dotted path that defines ``attncoda.<name>`` now (what mkdocstrings renders).

    A lazily served name is read from the package's own table of where it is served from
    (``attncoda._LAZY``), without importing it: the capture modules import torch, and
    ``attncoda.capture`` is also the name of a subpackage. Any other name is looked up.
    """
    import attncoda

    lazy = getattr(attncoda, "_LAZY", {})
    if name in lazy:
        module, attr = lazy[name]
        return module if attr is None else f"{module}.{attr}"
    obj = getattr(attncoda, name) if name in attncoda.__all__ else None
    if obj is None:
        raise ValueError(f"attncoda has no public name {name!r}: fix the page")
    if inspect.ismodule(obj):
        # A callable subpackage (attncoda.capture) is documented as the function it calls.
        return getattr(obj, "called", obj.__name__)
    return f"{obj.__module__}.{obj.__qualname__}"


def entries(markdown: str) -> list[str]:
    """The public names a page has an entry for (``::: attncoda.<name>``), in order."""
    return _ENTRY.findall(markdown)


def missing(markdown: str) -> list[str]:
    """The names of ``attncoda.__all__`` without an entry in ``markdown``."""
    shown = set(entries(markdown))
    return [name for name in public_names() if name not in shown]


def resolve(markdown: str) -> str:
    """``markdown`` with each ``::: attncoda.<name>`` and ``#attncoda.<name>`` of a public
    name rewritten to the path that defines it; other paths are left as written."""
    public = set(public_names())

    def entry(m: re.Match[str]) -> str:
        return f"::: {path(m.group(1))}" if m.group(1) in public else m.group(0)

    def link(m: re.Match[str]) -> str:
        return f"#{path(m.group(1))})" if m.group(1) in public else m.group(0)

    return _LINK.sub(link, _ENTRY.sub(entry, markdown))


def _error(message: str) -> Exception:
    from mkdocs.exceptions import PluginError

    return PluginError(message)


def on_page_markdown(markdown: str, page, **kwargs: object) -> str:
    if MARKER in markdown:
        lost = missing(markdown)
        if lost:
            raise _error(
                f"{page.file.src_uri} has no entry for {', '.join(lost)} of attncoda.__all__: "
                "add a line '::: attncoda.<name>' for each"
            )
        markdown = markdown.replace(MARKER, "")
        page.meta["attncoda_public_names"] = True
    return resolve(markdown)


def on_page_content(html: str, page, **kwargs: object) -> str:
    if page.meta.get("attncoda_public_names"):
        # What the reader gets: a rendered heading per public name (mkdocstrings' id).
        lost = [n for n in public_names() if f'id="{path(n)}"' not in html]
        if lost:
            raise _error(f"{page.file.src_uri} renders no heading for {', '.join(lost)}")
    return html
