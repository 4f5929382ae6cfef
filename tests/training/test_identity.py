"""Tests of :mod:`attncoda.training.identity`: a model's weights hash and recorded recipe."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attncoda.training.checkpoints import CHECKPOINT_META  # noqa: E402
from attncoda.training.config import TrainConfig  # noqa: E402
from attncoda.training.identity import (  # noqa: E402
    NEAR_COPY,
    SKETCH_SIZE,
    checkpoint_recipe,
    model_identity,
    recipe_key,
    sketch_distance,
    weights_sha256,
    weights_sketch,
)
from attncoda.training.train import train_tiny  # noqa: E402

TASK_FAST = {"task": "bigram-backcopy", "window": 16, "batch_size": 4, "steps": 2}


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("identity") / "series"
    train_tiny(out, TrainConfig(**TASK_FAST), progress=False)
    return out


def _load(folder: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder)


def test_weights_hash_is_the_documented_digest_of_the_parameters(series: Path) -> None:
    model = _load(series / "step2")
    # Independent reference: the digest written out from the docstring's recipe, on the
    # safetensors file's own tensors rather than the module's parameters.
    from safetensors.torch import load_file

    stored = load_file(series / "step2" / "model.safetensors")
    params = dict(model.named_parameters())
    digest = hashlib.sha256()
    for name in sorted(params):
        # transformers loads GPT-NeoX's stored ``embed_out`` as ``lm_head``
        tensor = stored[name] if name in stored else stored[name.replace("lm_head.", "embed_out.")]
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    assert weights_sha256(model) == f"sha256:{digest.hexdigest()}"


def test_weights_hash_ignores_the_folder_and_sees_one_changed_value(
    series: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "renamed"
    shutil.copytree(series / "step2", copy)
    model = _load(series / "step2")
    assert weights_sha256(_load(copy)) == weights_sha256(model)
    assert weights_sha256(_load(series / "step1")) != weights_sha256(model)
    with torch.no_grad():
        param = next(iter(model.parameters()))
        flat = param.view(-1)
        flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf")))  # one ulp
    assert weights_sha256(model) != weights_sha256(_load(copy))


def test_the_recipe_is_the_recorded_config_and_step_without_threads(series: Path) -> None:
    meta = json.loads((series / "step2" / CHECKPOINT_META).read_text(encoding="utf-8"))
    recipe = checkpoint_recipe(series / "step2")
    assert recipe is not None and recipe["step"] == 2
    assert "threads" in meta["config"] and "threads" not in recipe["config"]
    assert recipe["config"] == {k: v for k, v in meta["config"].items() if k != "threads"}
    assert recipe["config"]["task"] == "bigram-backcopy" and recipe["config"]["seed"] == 0
    assert recipe["config"]["task_config"]["n_triggers"] == 3
    # other steps of one run are other recipes; equal recipes give equal keys
    assert recipe_key(checkpoint_recipe(series / "step1")) != recipe_key(recipe)
    assert recipe_key(json.loads(json.dumps(recipe))) == recipe_key(recipe)


def test_no_recipe_where_no_train_tiny_record_is(series: Path, tmp_path: Path) -> None:
    assert checkpoint_recipe(None) is None
    assert checkpoint_recipe(tmp_path) is None  # no attncoda_train.json
    (tmp_path / CHECKPOINT_META).write_text("{not json", encoding="utf-8")
    assert checkpoint_recipe(tmp_path) is None
    (tmp_path / CHECKPOINT_META).write_text(json.dumps({"config": {}}), encoding="utf-8")
    assert checkpoint_recipe(tmp_path) is None  # no step
    identity = model_identity(_load(series / "step2"), series / "step2")
    assert identity == {
        "weights_sha256": weights_sha256(_load(series / "step2")),
        "weights_sketch": list(weights_sketch(_load(series / "step2"))),
        "recipe": checkpoint_recipe(series / "step2"),
    }


def test_another_trigger_count_is_another_recipe(tmp_path: Path) -> None:
    out = tmp_path / "five"
    train_tiny(out, TrainConfig(**TASK_FAST, triggers=5), progress=False)
    recipe = checkpoint_recipe(out / "step2")
    assert recipe is not None and recipe["config"]["task_config"]["n_triggers"] == 5


# --------------------------------------------------------- offloaded and wrapped models


def _half_on_disk(n_layers: int) -> dict[str, str]:
    """GPT-NeoX: embeddings and the first half of the layers on the CPU, the rest (the
    final norm and the unembedding too) on the disk."""
    placed = {"gpt_neox.embed_in": "cpu", "gpt_neox.rotary_emb": "cpu"}
    for i in range(n_layers):
        placed[f"gpt_neox.layers.{i}"] = "cpu" if i < n_layers // 2 else "disk"
    placed |= {"gpt_neox.final_layer_norm": "disk", "lm_head": "disk"}
    return placed


def test_an_offloaded_model_has_the_hash_of_the_model_loaded_whole(
    series: Path, tmp_path: Path
) -> None:
    from attncoda.models.load import load_model

    folder = series / "step2"
    whole, _, info = load_model(str(folder))
    placed, _, _ = load_model(
        str(folder), device_map=_half_on_disk(info.n_layers), offload_folder=tmp_path / "off"
    )
    # The offloaded parameters really wait on the meta device.
    assert placed.lm_head.weight.device.type == "meta"
    assert placed.gpt_neox.layers[0].attention.query_key_value.weight.device.type == "cpu"
    assert weights_sha256(placed) == weights_sha256(whole) == weights_sha256(_load(folder))


def test_a_meta_parameter_with_no_offloaded_copy_is_refused(series: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    from attncoda._errors import AttncodaError

    with torch.device("meta"):
        empty = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(series / "step2"))
    with pytest.raises(AttncodaError, match=r"cannot hash parameter '.*': it is on the meta"):
        weights_sha256(empty)


def test_a_bridge_is_hashed_as_the_model_it_wraps(series: Path) -> None:
    import warnings

    from transformers import AutoTokenizer

    bridge_mod = pytest.importorskip("transformer_lens.model_bridge")
    folder = series / "step2"
    hf = _load(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge = bridge_mod.TransformerBridge.boot_transformers(
            str(folder), hf_model=hf, tokenizer=AutoTokenizer.from_pretrained(folder)
        )
    # Booting wraps the model's own modules, so even its parameter names change; the hash is
    # that of the model as loaded, under Hugging Face's names.
    fresh = _load(folder)
    assert {n for n, _ in bridge.named_parameters()} != {n for n, _ in fresh.named_parameters()}
    assert weights_sha256(bridge) == weights_sha256(fresh)
    assert model_identity(bridge, folder)["weights_sha256"] == weights_sha256(fresh)


# ----------------------------------------------------------- the canonical form, near copies

MASK = (1 << 64) - 1


def _splitmix_sketch(named_values: dict[str, list[float]]) -> list[float]:
    """The sketch written out from its docstring with Python integers: for the weight at flat
    index i of the parameter named n, z = splitmix64(i * golden + salt(n)); it goes, with
    the sign of z's top bit, to the bucket of z's low bits."""
    out = [0.0] * SKETCH_SIZE
    for name, values in named_values.items():
        salt = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
        for i, v in enumerate(values):
            z = (i * 0x9E3779B97F4A7C15 + salt) & MASK
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
            z ^= z >> 31
            out[z & (SKETCH_SIZE - 1)] += -float(v) if z >> 63 else float(v)
    return out


def test_the_sketch_is_the_documented_count_sketch() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.LayerNorm(3))
    params = {n: p.detach().reshape(-1).tolist() for n, p in model.named_parameters()}
    expected = _splitmix_sketch(params)
    assert weights_sketch(model) == pytest.approx(expected, rel=0, abs=1e-12)
    assert len(weights_sketch(model)) == SKETCH_SIZE


def test_a_bfloat16_copy_has_another_hash_but_is_a_near_copy(series: Path) -> None:
    full = _load(series / "step2")
    half = _load(series / "step2").to(torch.bfloat16)
    # the canonical form is float32: the bfloat16 values, cast (exactly) to float32
    digest = hashlib.sha256()
    for name, param in sorted(half.named_parameters()):
        tensor = param.detach().to(torch.float32).contiguous()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.numpy().tobytes())
    assert weights_sha256(half) == f"sha256:{digest.hexdigest()}" != weights_sha256(full)
    # Rounding to bfloat16 moves each weight by at most 2**-8 of itself: the distance of the
    # sketches is about that, below the near-copy threshold (twice it).
    near = sketch_distance(weights_sketch(half), weights_sketch(full))
    assert 0 < near < 2.0**-8 < NEAR_COPY
    # another checkpoint of the run is no near copy
    assert sketch_distance(weights_sketch(_load(series / "step0")), weights_sketch(full)) > 0.05
    assert sketch_distance([1.0], weights_sketch(full)) == float("inf")


def test_known_name_aliases_wrappers_and_shared_storage_are_canonical(series: Path) -> None:
    model = _load(series / "step2")
    reference = weights_sha256(model)

    class OldNames(torch.nn.Module):
        """GPT-NeoX as loaders before transformers 5 name it: the unembedding `embed_out`."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.gpt_neox = inner.gpt_neox
            self.embed_out = inner.lm_head

    class Compiled(torch.nn.Module):
        """The prefix torch.compile's wrapper puts before every name."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self._orig_mod = inner

    assert {n for n, _ in OldNames(model).named_parameters()} != {
        n for n, _ in model.named_parameters()
    }
    assert weights_sha256(OldNames(model)) == reference
    assert weights_sha256(Compiled(model)) == reference
    assert weights_sha256(torch.nn.DataParallel(model)) == reference
    # a parameter that shares another's storage (tied without being the same object) counts once
    tied = torch.nn.Module()
    tied.a = torch.nn.Parameter(torch.arange(4.0))
    tied.b = torch.nn.Parameter(tied.a.data)
    single = torch.nn.Module()
    single.a = torch.nn.Parameter(torch.arange(4.0))
    assert tied.b is not tied.a and weights_sha256(tied) == weights_sha256(single)


def test_an_nnsight_model_has_the_hash_and_sketch_of_its_module(series: Path) -> None:
    nnsight = pytest.importorskip("nnsight")
    from transformers import AutoTokenizer

    folder = series / "step2"
    hf = _load(folder)
    wrapped = nnsight.LanguageModel(hf, tokenizer=AutoTokenizer.from_pretrained(folder))
    assert weights_sha256(wrapped) == weights_sha256(_load(folder))
    assert weights_sketch(wrapped) == weights_sketch(_load(folder))


@pytest.mark.parametrize(("quant", "near"), [("Q8_0", True), ("Q4_0", False)])
def test_a_q8_0_copy_is_a_near_copy_and_a_q4_0_copy_is_not(series: Path, quant, near) -> None:
    """GGUF's quantisations (gguf's own reference code), applied to every matrix as a GGUF
    file holds them: 8 bits move the weights by less than NEAR_COPY, 4 bits by more."""
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize, quantize

    kind = getattr(gguf.GGMLQuantizationType, quant)
    full = _load(series / "step2")
    copy = _load(series / "step2")
    with torch.no_grad():
        for _, param in copy.named_parameters():
            values = param.detach().numpy()
            if values.ndim == 2 and values.shape[-1] % 32 == 0:
                back = dequantize(quantize(values, kind), kind).reshape(values.shape)
                param.copy_(torch.from_numpy(back.copy()))
    distance = sketch_distance(weights_sketch(copy), weights_sketch(full))
    assert (distance <= NEAR_COPY) == near, distance
