"""Device discipline (docs/design.md, "Devices"): every forward the package calls gets its
inputs on the model's input device, the routing probe's included.

The models here live on the ``meta`` device, as a model on a GPU lives on ``cuda``: a forward
that received the CPU's tensors would fail on a GPU the same way (``index is on cpu,
different from other tensors on cuda:0``). A pre-hook records the devices of the tensors
each forward receives and stops the entry point there (a meta model computes nothing), so
each test reads the first forward its entry point calls. On 7ca6e93 the routing probe ran
with the CPU's ids and a model wholly on ``meta`` got its inputs on the CPU: every test here
fails there on the devices it records.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attncoda.capture import capture, capture_windows
from tiny_models import tiny


class Received(Exception):
    """Raised by the pre-hook once it has recorded a forward's inputs."""


def meta_model(family: str = "gpt_neox"):
    """A tiny ``family`` model whose parameters are all on ``meta``, and the list each of
    its forwards appends ``{argument: device type}`` to before :class:`Received` stops it."""
    with torch.device("meta"):
        model = tiny(family)
    seen: list[dict[str, str]] = []

    def hook(module, args, kwargs):
        given = {**dict(enumerate(args)), **kwargs}
        seen.append({str(k): v.device.type for k, v in given.items() if torch.is_tensor(v)})
        raise Received

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return model, seen


def first_forward(call, seen) -> dict[str, str]:
    with pytest.raises(Received):
        call()
    assert len(seen) == 1
    return seen[0]


IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12], [0, 0, 7, 8, 9, 10, 11, 12]])
MASK = torch.tensor([[1] * 8, [0, 0, 1, 1, 1, 1, 1, 1]])


def test_a_model_on_meta_takes_its_inputs_on_meta():
    from attncoda._devices import input_device, to_input_device

    model, _ = meta_model()
    assert input_device(model).type == "meta"
    ids, mask, none = to_input_device(model, IDS, MASK, None)
    assert (ids.device.type, mask.device.type, none) == ("meta", "meta", None)
    assert ids.dtype == IDS.dtype and ids.shape == IDS.shape


@pytest.mark.parametrize("method", ["exact", "fast"])
def test_the_routing_probe_gets_the_ids_on_the_models_device(monkeypatch, method):
    from attncoda.capture import _pass

    model, seen = meta_model()
    # Whether the class routes is cached per class: forget it, so the probe runs.
    monkeypatch.delitem(_pass._CALLS_ROUTED, type(model), raising=False)
    got = first_forward(lambda: capture(model, IDS, MASK, method=method), seen)
    assert got == {"input_ids": "meta", "attention_mask": "meta"}  # a probe has no padding


def test_the_routed_pass_gets_its_inputs_on_the_models_device(monkeypatch):
    from attncoda.capture import _pass

    model, seen = meta_model()
    monkeypatch.setitem(_pass._CALLS_ROUTED, type(model), True)  # the probe said: routed
    got = first_forward(lambda: capture_windows(model, [[5, 6, 7, 8], [9, 10, 11]]), seen)
    assert set(got.values()) == {"meta"} and "input_ids" in got


def test_the_eager_outputs_read_gets_its_inputs_on_the_models_device():
    model, seen = meta_model()
    got = first_forward(lambda: capture(model, IDS, MASK, mode="outputs"), seen)
    assert got == {"input_ids": "meta", "attention_mask": "meta", "position_ids": "meta"}


class NNsight:
    """nnsight's interface as capture uses it: the model as ``_module``, ``trace(inputs)``."""

    def __init__(self, module):
        self._module = module

    @contextlib.contextmanager
    def trace(self, inputs):
        self._module(**inputs)
        yield


def test_a_wrapper_is_run_with_its_inputs_on_its_models_device():
    model, seen = meta_model("gpt2")
    got = first_forward(lambda: capture(NNsight(model), IDS[:1]), seen)
    assert got == {"input_ids": "meta", "attention_mask": "meta"}


