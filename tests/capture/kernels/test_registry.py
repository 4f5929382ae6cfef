"""The kernel registry (capture/kernels/registry.py): what each kernel declares, which one
``auto`` takes, the one dtype rule, and the chain a routed layer goes down. The kernels
themselves are faked here: what is tested is the choice, against the behaviour the fast
path has had (triton on CUDA under ``auto``, cpp on the CPU where it can be built, sdpa
otherwise; the exact path for what none covers)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from attncoda._errors import AttncodaError
from attncoda.capture.kernels import LayerCall, _triton_jit, cpp, registry


def test_a_kernel_is_named_as_its_module_and_the_choices_follow_the_registry():
    assert registry.NAMES == ("triton", "cpp", "sdpa")  # auto's order of preference
    assert registry.KERNELS == ("auto", "triton", "cpp", "sdpa")
    for kernel in registry.ORDER:
        assert type(kernel).__module__ == f"attncoda.capture.kernels.{kernel.name}"
        assert registry.lookup(kernel.name) is kernel
    assert registry.PORTABLE == "sdpa"  # runs everywhere: recorded passes take it
    unknown = r"^unknown kernel 'cuda': use one of triton, cpp, sdpa$"
    with pytest.raises(AttncodaError, match=unknown):
        registry.lookup("cuda")
    assert registry.describe() == (
        "auto (triton on cuda, else cpp on cpu, else sdpa), triton, cpp or sdpa"
    )


def test_the_registry_and_the_command_line_import_no_torch():
    code = """
        import sys
        from attncoda.capture import KERNELS
        from attncoda.capture.kernels.registry import describe, resolve_kernel
        from attncoda.cli._parser import build_parser
        build_parser()
        print(KERNELS, describe(), resolve_kernel("auto", "cpu"))
        print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]", result.stdout


