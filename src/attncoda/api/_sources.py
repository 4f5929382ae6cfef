"""What the experiment functions run on: model specs, captures, or live models
(docs/design.md, "Live models").

A *live model* is a model object of this process, run through the same runner as a spec:

- a Hugging Face model with its tokenizer, as ``(model, tokenizer)``, or what
  :func:`attncoda.load_model` returned, ``(model, tokenizer, info)``;
- a TransformerLens 4 ``TransformerBridge`` (its ``tokenizer`` cuts the corpus);
- an nnsight ``LanguageModel`` (its ``tokenizer`` too).

The runner captures it through the object itself (a bridge's ``forward`` with its hooks, an
nnsight trace), so the statistics describe the attention the object computes. This module
imports torch only when it is handed something that is neither a spec nor a capture and
torch is already imported (a live model implies it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError

__all__ = ["LIVE_FORMS", "capture_names", "live_entries", "sources"]

#: What a live model may be, for error messages.
LIVE_FORMS = (
    "a Hugging Face model with its tokenizer as (model, tokenizer), what load_model "
    "returned, a TransformerLens TransformerBridge or an nnsight LanguageModel"
)


def _is_capture(value: object) -> bool:
    from attncoda.capture import Capture

    return isinstance(value, Capture)


def _live_kind(value: object) -> str | None:
    """``"hf"``, ``"bridge"`` or ``"nnsight"`` for a live model object, else None."""
    if "torch" not in sys.modules:  # no model object can exist without torch imported
        return None
    from attncoda.capture.live import kind_of

    try:
        return kind_of(value)
    except AttncodaError:
        return None


def _is_pair(value: object) -> bool:
    """Whether ``value`` is ``(model, tokenizer)`` or ``(model, tokenizer, info)`` (not a
    tuple of two or three models)."""
    return (
        isinstance(value, tuple)
        and len(value) in (2, 3)
        and not isinstance(value[0], str | Path)
        and _live_kind(value[0]) is not None
        and _live_kind(value[1]) is None
    )


def _kind(item: object) -> str:
    if _is_capture(item):
        return "capture"
    if isinstance(item, str | Path):
        return "spec"
    if _is_pair(item) or _live_kind(item) is not None:
        return "live"
    return "?"


def sources(source: Any) -> tuple[list[Any], str]:
    """``(items, kind)``: the sources as a list, and whether they are ``"spec"``,
    ``"capture"`` or ``"live"`` items (one kind for all).

    A tuple is one live model when it is ``(model, tokenizer[, info])``, else a list.

    Raises
    ------
    AttncodaError
        No source, an item of none of the three kinds (named), or a mix of kinds.
    """
    if _is_pair(source):
        items = [source]
    else:
        items = list(source) if isinstance(source, list | tuple) else [source]
    if not items:
        raise AttncodaError("no source given: pass a model spec, a Capture, or a list of them")
    kinds = [_kind(item) for item in items]
    if "?" in kinds:
        bad = items[kinds.index("?")]
        raise AttncodaError(
            f"cannot run on {type(bad).__name__}: pass model specs (str), Capture objects "
            f"(attncoda.capture_windows, attncoda.from_attentions) or live models "
            f"({LIVE_FORMS})"
        )
    if len(set(kinds)) > 1:
        said = {"spec": "model specs", "capture": "captures", "live": "live models"}
        mixed = " and ".join(said[k] for k in said if k in kinds)
        raise AttncodaError(f"mix of {mixed}: pass one kind or the other")
    return items, kinds[0]


def capture_names(items: Sequence[Any], names: Sequence[str] | str | None) -> list[str]:
    """The labels of captures or live models: ``names`` (one distinct name each), or
    ``capture``, ``capture0``, ``capture1``, ... ."""
    if names is None:
        return ["capture"] if len(items) == 1 else [f"capture{i}" for i in range(len(items))]
    listed = [names] if isinstance(names, str) else list(names)
    if len(listed) != len(items) or len(set(listed)) != len(listed):
        raise AttncodaError(
            f"names {listed!r} must be {len(items)} distinct names, one per capture"
        )
    bad = [n for n in listed if not isinstance(n, str) or not n.strip() or "/" in n]
    if bad:
        raise AttncodaError(f"names {bad!r}: each name must be a non-empty str without '/'")
    return listed


def live_entries(
    items: Sequence[Any], names: Sequence[str] | str | None, experiment: str
) -> dict[str, tuple[Any, Any, Any]]:
    """The ``(model, tokenizer, info)`` the runner is lent for each live model, by label.

    Parameters
    ----------
    items : sequence
        Live models (see the module docstring).
    names : str or sequence of str, optional
        Their labels in the tables; default: ``info.spec`` of a :func:`attncoda.load_model`
        triple, else ``live`` (``live0``, ``live1``, ... for several).
    experiment : str
        The experiment that will run on them: one over a checkpoint series (collapse) and one
        that needs the Hugging Face model itself (prune, which ablates its heads) refuse
        what they cannot run.

    Returns
    -------
    dict of str to tuple
        The model object as given (a wrapper stays a wrapper: capture runs through it), its
        tokenizer, and its :class:`attncoda.ModelInfo` (source ``"live"`` unless given).
    """
    from dataclasses import replace

    from attncoda.capture.live import kind_of, live_model
    from attncoda.experiments import contract

    declared = contract.experiment(experiment)
    if declared.combine is not None:
        raise AttncodaError(
            f"{experiment} reads a checkpoint series, not a live model: pass the series' "
            "spec, or one capture per checkpoint with steps="
        )
    # An experiment that needs the model itself, with nothing standing in for it (prune
    # ablates the heads of a Hugging Face model), cannot run through a wrapper.
    own_model = "model" in declared.needs and declared.given is None
    if names is None:
        defaults = [_default_label(item) for item in items]
        names = (
            defaults
            if len(set(defaults)) == len(defaults)
            else [f"live{i}" for i in range(len(items))]
        )
    labels = capture_names(items, names)
    entries: dict[str, tuple[Any, Any, Any]] = {}
    for label, item in zip(labels, items, strict=True):
        model, tokenizer, info = _unpack(item)
        kind = kind_of(model)
        if tokenizer is None:
            raise AttncodaError(
                f"live model {label!r} ({type(model).__name__}) has no tokenizer to cut the "
                "corpus with: pass (model, tokenizer)"
            )
        if own_model and kind != "hf":
            raise AttncodaError(
                f"{experiment} runs a Hugging Face model itself, not a {type(model).__name__}: "
                "pass the model it wraps with its tokenizer, e.g. (bridge.original_model, "
                "bridge.tokenizer)"
            )
        inner = live_model(model)
        if info is None:
            info = _describe(label, kind, inner, tokenizer)
        else:
            info = replace(info, spec=label)
        entries[label] = (model, tokenizer, info)
    return entries


def _unpack(item: Any) -> tuple[Any, Any, Any]:
    from attncoda.capture.live import kind_of
    from attncoda.models.info import ModelInfo

    if isinstance(item, tuple):
        model, tokenizer, *rest = item
        info = rest[0] if rest else None
        if info is not None and not isinstance(info, ModelInfo):
            raise AttncodaError(
                f"the third item of a live model must be the ModelInfo load_model returned, "
                f"got {type(info).__name__}"
            )
        if tokenizer is not None and not callable(tokenizer):
            raise AttncodaError(
                f"the second item of a live model must be its tokenizer, got "
                f"{type(tokenizer).__name__}"
            )
        return model, tokenizer, info
    kind = kind_of(item)
    if kind == "hf":
        raise AttncodaError(
            f"a {type(item).__name__} alone has no tokenizer to cut the corpus with: pass "
            "(model, tokenizer), or what load_model returned"
        )
    return item, getattr(item, "tokenizer", None), None


def _default_label(item: Any) -> str:
    if isinstance(item, tuple) and len(item) == 3 and item[2] is not None:
        return str(getattr(item[2], "spec", "live")).replace("/", "_")
    return "live"


def _describe(label: str, kind: str, inner: Any, tokenizer: Any) -> Any:
    from attncoda.models.info import Origin, describe
    from attncoda.models.load import is_causal_lm

    name = str(getattr(inner.config, "_name_or_path", "") or type(inner).__name__)
    wrapper = {"bridge": "TransformerBridge", "nnsight": "nnsight LanguageModel"}.get(kind)
    notes = (f"a live model of this process ({wrapper or type(inner).__name__})",)
    return describe(
        Origin(label, "live", name, notes=notes),
        inner,
        tokenizer,
        is_causal_lm(inner.config) or bool(getattr(inner.config, "is_decoder", False)),
    )
