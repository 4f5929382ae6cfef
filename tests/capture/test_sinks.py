"""Sink specs: parsing, resolution per document, the auto rule."""

from __future__ import annotations

import numpy as np
import pytest

from attncoda._errors import AttncodaError
from attncoda.capture.sinks import (
    AUTO_EPSILON,
    SinkSpec,
    auto_sinks,
    parse_sink,
    resolve_sinks,
)

HINT = (
    "use 'first', 'auto', positions like '0' or '0,1', a token like '[CLS]' or 'id:101', "
    "'learned', or one of these with ',learned'"
)


class FakeTokenizer:
    def get_vocab(self):
        return {"[CLS]": 2, "[SEP]": 3, "<s>": 1, "Ġthe": 9}


def raises(call, message):
    with pytest.raises(AttncodaError) as info:
        call()
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("first", SinkSpec("first", "first")),
        ("auto", SinkSpec("auto", "auto")),
        (" first ", SinkSpec("first", "first")),
        ("0", SinkSpec("positions", "0", positions=(0,))),
        ("1, 0", SinkSpec("positions", "0,1", positions=(0, 1))),
        ([2, 0, 2], SinkSpec("positions", "0,2", positions=(0, 2))),
        ((3,), SinkSpec("positions", "3", positions=(3,))),
        (np.int64(4), SinkSpec("positions", "4", positions=(4,))),
        ("id:101", SinkSpec("token", "id:101", token_id=101)),
        ("[CLS]", SinkSpec("token", "[CLS]", token="[CLS]")),
        ("<|endoftext|>", SinkSpec("token", "<|endoftext|>", token="<|endoftext|>")),
        ("token:Ġthe", SinkSpec("token", "token:Ġthe", token="Ġthe")),
        ("learned", SinkSpec("learned", "learned", learned=True)),
        ("first,learned", SinkSpec("first", "first,learned", learned=True)),
        (" learned , 1,0", SinkSpec("positions", "0,1,learned", positions=(0, 1), learned=True)),
        ("[CLS],learned", SinkSpec("token", "[CLS],learned", token="[CLS]", learned=True)),
    ],
)
def test_parse(spec, expected):
    assert parse_sink(spec) == expected
    assert parse_sink(expected) is expected


@pytest.mark.parametrize(
    "spec", ["frist", "", "id:x", "id:", "-1", "0,", "[]", "token:", 1.5, True]
)
def test_parse_unknown(spec):
    raises(lambda: parse_sink(spec), f"unknown sink spec {spec!r}: {HINT}")


def test_parse_exact_message_example():
    raises(
        lambda: parse_sink("frist"),
        "unknown sink spec 'frist': use 'first', 'auto', positions like '0' or '0,1', a token "
        "like '[CLS]' or 'id:101', 'learned', or one of these with ',learned'",
    )


def test_parse_bad_positions():
    raises(lambda: parse_sink([]), "sink positions are empty: give at least one position, e.g. [0]")
    raises(
        lambda: parse_sink([0, -1]),
        "sink position -1 is negative: positions count from the first real token (0)",
    )
    raises(
        lambda: parse_sink(-2),
        "sink position -2 is negative: positions count from the first real token (0)",
    )
    raises(lambda: parse_sink([0, "a"]), f"unknown sink spec [0, 'a']: {HINT}")
    raises(lambda: parse_sink([True]), f"unknown sink spec [True]: {HINT}")


DOCS = [np.array([2, 5, 6, 3, 5]), np.array([2, 7, 3])]


def test_resolve_first_and_positions():
    first = resolve_sinks("first", DOCS)
    assert [f.tolist() for f in first] == [[0], [0]]
    assert all(f.dtype == np.int64 for f in first)
    pair = resolve_sinks("0,2", DOCS)
    assert [p.tolist() for p in pair] == [[0, 2], [0, 2]]


def test_resolve_position_beyond_document():
    raises(
        lambda: resolve_sinks([1, 3], DOCS),
        "sink position 3 is beyond document 1, which has 3 tokens",
    )


def test_resolve_tokens():
    assert [p.tolist() for p in resolve_sinks("id:5", DOCS[:1])] == [[1, 4]]
    cls = resolve_sinks("[CLS]", DOCS, FakeTokenizer())
    assert [p.tolist() for p in cls] == [[0], [0]]
    sep = resolve_sinks("[SEP]", DOCS, FakeTokenizer())
    assert [p.tolist() for p in sep] == [[3], [2]]


def test_resolve_token_errors():
    raises(
        lambda: resolve_sinks("id:5", DOCS),
        "sink token 'id:5' (id 5) does not occur in document 1",
    )
    raises(
        lambda: resolve_sinks("[CLS]", DOCS),
        "sink spec '[CLS]' names a token: pass tokenizer= to look up its id",
    )
    raises(
        lambda: resolve_sinks("[MASK]", DOCS, FakeTokenizer()),
        "sink token '[MASK]' is not in the tokenizer's vocabulary",
    )
    raises(
        lambda: resolve_sinks("token:Ġthe", DOCS, FakeTokenizer()),
        "sink token 'token:Ġthe' (id 9) does not occur in document 0",
    )
    raises(
        lambda: resolve_sinks("auto", DOCS),
        "sink 'auto' is resolved by capture(): it needs a first pass",
    )


def test_auto_sinks_threshold():
    received = np.array([3.0, 0.9, 0.0, 0.31])
    count = np.array([4.0, 3.0, 0.0, 1.0])
    # means 0.75, 0.3 (not above), undefined (no query sees it), 0.31
    assert AUTO_EPSILON == 0.3
    assert auto_sinks(received, count).tolist() == [0, 3]
    assert auto_sinks(received, count, epsilon=0.8).tolist() == []
    assert auto_sinks(received, count).dtype == np.int64
