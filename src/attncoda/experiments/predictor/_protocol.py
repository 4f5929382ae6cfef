"""The protocol a predictor was fitted under, and whether a measured row was read with it
(docs/design.md, "The experiments", predictor).

A model's sink features and flip rates depend on how its rows were read: how many windows,
how long, of which corpus, with which sink, seed, metrics and tie tolerance. A frozen
predictor records the protocol of its training rows; a verdict is given only on a row read
with the same protocol. Any other row is labelled :data:`OFF_PROTOCOL` and never counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError

__all__ = ["OFF_PROTOCOL", "PROTOCOL_KEYS", "Protocol", "protocol_of"]

#: The verdict of a row read with another protocol than the predictor's: no test.
OFF_PROTOCOL = "off protocol: no test"
#: The keys of a protocol, in the order they are described.
PROTOCOL_KEYS = ("windows", "window_tokens", "corpus", "sink", "seed", "metrics", "tol")


@dataclass(frozen=True)
class Protocol:
    """How the rows of a predictor's models are read and measured.

    Attributes
    ----------
    windows : int
        Windows of the corpus read per model (a Bigram-Backcopy checkpoint reads as many of
        its task's held-out sequences instead).
    window_tokens : int
        Window length in tokens (a task sequence is cut to it: 64 of 128 for the default
        task).
    corpus : str
        ``"embedded"`` (the corpus shipped with attncoda), or the text file's path.
    sink : str
        The sink spec (docs/design.md, "Sinks").
    seed : int
        The seed of the capture and of the flip counts.
    metrics : tuple of str
        The metrics whose keep-vs-drop flip rates are measured.
    tol : float
        The relative tie tolerance of the flip counts.
    """

    windows: int
    window_tokens: int
    corpus: str
    sink: str
    seed: int
    metrics: tuple[str, ...]
    tol: float

    def to_dict(self) -> dict[str, Any]:
        """The protocol as a JSON object (:meth:`from_dict` reads it back)."""
        return {
            "windows": self.windows,
            "window_tokens": self.window_tokens,
            "corpus": self.corpus,
            "sink": self.sink,
            "seed": self.seed,
            "metrics": list(self.metrics),
            "tol": self.tol,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "invalid protocol") -> Protocol:
        """The protocol of a JSON object; an error starts with ``where`` and names the key."""
        if not isinstance(value, Mapping) or set(value) != set(PROTOCOL_KEYS):
            raise AttncodaError(
                f"{where}: a protocol must hold exactly {', '.join(PROTOCOL_KEYS)}; got {value!r}"
            )
        for key in ("windows", "window_tokens", "seed"):
            v = value[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise AttncodaError(f"{where}: protocol {key} must be a whole number; got {v!r}")
        for key in ("corpus", "sink"):
            if not isinstance(value[key], str):
                raise AttncodaError(f"{where}: protocol {key} must be a string; got {value[key]!r}")
        metrics = value["metrics"]
        if (
            not isinstance(metrics, list)
            or not metrics
            or not all(isinstance(m, str) for m in metrics)
        ):
            raise AttncodaError(
                f"{where}: protocol metrics must be a non-empty list of names; got {metrics!r}"
            )
        tol = value["tol"]
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol >= 0:
            raise AttncodaError(f"{where}: protocol tol must be a number >= 0; got {tol!r}")
        return cls(
            windows=int(value["windows"]),
            window_tokens=int(value["window_tokens"]),
            corpus=str(value["corpus"]),
            sink=str(value["sink"]),
            seed=int(value["seed"]),
            metrics=tuple(metrics),
            tol=float(tol),
        )

    def describe(self) -> str:
        """One line: ``16 windows of 128 tokens of the embedded corpus, sink first, seed 0``."""
        return (
            f"{self.windows} windows of {self.window_tokens} tokens of the {self.corpus} "
            f"corpus, sink {self.sink}, seed {self.seed}"
        )

    def differences(self, read: Mapping[str, Any] | None) -> list[str]:
        """How a row's protocol ``read`` differs from this one: ``[]`` when it is this one.

        Parameters
        ----------
        read : mapping or None
            The ``protocol`` a measured row records (:meth:`to_dict`'s keys); ``None`` or
            an incomplete mapping (a row that records none) differs in every key it lacks.

        Returns
        -------
        list of str
            One phrase per key that differs, e.g. ``"windows 4, not 16"``.
        """
        read = read or {}
        out = []
        for key in PROTOCOL_KEYS:
            mine = getattr(self, key)
            if key not in read:
                out.append(f"{key} not recorded")
                continue
            theirs = read[key]
            if key == "metrics":
                same = sorted(theirs) == sorted(mine)
            elif key == "tol":
                same = float(theirs) == float(mine)
            else:
                same = theirs == mine
            if not same:
                shown = list(mine) if key == "metrics" else mine
                out.append(f"{key} {theirs!r}, not {shown!r}")
        return out


def protocol_of(
    *,
    windows: int | None,
    window_tokens: int | None,
    corpus: str | None,
    sink: str,
    seed: int,
    metrics: Any,
    tol: float,
) -> dict[str, Any]:
    """The ``protocol`` a measured row records (:meth:`Protocol.to_dict`'s keys).

    ``corpus`` ``None`` is the embedded corpus; ``windows`` and ``window_tokens`` are
    ``None`` for attention handed in (no windows were read), which is then on no protocol.
    """
    return {
        "windows": None if windows is None else int(windows),
        "window_tokens": None if window_tokens is None else int(window_tokens),
        "corpus": "embedded" if corpus is None else str(corpus),
        "sink": str(sink),
        "seed": int(seed),
        "metrics": [str(m) for m in metrics],
        "tol": float(tol),
    }