def test_auto_takes_triton_on_cuda_only_when_it_imports(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(_triton_jit, "triton_available", lambda: True)
    monkeypatch.setattr(cpp, "prerequisites", lambda: None)
    assert registry.resolve_kernel("auto", "cuda") == "triton"
    assert registry.resolve_kernel("auto", "cpu") == "cpp"
    monkeypatch.setattr(cpp, "prerequisites", lambda: "no C++ compiler was found")
    assert registry.resolve_kernel("auto", "cpu") == "sdpa"
    assert registry.resolve_kernel("auto", "mps") == "sdpa"  # its op fails when it runs
    assert registry.resolve_kernel("sdpa", "cuda") == "sdpa"
    monkeypatch.setattr(_triton_jit, "triton_available", lambda: False)
    assert registry.resolve_kernel("auto", "cuda") == "sdpa"
    with pytest.raises(
        AttncodaError,
        match=r"^kernel='triton' needs the triton package, which does not import here: "
        r"install triton or use kernel='sdpa'$",
    ):
        registry.resolve_kernel("triton", "cuda")


def test_float64_is_refused_on_cuda_only_and_in_one_wording():
    message = (
        "method='fast' on cuda takes float32, bfloat16 or float16 (its kernels have no "
        "float64): use dtype='float32', or method='exact' to keep float64"
    )
    for dtype in ("float64", "double", "torch.float64"):
        with pytest.raises(AttncodaError) as refused:
            registry.check_dtype("cuda", dtype)
        assert str(refused.value) == message
    with pytest.raises(AttncodaError, match="method='fast' on cuda takes"):
        registry.check_dtype(SimpleNamespace(type="cuda"), "float64")  # a torch.device
    for device, dtype in [("cpu", "float64"), ("cuda", "bfloat16"), ("cuda", None)]:
        registry.check_dtype(device, dtype)
    registry.check_dtype("mps", "float64")  # no kernel declares it: left to the kernels


def test_what_each_kernel_declines():
    triton, sdpa = registry.lookup("triton"), registry.lookup("sdpa")
    none: dict = {}
    assert registry.declines(triton, "cuda", "torch.float16", none) is None
    assert registry.declines(triton, "cpu", "torch.float64", none) == "torch.float64 inputs"
    assert registry.declines(sdpa, "cpu", "torch.float64", none) is None
    assert registry.declines(sdpa, "cuda", "torch.float64", none) == "torch.float64 inputs"
    for word in ("softcap", "s_aux"):
        assert registry.declines(triton, "cuda", "float32", {word: 1.0}) is None
        assert registry.declines(sdpa, "cuda", "float32", {word: 1.0}) == f"{word} layers"
    assert registry.declines(sdpa, "cpu", "float32", {"sliding_window": 4}) is None
    assert registry.declines(sdpa, "cpu", "float32", {"softcap": None}) is None  # not passed


class _Layer:
    """A routed layer's arguments: a query on ``device`` in ``dtype`` and the kwargs."""

    def __init__(self, device="cuda", dtype="torch.float32", **kwargs):
        self.query = SimpleNamespace(device=SimpleNamespace(type=device), dtype=dtype)
        self.kwargs = kwargs


@pytest.fixture
def fakes(monkeypatch):
    """Each kernel's ``prepare`` replaced by one that records its call and serves (returns
    the call) unless told to decline; notes collected."""
    calls: list[tuple[str, bool]] = []
    notes: list[tuple[str, str]] = []
    declining: set[str] = set()
    monkeypatch.setattr(_triton_jit, "triton_available", lambda: True)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # triton asked for on the cpu too
    monkeypatch.setattr(cpp, "prerequisites", lambda: None)  # cpp can be built
    for kernel in registry.ORDER:

        def prepare(call, *, auto, _name=kernel.name):
            calls.append((_name, auto))
            return "" if _name in declining else call

        def note(reason, _name=kernel.name):
            notes.append((_name, reason))

        monkeypatch.setattr(kernel, "prepare", prepare)
        monkeypatch.setattr(kernel, "note", note)
    return SimpleNamespace(calls=calls, notes=notes, declining=declining)


def _record(kernel, layer):
    """``(the kernel that serves the layer or None, what Capture.kernel says of it)``."""
    plan = SimpleNamespace(kernels=registry.choose(kernel))
    call = LayerCall(plan, 0, None, layer.query, None, None, None, 0.5, layer.kwargs)
    chosen, _ = registry.serve(call)
    return (None, "exact") if chosen is None else (chosen.kernel.name, chosen.served)


def test_a_layer_goes_down_the_chain_from_the_chosen_kernel(fakes):
    assert _record("auto", _Layer()) == ("triton", "triton")
    assert fakes.calls == [("triton", True)]
    assert _record("auto", _Layer("cpu")) == ("cpp", "cpp")
    assert _record(None, _Layer()) == ("sdpa", "sdpa")  # a recorded pass: the portable one
    assert _record(None, _Layer("cpu")) == ("sdpa", "sdpa")
    fakes.calls.clear()
    fakes.declining.add("triton")  # a mask it cannot describe, a failed first-use check
    assert _record("triton", _Layer()) == ("sdpa", "sdpa")  # cpp takes no cuda tensors
    assert _record("triton", _Layer("cpu")) == ("cpp", "cpp")
    fakes.declining.add("cpp")  # its library failed to build
    assert _record("cpp", _Layer("cpu")) == ("sdpa", "sdpa")
    assert fakes.calls == [
        ("triton", False), ("sdpa", False), ("triton", False), ("cpp", False), ("cpp", False),
        ("sdpa", False),
    ]  # fmt: skip
    assert fakes.notes == [("cpp", "cuda tensors")]
    # What sdpa does not model takes the exact path, without a call or a word from sdpa.
    fakes.calls.clear()
    fakes.notes.clear()
    assert _record("auto", _Layer(softcap=30.0)) == (None, "exact")
    assert _record("sdpa", _Layer(s_aux=[0.5])) == (None, "exact")
    assert _record("cpp", _Layer("cpu", softcap=30.0)) == (None, "exact")
    assert fakes.calls == [("triton", True)]
    assert fakes.notes == [
        ("cpp", "cuda tensors"), ("sdpa", "softcap layers"), ("sdpa", "s_aux layers"),
        ("cpp", "softcap layers"), ("sdpa", "softcap layers"),
    ]  # fmt: skip


def test_a_dtype_a_kernel_does_not_take_is_said_once_and_passed_on(fakes):
    with pytest.raises(AttncodaError, match=r"^method='fast' on cuda takes float32, bfloat16"):
        _record("triton", _Layer("cuda", "torch.float64"))  # no kernel takes it there
    assert fakes.calls == [] and fakes.notes == []
    assert _record("triton", _Layer("cpu", "torch.float64")) == ("sdpa", "sdpa")
    assert fakes.notes == [("triton", "torch.float64 inputs"), ("cpp", "torch.float64 inputs")]
    assert fakes.calls == [("sdpa", False)]


def test_the_kernel_name_is_checked_once_per_pass_whatever_the_layers(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from attncoda.capture import capture
    from tiny_models import tiny

    checks: list[str] = []
    inner = registry.check_choice

    def counted(what, value, choices):
        checks.append(value)
        return inner(what, value, choices)

    monkeypatch.setattr(registry, "check_choice", counted)
    found = []
    for layers in (2, 4):
        checks.clear()
        model = tiny("llama", num_hidden_layers=layers)
        capture(model, [[5, 6, 7, 8]], method="fast", kernel="sdpa")
        found.append(list(checks))
    # capture()'s check of its arguments, and the pass's plan: none per layer.
    assert found[0] == found[1] and len(found[0]) <= 2
