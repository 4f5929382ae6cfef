"""The protocol a predictor was fitted under, and whether a measured row was read with it
(docs/design.md, "The experiments", predictor).

A model's sink features and flip rates depend on how its rows were read: how many windows,
how long, of which corpus, with which sink, seed, metrics and tie tolerance. Each row records
what it **read** (:func:`protocol_of`): the windows it got, their length in tokens, and the
corpus by name and sha256. A text model reads windows of a text corpus; a Bigram-Backcopy
checkpoint reads its task's held-out sequences instead (64 tokens for the default task,
whatever window length was asked). A frozen predictor records one :class:`Reading` per corpus
its training rows read, and the sink, seed, metrics and tie tolerance they share; a verdict
is given only on a row whose reading is one of those and whose other keys are the fit's. Any
other row is labelled :data:`OFF_PROTOCOL` and never counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import Reading

__all__ = [
    "OFF_PROTOCOL",
    "PROTOCOL_KEYS",
    "READING_KEYS",
    "Protocol",
    "protocol_of",
]

#: The verdict of a row read with another protocol than the predictor's: no test.
OFF_PROTOCOL = "off protocol: no test"
#: The keys of what one row read (:func:`protocol_of`), in the order they are described.
PROTOCOL_KEYS = (
    "windows",
    "window_tokens",
    "corpus",
    "corpus_sha256",
    "sink",
    "seed",
    "metrics",
    "tol",
)
#: The keys of a :class:`Reading`: what was read, apart from how it was measured.
READING_KEYS = tuple(f.name for f in fields(Reading))
_SHARED_KEYS = ("sink", "seed", "metrics", "tol")


@dataclass(frozen=True)
class Protocol:
    """How the rows of a predictor's models were read and measured.

    Attributes
    ----------
    readings : tuple of Reading
        What the training rows read, one per corpus (e.g. the embedded corpus's 128-token
        windows for text models and the task's 64-token sequences for Bigram-Backcopy
        checkpoints), in the order first seen.
    sink : str
        The sink spec (docs/design.md, "Sinks").
    seed : int
        The seed of the capture and of the flip counts.
    metrics : tuple of str
        The metrics whose keep-vs-drop flip rates are measured.
    tol : float
        The relative tie tolerance of the flip counts.
    """

    readings: tuple[Reading, ...]
    sink: str
    seed: int
    metrics: tuple[str, ...]
    tol: float

    def to_dict(self) -> dict[str, Any]:
        """The protocol as a JSON object (:meth:`from_dict` reads it back)."""
        return {
            "readings": [r.to_dict() for r in self.readings],
            "sink": self.sink,
            "seed": self.seed,
            "metrics": list(self.metrics),
            "tol": self.tol,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "invalid protocol") -> Protocol:
        """The protocol of a JSON object; an error starts with ``where`` and names the key."""
        keys = ("readings", *_SHARED_KEYS)
        if not isinstance(value, Mapping) or set(value) != set(keys):
            raise AttncodaError(
                f"{where}: a protocol must hold exactly {', '.join(keys)}; got {value!r}"
            )
        readings = value["readings"]
        if not isinstance(readings, list) or not readings:
            raise AttncodaError(
                f"{where}: protocol readings must be a non-empty list; got {readings!r}"
            )
        found = tuple(_reading(r, where) for r in readings)
        shas = [r.corpus_sha256 for r in found]
        if len(set(shas)) != len(shas):
            raise AttncodaError(f"{where}: protocol readings name one corpus twice: {readings!r}")
        _check_shared(value, where)
        return cls(
            readings=found,
            sink=str(value["sink"]),
            seed=int(value["seed"]),
            metrics=tuple(value["metrics"]),
            tol=float(value["tol"]),
        )

    @classmethod
    def of_rows(cls, rows: Sequence[Mapping[str, Any]]) -> Protocol | None:
        """The protocol of training rows (each ``{"model", "protocol"}``, the protocol of
        :func:`protocol_of`): one reading per corpus, and the sink, seed, metrics and tie
        tolerance every row shares. ``None`` when no row records one.

        Raises
        ------
        AttncodaError
            A row that records none while others do, rows that read another number of
            windows, rows of one corpus read with windows of another length, or rows
            measured with another sink, seed, metrics or tolerance.
        """
        found = [row.get("protocol") for row in rows]
        if all(p is None for p in found):
            return None
        readings: dict[str, tuple[Reading, str]] = {}
        first = rows[0]["model"]
        for row, value in zip(rows, found, strict=True):
            where = f"training row {row['model']!r}"
            if not isinstance(value, Mapping) or set(value) != set(PROTOCOL_KEYS):
                raise AttncodaError(
                    f"{where}: its protocol must hold exactly {', '.join(PROTOCOL_KEYS)}; "
                    f"got {value!r}"
                )
            reading = _reading({k: value[k] for k in READING_KEYS}, where)
            _check_shared(value, where)
            shared = {k: value[k] for k in _SHARED_KEYS}
            theirs = {k: found[0][k] for k in _SHARED_KEYS}  # type: ignore[index]
            differs = _shared_differences(theirs, shared)
            # Every reading has the run's one window count; the length differs only between
            # corpora (a task's sequences are shorter than the windows asked for).
            known = readings.get(reading.corpus_sha256)
            ref = known or next(iter(readings.values()), None)
            keys = ("windows", "window_tokens") if known else ("windows",)
            if ref is not None:
                differs += [
                    f"{k} {getattr(reading, k)!r}, not {getattr(ref[0], k)!r}"
                    for k in keys
                    if getattr(reading, k) != getattr(ref[0], k)
                ]
            if differs:
                other = first if ref is None else ref[1]
                raise AttncodaError(
                    f"model {row['model']!r} was read with another protocol than {other!r} "
                    f"({'; '.join(differs)}): fit on rows read one way"
                )
            readings.setdefault(reading.corpus_sha256, (reading, row["model"]))
        head = found[0]
        assert isinstance(head, Mapping)
        return cls(
            readings=tuple(r for r, _ in readings.values()),
            sink=str(head["sink"]),
            seed=int(head["seed"]),
            metrics=tuple(head["metrics"]),
            tol=float(head["tol"]),
        )

    def rows_at(self) -> dict[str, int]:
        """The windows a run reads to apply the predictor: the most windows of the longest
        window length of its readings (a Bigram-Backcopy checkpoint asked for longer
        windows than its sequences reads its sequences whole)."""
        return {
            "docs": max(r.windows for r in self.readings),
            "max_tokens": max(r.window_tokens for r in self.readings),
        }

    def describe(self) -> str:
        """One line: ``16 windows of 128 tokens of the embedded corpus, or 16 task sequences
        of 64 tokens of the bigram-backcopy task; sink first, seed 0``."""
        read = ", or ".join(r.describe() for r in self.readings)
        return f"{read}; sink {self.sink}, seed {self.seed}"

    def differences(self, read: Mapping[str, Any] | None) -> list[str]:
        """How what a row read (its ``protocol``) differs from this one: ``[]`` when its
        reading is one of :attr:`readings` and its sink, seed, metrics and tie tolerance are
        this protocol's.

        Parameters
        ----------
        read : mapping or None
            The ``protocol`` a measured row records (:func:`protocol_of`); ``None`` or an
            incomplete mapping (a row that records none) differs in every key it lacks.

        Returns
        -------
        list of str
            One phrase per key that differs, e.g. ``"windows 4, not 16"`` or
            ``"corpus 'my.txt' (sha256 1a2b3c4d5e6f), not 'embedded'"``.
        """
        read = read or {}
        out = [f"{key} not recorded" for key in PROTOCOL_KEYS if key not in read]
        if all(key in read for key in READING_KEYS):
            same = [r for r in self.readings if r.corpus_sha256 == read["corpus_sha256"]]
            if not same:
                sha = read["corpus_sha256"]
                shown = "no sha256" if not isinstance(sha, str) else f"sha256 {sha[:12]}"
                names = " or ".join(repr(r.corpus) for r in self.readings)
                out.append(f"corpus {read['corpus']!r} ({shown}), not {names}")
            else:
                out += [
                    f"{key} {read[key]!r}, not {getattr(same[0], key)!r}"
                    for key in ("windows", "window_tokens")
                    if read[key] != getattr(same[0], key)
                ]
        mine = {k: getattr(self, k) for k in _SHARED_KEYS}
        out += _shared_differences(mine, {k: read[k] for k in _SHARED_KEYS if k in read})
        return out


def _shared_differences(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """How the sink, seed, metrics and tolerance of ``theirs`` differ from ``mine``."""
    out = []
    for key in _SHARED_KEYS:
        if key not in theirs:
            continue
        value = theirs[key]
        if key == "metrics":
            same = sorted(value) == sorted(mine[key])
        elif key == "tol":
            same = float(value) == float(mine[key])
        else:
            same = value == mine[key]
        if not same:
            shown = list(mine[key]) if key == "metrics" else mine[key]
            out.append(f"{key} {value!r}, not {shown!r}")
    return out


def _reading(value: Any, where: str) -> Reading:
    """A :class:`Reading` of a JSON object, each key checked."""
    if not isinstance(value, Mapping) or set(value) != set(READING_KEYS):
        raise AttncodaError(
            f"{where}: a protocol reading must hold exactly {', '.join(READING_KEYS)}; "
            f"got {value!r}"
        )
    for key in ("windows", "window_tokens"):
        v = value[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise AttncodaError(
                f"{where}: protocol {key} must be a positive whole number; got {v!r}"
            )
    for key in ("corpus", "corpus_sha256"):
        if not isinstance(value[key], str) or not value[key]:
            raise AttncodaError(f"{where}: protocol {key} must be a string; got {value[key]!r}")
    return Reading(
        corpus=value["corpus"],
        corpus_sha256=value["corpus_sha256"],
        windows=int(value["windows"]),
        window_tokens=int(value["window_tokens"]),
    )


def _check_shared(value: Mapping[str, Any], where: str) -> None:
    """Check the sink, seed, metrics and tolerance of a JSON object."""
    seed = value["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise AttncodaError(f"{where}: protocol seed must be a whole number; got {seed!r}")
    if not isinstance(value["sink"], str):
        raise AttncodaError(f"{where}: protocol sink must be a string; got {value['sink']!r}")
    metrics = value["metrics"]
    if (
        not isinstance(metrics, (list, tuple))
        or not metrics
        or not all(isinstance(m, str) for m in metrics)
    ):
        raise AttncodaError(
            f"{where}: protocol metrics must be a non-empty list of names; got {metrics!r}"
        )
    tol = value["tol"]
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol >= 0:
        raise AttncodaError(f"{where}: protocol tol must be a number >= 0; got {tol!r}")


def protocol_of(  # params: the public call's keywords, the PROTOCOL_KEYS it records
    *,
    windows: int | None,
    window_tokens: int | None,
    corpus: str | None,
    corpus_sha256: str | None,
    sink: str,
    seed: int,
    metrics: Any,
    tol: float,
) -> dict[str, Any]:
    """What a measured row read and how it was measured (:data:`PROTOCOL_KEYS`).

    Parameters
    ----------
    windows, window_tokens : int or None
        The windows read and their length in tokens as read (a Bigram-Backcopy
        checkpoint's task sequences: their own length); ``None`` for attention handed in
        (no windows were read), which is then on no protocol.
    corpus : str or None
        ``None`` or ``"embedded"`` for the embedded corpus, a text file's path, or
        ``"bigram-backcopy"`` for a checkpoint's task sequences.
    corpus_sha256 : str or None
        The sha256 of what was read (the corpus, or the task's definition); ``None`` for
        attention handed in.
    sink, seed, metrics, tol
        How the rows were measured: sink spec, seed, the metrics, the tie tolerance.
    """
    return {
        "windows": None if windows is None else int(windows),
        "window_tokens": None if window_tokens is None else int(window_tokens),
        "corpus": "embedded" if corpus is None else str(corpus),
        "corpus_sha256": None if corpus_sha256 is None else str(corpus_sha256),
        "sink": str(sink),
        "seed": int(seed),
        "metrics": [str(m) for m in metrics],
        "tol": float(tol),
    }
