"""A new kernel is one module and one registry entry: a toy kernel, declared and registered
from this file alone, serves capture(method="fast") (capture/kernels/registry.py,
docs/design.md "Kernels as plug-ins")."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import capture_windows  # noqa: E402
from attncoda.capture.kernels import fast_bounds, registry  # noqa: E402
from attncoda.capture.stats import row_statistics  # noqa: E402
from tiny_models import VOCAB  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

FLOATS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")


class Toy:
    """Every row of a layer in float64 from its queries and keys, read by
    :func:`row_statistics`: all a kernel needs is its declaration, ``prepare`` and ``run``."""

    name = "toy"
    title = "the float64 toy kernel"
    summary = "every row in float64"
    covers = frozenset({"sliding_window"})
    dtypes = MappingProxyType({"cpu": ("float32",)})
    auto_devices: tuple[str, ...] = ()  # never taken by "auto"
    portable = False

    def __init__(self):
        self.layers: list[int] = []

    def refusal(self, device):
        return None

    def bounds(self, *args, **kwargs):
        return fast_bounds(*args, **kwargs)

    def note(self, reason):
        return None

    def prepare(self, call, *, auto):
        return call if call.mask[2] else "masks that carry a bias"

    def run(self, call):
        self.layers.append(call.layer)
        group = call.query.shape[1] // call.key.shape[1]
        q = call.query.double()
        k, v = (t.double().repeat_interleave(group, 1) for t in (call.key, call.value))
        visible, causal, _ = call.mask
        b, _, q_len, _ = q.shape
        k_len = k.shape[2]
        if visible is None:  # the layer's own pattern, causal or every key
            seen = torch.ones(q_len, k_len, dtype=torch.bool)
            visible = (seen.tril(k_len - q_len) if causal else seen).expand(b, 1, q_len, k_len)
        z = torch.matmul(q, k.transpose(-1, -2)) * call.scaling
        # As eager masks: a query that sees no key (padding) spreads over every key.
        log_rows = torch.log_softmax(z.masked_fill(~visible, torch.finfo(z.dtype).min), -1)
        stats = row_statistics(log_rows.clone(), visible, call.plan.sink)
        return torch.matmul(log_rows.exp(), v).to(call.query.dtype), stats


@pytest.fixture
def toy(monkeypatch):
    """The toy kernel registered for one test, the registry as it was afterwards."""
    for name in ("ORDER", "NAMES", "KERNELS"):
        monkeypatch.setattr(registry, name, getattr(registry, name))
    kernel = Toy()
    registry.register(kernel)
    return kernel


def docs(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, VOCAB, size=n) for n in lengths]


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_a_kernel_registered_from_a_test_file_serves_a_capture(toy, family):
    assert registry.KERNELS[-1] == "toy" and registry.lookup("toy") is toy
    model = _tiny(family, torch.float32, positions=512)
    windows = docs((40, 33, 9))
    kwargs = dict(batch_size=3, record_rows=6, block_size=16)
    exact = capture_windows(model, windows, method="exact", **kwargs)
    fast = capture_windows(model, windows, method="fast", kernel="toy", **kwargs)
    n_layers = model.config.num_hidden_layers
    assert toy.layers == list(range(n_layers))  # every layer, once
    assert (fast.kernel, fast.forward) == ("toy", "fast:toy")
    np.testing.assert_array_equal(fast.n_keys, exact.n_keys)
    np.testing.assert_array_equal(fast.has_content, exact.has_content)
    # The exact path rounds its scores and rows in float32, the toy in float64, and each
    # layer reads the output of its own path's layer before: both within float32 rounding of
    # the same statistics, 1e-5 nats at scores of a few units (as the built-in kernels).
    for name in FLOATS:
        np.testing.assert_allclose(getattr(fast, name), getattr(exact, name), atol=1e-5)
    # The recorded rows are the fast path's own, exact in float32, for any kernel.
    for a, b in zip(fast.rows, exact.rows, strict=True):
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a[np.isfinite(a)], b[np.isfinite(b)], atol=1e-5)
    # Not vacuous: the toy's float64 statistics are not the exact path's float32 ones.
    assert not np.array_equal(fast.entropy, exact.entropy)


def test_a_layer_the_toy_declines_takes_the_exact_path(toy, monkeypatch):
    monkeypatch.setattr(Toy, "prepare", lambda self, call, *, auto: "")
    model = _tiny("llama", torch.float32, positions=512)
    fast = capture_windows(model, docs((12, 7)), method="fast", kernel="toy")
    assert (fast.kernel, fast.forward, toy.layers) == ("exact", "eager", [])


def test_a_kernel_name_is_registered_once(toy):
    with pytest.raises(AttncodaError) as refused:
        registry.register(Toy())
    assert str(refused.value) == (
        "a kernel named 'toy' is registered already: give the new one its own name"
    )
    assert registry.NAMES.count("toy") == 1