@pytest.mark.parametrize("name", ["window_losses", "gradient_importance"])
def test_prunes_evaluation_gets_its_inputs_on_the_models_device(name):
    from attncoda.experiments import prune

    model, seen = meta_model()
    windows = [np.arange(3, 12), np.arange(4, 10)]
    got = first_forward(lambda: getattr(prune, name)(model, windows), seen)
    assert set(got.values()) == {"meta"} and {"input_ids", "attention_mask"} <= set(got)


def test_a_training_step_gets_its_batch_on_the_models_device():
    from attncoda.training.loop import _train_step

    model, seen = meta_model()
    model.config.bos_token_id = 1
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = SimpleNamespace(task=None, train_stream=torch.arange(3, 40))
    config = SimpleNamespace(batch_size=2, window=8, lr=1e-3, warmup=2, steps=4)
    sampler = torch.Generator().manual_seed(0)
    got = first_forward(lambda: _train_step(model, optimizer, data, sampler, 0, config), seen)
    assert got == {"input_ids": "meta", "labels": "meta"}


# --------------------------------------------------------------------------- on a CUDA device
# The same entry points on a real GPU (``pytest -m gpu``; bench/gpu.py runs them), against
# the same model on the CPU. Both sides compute in float32 from the same weights and ids;
# the linear layers and attention round in another order on the two devices (~1e-7
# relative per operation), which two layers of a 32-wide model and rows of at most 24 keys
# carry to ~1e-6 nats: 1e-4 leaves room, and a wrong device, mask or sink is off by 1e-2 and
# more.
GPU_ATOL = 1e-4
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none here)")


@pytest.fixture(scope="module")
def on_both():
    """A tiny Llama (GQA) on the CPU and its copy on CUDA, and a padded batch."""
    cpu = tiny("llama", eager=True)
    cuda = tiny("llama", eager=True).to("cuda")
    ids = torch.randint(3, 120, (2, 24), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding
    return cpu, cuda, ids, mask


def _same(got, ref) -> None:
    np.testing.assert_array_equal(got.n_keys, ref.n_keys)
    for name in ("entropy", "sink_mass", "content_entropy", "sink_balance"):
        np.testing.assert_allclose(getattr(got, name), getattr(ref, name), atol=GPU_ATOL)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("method", ["exact", "fast"])
def test_capture_on_cuda_equals_the_cpus(on_both, method):
    cpu, cuda, ids, mask = on_both
    ref = capture(cpu, ids, mask)
    _same(capture(cuda, ids, mask, method=method), ref)  # ids on the CPU
    _same(capture(cuda, ids.cuda(), mask.cuda(), method=method), ref)  # or on the GPU
    ref = capture(cpu, ids, mask, mode="outputs")
    _same(capture(cuda, ids, mask, mode="outputs"), ref)


@pytest.mark.gpu
@gpu
def test_prunes_evaluation_on_cuda_equals_the_cpus(on_both):
    from attncoda.experiments.prune import gradient_importance, window_losses

    cpu, cuda, ids, _ = on_both
    windows = [ids[0].numpy(), ids[1, 5:].numpy()]
    np.testing.assert_allclose(
        window_losses(cuda, windows), window_losses(cpu, windows), atol=GPU_ATOL
    )
    got, ref = gradient_importance(cuda, windows), gradient_importance(cpu, windows)
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=GPU_ATOL)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("method", ["exact", "fast"])  # fast: the prompt's pass
def test_recording_generate_on_cuda_equals_a_capture_on_the_cpu(on_both, method):
    from attncoda.capture import recording

    cpu, cuda, ids, mask = on_both
    prompt, prompt_mask = ids[:, :12].cuda(), mask[:, :12].cuda()
    with recording(cuda, method=method) as rec:
        out = cuda.generate(
            prompt, attention_mask=prompt_mask, max_new_tokens=4, do_sample=False,
            use_cache=True, pad_token_id=0,
        )  # fmt: skip
    # The last generated token is never fed back: the passes saw every position but it. The
    # CPU reads the tokens the GPU generated (a near-tie may pick another token elsewhere).
    seen = out[:, :-1].cpu()
    full_mask = torch.cat([mask[:, :12], torch.ones(2, seen.shape[1] - 12, dtype=torch.long)], 1)
    _same(rec.capture(), capture(cpu, seen, full_mask))
