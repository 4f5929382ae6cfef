"""Tests for attncoda.data.corpus: the embedded corpus and the file readers."""

from __future__ import annotations

import hashlib
import json
import re
from contextlib import AbstractContextManager
from importlib import resources

import pytest

from attncoda._errors import AttncodaError
from attncoda.data.corpus import (
    Document,
    corpus_hash,
    corpus_source,
    embedded,
    embedded_metadata,
    load_corpus,
    read_corpus,
)

SOURCE = "original prose written for attncoda, released with the package under its licence"


def raises(message: str) -> AbstractContextManager[pytest.ExceptionInfo[AttncodaError]]:
    return pytest.raises(AttncodaError, match=f"^{re.escape(message)}$")


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
