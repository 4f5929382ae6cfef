"""Sink specifications: which keys of each document form the sink set ``S``.

A spec is one of

- ``"first"``: the first real (non-padding) token of each document;
- positions: ``"0"``, ``"0,1"``, an int or a list of ints, counted from the first real token;
- a token: ``"[CLS]"``, ``"<s>"``, ``"token:Ġthe"`` (looked up in the tokenizer) or
  ``"id:101"``: every position where that token id occurs;
- ``"auto"``: keys whose mean received attention exceeds ``AUTO_EPSILON`` (0.3), after Gu et
  al. (2024), "When attention sink emerges in language models". The mean runs over layers,
  heads and the queries that can see the key; it is computed per document in a first pass
  and the statistics are then computed with the chosen set;
- ``"learned"``: the learned per-head sink logit of models such as GPT-OSS (``s_aux``), a
  virtual key that takes probability mass but is no token. It combines with any token spec
  above, e.g. ``"first,learned"``. Without ``learned`` in the spec, the virtual key of such
  a model is one more key of the content ``C``: it stays part of every row's composition.

All positions are relative to the first real token of a document, so left and right
padding resolve to the same sinks.

On the lowest floor of :mod:`attncoda.capture`, beside :mod:`attncoda.capture.names`, and
free of torch: the command line checks a ``--sink`` before any model loads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from attncoda._errors import AttncodaError

__all__ = [
    "AUTO_EPSILON",
    "LEARNED",
    "SinkSpec",
    "auto_sinks",
    "parse_sink",
    "resolve_sinks",
    "token_id",
]

#: Threshold on the mean received attention for ``sink="auto"`` (Gu et al. 2024).
AUTO_EPSILON = 0.3
#: The spec item that puts a model's learned sink logits (a virtual key) in the sink set.
LEARNED = "learned"

_POSITIONS = re.compile(r"^\s*\d+\s*(,\s*\d+\s*)*$")
_TOKEN_ID = re.compile(r"^id:(\d+)$")
_HINT = (
    "use 'first', 'auto', positions like '0' or '0,1', a token like '[CLS]' or 'id:101', "
    "'learned', or one of these with ',learned'"
)


@dataclass(frozen=True)
class SinkSpec:
    """A parsed sink specification.

    Attributes
    ----------
    kind : str
        ``"first"``, ``"positions"``, ``"token"``, ``"auto"`` or ``"learned"`` (the learned
        sink alone, no token key).
    text : str
        The spec as a string (recorded with every capture).
    positions : tuple of int
        For ``"positions"``: sorted, distinct, relative to the first real token.
    token : str or None
        For ``"token"`` given as a string: the token to look up in the tokenizer.
    token_id : int or None
        For ``"token"`` given as ``"id:N"``: the id.
    learned : bool
        Whether the learned sink (a virtual key) belongs to the sink set.
    """

    kind: str
    text: str
    positions: tuple[int, ...] = ()
    token: str | None = None
    token_id: int | None = None
    learned: bool = False


def _unknown(spec: object) -> AttncodaError:
    return AttncodaError(f"unknown sink spec {spec!r}: {_HINT}")


def _positions(values: Sequence[int], spec: object) -> SinkSpec:
    if len(values) == 0:
        raise AttncodaError("sink positions are empty: give at least one position, e.g. [0]")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise _unknown(spec)
        if value < 0:
            raise AttncodaError(
                f"sink position {int(value)} is negative: positions count from the first real "
                f"token (0)"
            )
    positions = tuple(sorted({int(v) for v in values}))
    return SinkSpec("positions", ",".join(map(str, positions)), positions=positions)


def parse_sink(spec: str | int | Sequence[int] | SinkSpec) -> SinkSpec:
    """Parse a sink specification.

    Parameters
    ----------
    spec : str, int, sequence of int or SinkSpec
        See the module docstring.

    Returns
    -------
    SinkSpec

    Raises
    ------
    AttncodaError
        For anything else, with the accepted forms in the message.

    Examples
    --------
    >>> parse_sink("0,1").positions
    (0, 1)
    >>> parse_sink("id:101").token_id
    101
    >>> parse_sink("first,learned").learned
    True
    """
    if isinstance(spec, SinkSpec):
        return spec
    if isinstance(spec, bool):
        raise _unknown(spec)
    if isinstance(spec, (int, np.integer)):
        return _positions([spec], spec)
    if isinstance(spec, (list, tuple)):
        return _positions(spec, spec)
    if not isinstance(spec, str):
        raise _unknown(spec)
    text = spec.strip()
    items = [item.strip() for item in text.split(",")]
    if LEARNED in items:
        rest = ",".join(item for item in items if item != LEARNED)
        if not rest:
            return SinkSpec(LEARNED, LEARNED, learned=True)
        base = parse_sink(rest)
        return replace(base, text=f"{base.text},{LEARNED}", learned=True)
    if text in ("first", "auto"):
        return SinkSpec(text, text)
    if _POSITIONS.match(text):
        return _positions([int(v) for v in text.split(",")], spec)
    match = _TOKEN_ID.match(text)
    if match:
        return SinkSpec("token", text, token_id=int(match.group(1)))
    if text.startswith("token:") and len(text) > len("token:"):
        return SinkSpec("token", text, token=text[len("token:") :])
    if len(text) > 2 and (
        (text[0] == "[" and text[-1] == "]") or (text[0] == "<" and text[-1] == ">")
    ):
        return SinkSpec("token", text, token=text)
    raise _unknown(spec)


def token_id(spec: SinkSpec, tokenizer=None) -> int:
    """The token id a ``"token"`` spec names (looked up in ``tokenizer`` for strings)."""
    if spec.token_id is not None:
        return spec.token_id
    if tokenizer is None:
        raise AttncodaError(
            f"sink spec {spec.text!r} names a token: pass tokenizer= to look up its id"
        )
    vocab = tokenizer.get_vocab()
    if spec.token not in vocab:
        raise AttncodaError(f"sink token {spec.token!r} is not in the tokenizer's vocabulary")
    return int(vocab[spec.token])


def resolve_sinks(
    spec: str | int | Sequence[int] | SinkSpec,
    docs: Sequence[np.ndarray],
    tokenizer=None,
) -> list[np.ndarray]:
    """Sink positions of each document.

    Parameters
    ----------
    spec : sink spec
        Anything :func:`parse_sink` accepts, except ``"auto"`` (resolved by the capture).
    docs : sequence of numpy.ndarray
        The real token ids of each document (no padding), each ``(pos,)``.
    tokenizer : optional
        Needed for token strings such as ``"[CLS]"``.

    Returns
    -------
    list of numpy.ndarray
        Per document, sorted int64 positions relative to the first real token.

    Raises
    ------
    AttncodaError
        A position beyond a document's length; a token absent from a document.
    """
    parsed = parse_sink(spec)
    if parsed.kind == "auto":
        raise AttncodaError("sink 'auto' is resolved by capture(): it needs a first pass")
    out = []
    if parsed.kind == LEARNED:
        return [np.zeros(0, dtype=np.int64) for _ in docs]
    if parsed.kind == "first":
        return [np.zeros(1, dtype=np.int64) for _ in docs]
    if parsed.kind == "positions":
        for index, doc in enumerate(docs):
            if parsed.positions[-1] >= len(doc):
                raise AttncodaError(
                    f"sink position {parsed.positions[-1]} is beyond document {index}, which "
                    f"has {len(doc)} tokens"
                )
            out.append(np.asarray(parsed.positions, dtype=np.int64))
        return out
    wanted = token_id(parsed, tokenizer)
    for index, doc in enumerate(docs):
        found = np.flatnonzero(np.asarray(doc) == wanted).astype(np.int64)
        if found.size == 0:
            raise AttncodaError(
                f"sink token {parsed.text!r} (id {wanted}) does not occur in document {index}"
            )
        out.append(found)
    return out


def auto_sinks(
    received: np.ndarray, count: np.ndarray, epsilon: float = AUTO_EPSILON
) -> np.ndarray:
    """Keys whose mean received attention exceeds ``epsilon``.

    Parameters
    ----------
    received : numpy.ndarray
        ``(key_pos,)``: attention the key received, summed over layers, heads and queries.
    count : numpy.ndarray
        ``(key_pos,)``: number of (layer, head, query) rows that can see the key.
    epsilon : float
        Threshold on the mean (Gu et al. 2024 use 0.3).

    Returns
    -------
    numpy.ndarray
        Sorted int64 positions; may be empty when no key is a sink.
    """
    mean = np.divide(received, count, out=np.zeros_like(received), where=count > 0)
    return np.flatnonzero(mean > epsilon).astype(np.int64)
