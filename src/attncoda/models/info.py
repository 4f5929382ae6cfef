"""What was loaded: :class:`ModelInfo`, the model facts a run manifest records.

:func:`describe` reads them from a loaded model, its config and its tokenizer (head counts,
BOS facts, the family, whether capture routes its attention). This module imports no model
code itself: it reads the objects it is handed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.models.placement import device_map_of
from attncoda.models.zoo import family_of, routable

__all__ = ["ModelInfo", "Origin", "describe"]

# Text encoded to see whether the tokenizer puts a special token in front.
_PROBE_TEXT = "Hello world"


@dataclass(frozen=True)
class ModelInfo:
    """What was loaded, in a form fit for a run manifest.

    Attributes
    ----------
    spec : str
        The spec as given to :func:`load_model`.
    source : str
        ``"embedded"``, ``"gguf"``, ``"local"`` or ``"hub"``.
    name_or_path : str
        For embedded models ``"<distribution>==<version>:<file or folder>"`` (no machine
        path); for a GGUF file or a local folder its absolute path; for the hub the repo id.
    revision : str or None
        The hub revision asked for (branch, tag or commit); None elsewhere.
    architecture : str
        Class name of the loaded model, e.g. ``"LlamaForCausalLM"``, ``"BertModel"``.
    model_type : str
        ``config.model_type``, e.g. ``"llama"``, ``"bert"``.
    family : str
        The family tables print, from ``model_type`` (``"Llama"``, ``"BERT"``,
        ``"Gemma 3"``, ``"MPNet"``; an unlisted type as it is).
    n_layers, n_heads, n_kv_heads : int
        Layers, query heads per layer, key/value heads per layer (``n_heads`` without GQA).
    causal : bool
        True for a decoder (query ``i`` sees keys ``0..i``), False for an encoder.
    dtype : str
        Parameter dtype, e.g. ``"float32"``.
    vocab_size : int or None
        ``config.vocab_size``.
    bos_token_id : int or None
        The tokenizer's BOS id (the config's when there is no tokenizer).
    prepends_bos : bool or None
        Whether encoding a text with special tokens puts a token in front of it (BOS or
        ``[CLS]``), found by encoding a probe text; None when there is no tokenizer.
    prepended_token_id : int or None
        The id of that token, or None.
    has_tokenizer : bool
        False when no tokenizer could be found (``load_model`` then returns None for it).
    from_cache : bool
        True when a GGUF model came from the dequantised cache rather than the GGUF file.
    fingerprint : str or None
        ``"sha256:<hex>"`` of the weights file (for several files, of the ``sha256sum``
        listing ``"<hex>  <name>\\n"`` sorted by name), or ``"git:<commit>"`` for the hub.
    notes : tuple of str
        Anything a reader of the manifest should know (missing tokenizer, cache not written).
    capture_mode : str
        ``"attention"`` when the class routes its attention through transformers'
        AttentionInterface (capture reads its scores), ``"outputs"`` when capture reads its
        eager ``output_attentions`` instead (MPNet, Bloom, Falcon before transformers 5.25).
    device_map : dict or None
        For a model placed by a device map, where each module went (its ``hf_device_map``:
        ``{module name: GPU index, "cpu", "disk" or a device string}``); None otherwise.
    """

    spec: str
    source: str
    name_or_path: str
    revision: str | None
    architecture: str
    model_type: str
    family: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    causal: bool
    dtype: str
    vocab_size: int | None
    bos_token_id: int | None
    prepends_bos: bool | None
    prepended_token_id: int | None
    has_tokenizer: bool
    from_cache: bool
    fingerprint: str | None
    notes: tuple[str, ...] = ()
    capture_mode: str = "attention"
    device_map: dict[str, int | str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as a JSON-serialisable dict (``notes`` becomes a list)."""
        out = dataclasses.asdict(self)
        out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class Origin:
    """Where a model's weights came from and what its load noted: the fields of
    :class:`ModelInfo` that :func:`describe` cannot read off the model."""

    spec: str
    source: str
    name_or_path: str
    revision: str | None = None
    from_cache: bool = False
    fingerprint: str | None = None
    notes: tuple[str, ...] = ()


def describe(origin: Origin, model: Any, tokenizer: Any, causal: bool) -> ModelInfo:
    """The :class:`ModelInfo` of a model loaded from ``origin``, and of its tokenizer (None
    for none): head counts, BOS facts, dtype and capture mode are read from the model, its
    config and the tokenizer."""
    text = model.config.get_text_config()
    n_heads = _config_int(text, "num_attention_heads")
    n_kv_heads = getattr(text, "num_key_value_heads", None) or n_heads
    prepends, prepended = _prepended_token(tokenizer)
    if tokenizer is not None:
        bos = tokenizer.bos_token_id
    else:
        bos = getattr(text, "bos_token_id", None)
    vocab = getattr(text, "vocab_size", None)
    return ModelInfo(
        **dataclasses.asdict(origin),
        architecture=type(model).__name__,
        model_type=str(model.config.model_type),
        family=family_of(str(model.config.model_type)),
        n_layers=_config_int(text, "num_hidden_layers"),
        n_heads=n_heads,
        n_kv_heads=int(n_kv_heads),
        causal=causal,
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        vocab_size=None if vocab is None else int(vocab),
        bos_token_id=None if bos is None else int(bos),
        prepends_bos=prepends,
        prepended_token_id=prepended,
        has_tokenizer=tokenizer is not None,
        capture_mode="attention" if routable(model) else "outputs",
        device_map=device_map_of(model),
    )


def _config_int(config: Any, name: str) -> int:
    value = getattr(config, name, None)
    if not isinstance(value, int):
        raise AttncodaError(
            f"cannot read {name} from the config of model type "
            f"{getattr(config, 'model_type', '?')!r} ({type(config).__name__})"
        )
    return value


def _prepended_token(tokenizer: Any) -> tuple[bool | None, int | None]:
    """Whether encoding with special tokens puts a token first, and which one."""
    if tokenizer is None:
        return None, None
    plain = tokenizer(_PROBE_TEXT, add_special_tokens=False)["input_ids"]
    special = tokenizer(_PROBE_TEXT, add_special_tokens=True)["input_ids"]
    offset = next(
        (k for k in range(len(special) - len(plain) + 1) if special[k : k + len(plain)] == plain),
        None,
    )
    if offset is None:  # the special tokens changed the content tokens: look at the first
        prepends = bool(special) and special[0] in tokenizer.all_special_ids
    else:
        prepends = offset > 0
    return prepends, (int(special[0]) if prepends else None)
