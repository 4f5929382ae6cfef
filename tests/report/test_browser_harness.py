"""The headless-browser harness (tests/browser.py) passes a good page and can fail a bad one."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from browser import assert_page_ok, check_page, ensure_chromium

pytestmark = pytest.mark.browser


def _png(width: int = 8, height: int = 6) -> bytes:
    """A real RGB PNG (a red/blue gradient), built from the spec with zlib."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    rows = b"".join(
        b"\x00" + b"".join(bytes((255 * x // width, 0, 255 * y // height)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


GOOD_SRC = "data:image/png;base64," + base64.b64encode(_png()).decode("ascii")
BROKEN_SRC = "data:image/png;base64,AAAA"


def _page(body: str, title: str = "harness") -> str:
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body><h1>{title}</h1>{body}</body></html>"
    )


@pytest.fixture(scope="module")
def chromium() -> tuple[str, str]:
    # Fails (never skips) when Chromium/ChromeDriver are missing and cannot be installed.
    return ensure_chromium()


@pytest.fixture
def render(chromium, tmp_path):
    def _render(body: str, title: str = "harness") -> dict:
        html = tmp_path / "page.html"
        html.write_text(_page(body, title), encoding="utf-8")
        return check_page(html, tmp_path / "shot.png", width=800, height=600)

    return _render


def test_good_page_passes(render):
    result = render(f'<img alt="ok" src="{GOOD_SRC}"><p>fine</p>', title="good page")
    assert_page_ok(result)
    assert result["title"] == "good page"
    assert result["images"] == [
        {"src": GOOD_SRC[:40], "naturalWidth": 8, "naturalHeight": 6},
    ]
    assert result["console_errors"] == []
    assert result["screenshot"].stat().st_size > 0


def test_broken_image_fails(render):
    result = render(f'<img src="{GOOD_SRC}"><img src="{BROKEN_SRC}">')
    bad = [img for img in result["images"] if img["naturalWidth"] == 0]
    assert [img["src"] for img in bad] == [BROKEN_SRC]
    with pytest.raises(AssertionError, match="1 of 2 images did not decode") as info:
        assert_page_ok(result)
    assert BROKEN_SRC in str(info.value)


def test_console_error_fails(render):
    result = render(f'<img src="{GOOD_SRC}"><script>console.error("boom")</script>')
    assert any("boom" in e["message"] for e in result["console_errors"])
    with pytest.raises(AssertionError, match="console errors") as info:
        assert_page_ok(result)
    assert "boom" in str(info.value)


def test_js_exception_is_a_console_error(render):
    result = render(f'<img src="{GOOD_SRC}"><script>undefined_fn()</script>')
    messages = [e["message"] for e in result["console_errors"]]
    assert any("undefined_fn" in m for m in messages), messages
    with pytest.raises(AssertionError, match="undefined_fn"):
        assert_page_ok(result)


def test_page_without_images_fails(render):
    result = render("<p>no figures</p>")
    with pytest.raises(AssertionError, match="no <img> elements"):
        assert_page_ok(result)
