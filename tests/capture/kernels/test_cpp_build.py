"""How the ``cpp`` kernel is built (capture/kernels/_cpp_host.py, _cpp.py, cpp.py, and the
registry's record of a fallback): its torch floor, read before any build, with ``auto``
taking ``sdpa`` and saying why once per process and in the capture's record; the build
``ATEN_CPU_CAPABILITY`` picks, capped by the CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture.kernels import _cpp, _cpp_host, cpp, registry  # noqa: E402

OLD_TORCH = "2.5.1+cpu"
#: What the kernel says of a torch below its floor.
TOO_OLD = (
    f"it calls ATen's float32 brgemm, which torch 2.6 brought and torch {OLD_TORCH} lacks "
    "(upgrade torch to 2.6 or later)"
)


@pytest.fixture
def fresh(monkeypatch):
    """The loader's and the notes' once-per-process memories emptied before and after."""

    def clear():
        _cpp._library.cache_clear()
        _cpp._say.cache_clear()
        registry._say_passed_over.cache_clear()

    clear()
    yield monkeypatch
    clear()


def test_the_torch_floor_is_one_constant_and_read_as_a_release():
    assert cpp.TORCH_FLOOR == _cpp_host.TORCH_FLOOR == (2, 6)
    assert _cpp_host._release("2.6.0a0+git1234abc") == (2, 6)  # a nightly of the floor
    assert _cpp_host._release("2.10.1+cu128") == (2, 10)  # not "2.1"
    assert _cpp_host._release("2.5.1") < cpp.TORCH_FLOOR <= _cpp_host._release("2.13.0")


def test_an_old_torch_leaves_the_kernel_unbuilt_and_auto_on_sdpa_said_once(fresh, capsys):
    from torch.utils import cpp_extension

    from attncoda.capture import capture
    from tiny_models import tiny

    fresh.setattr(_cpp_host, "torch_version", lambda: OLD_TORCH)

    def no_build(*args, **kwargs):
        raise AssertionError("a build was attempted below the torch floor")

    fresh.setattr(cpp_extension, "load", no_build)
    assert cpp.prerequisites() == TOO_OLD
    assert _cpp.unavailable() == TOO_OLD  # said before any build is tried
    refusal = f"kernel='cpp' cannot run here: {TOO_OLD}; use kernel='sdpa'"
    with pytest.raises(AttncodaError) as refused:
        registry.resolve_kernel("cpp", "cpu")
    assert str(refused.value) == refusal
    assert registry.passed_over("cpu") == refusal
    assert registry.resolve_kernel("auto", "cpu") == "sdpa"
    # Two captures under "auto": each records why sdpa served; the note is said once.
    model = tiny("llama")
    ids = torch.randint(3, 60, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        runs = [capture(model, ids, record_rows="none", method="fast") for _ in range(2)]
    for got in runs:
        assert got.kernel == f"sdpa ({refusal})"
        assert got.forward == f"fast:sdpa ({refusal})"
    err = capsys.readouterr().err
    assert err.count("note:") == 1, err
    assert f"note: kernel='auto' takes sdpa on cpu, since {refusal}\n" in err
    # Asked by name, sdpa is what was asked for: nothing to record.
    with torch.inference_mode():
        named = capture(model, ids, record_rows="none", method="fast", kernel="sdpa")
    assert (named.kernel, named.forward) == ("sdpa", "fast:sdpa")


def test_aten_cpu_capability_picks_the_build_capped_by_the_cpu(monkeypatch):
    avx512 = frozenset(_cpp_host.AVX2_FLAGS + _cpp_host.AVX512_FLAGS)
    avx2 = frozenset(_cpp_host.AVX2_FLAGS)
    cases = [
        (avx512, None, "avx512"),
        (avx512, "default", "default"),
        (avx512, "avx2", "avx2"),
        (avx512, "avx512", "avx512"),
        (avx2, "avx512", "avx2"),  # capped by what the CPU has
        (avx2, None, "avx2"),
        (frozenset({"avx2", "fma"}), None, "default"),  # no F16C: the portable build
        (None, "avx2", "default"),  # flags unreadable: the portable build
        (avx512, "AVX512", "avx512"),  # not ATen's spelling: ignored, as ATen ignores it
        (avx512, "sve256", "avx512"),  # another architecture's value: ignored
    ]
    for flags, asked, build in cases:
        monkeypatch.setattr(_cpp_host, "_cpu_flags", lambda flags=flags: flags)
        if asked is None:
            monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
        else:
            monkeypatch.setenv("ATEN_CPU_CAPABILITY", asked)
        assert cpp.vector_width() == build, (flags, asked)
    assert set(_cpp.FLAGS) == set(_cpp_host.CAPABILITIES)
    assert not any(flag.startswith("-m") for flag in _cpp.FLAGS["default"])
