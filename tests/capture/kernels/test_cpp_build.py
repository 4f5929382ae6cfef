"""How the ``cpp`` kernel is built (capture/kernels/_cpp_host.py, _cpp.py, cpp.py, and the
registry's record of a fallback): its torch floor, read before any build, with ``auto``
taking ``sdpa`` and saying why once per process and in the capture's record; the build
``ATEN_CPU_CAPABILITY`` picks, capped by the CPU; a stale build lock said and removed, so
that the build goes on rather than waiting forever; the line said when a build starts."""

from __future__ import annotations

import os
import threading
import time

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
    assert set(_cpp_host.FLAGS) == set(_cpp_host.CAPABILITIES)
    assert not any(flag.startswith("-m") for flag in _cpp_host.FLAGS["default"])


def _stale_lock(folder, age):
    lock = folder / "lock"
    lock.write_text("")
    then = time.time() - age
    os.utime(lock, (then, then))
    return lock


def test_a_stale_build_lock_is_said_removed_and_the_build_goes_on(tmp_path, fresh, capsys):
    # A build killed midway left its lock; torch's builder would wait on it forever. Here
    # the build goes on, in an extension of its own name and folder, and fails at once on
    # a flag no compiler takes (a whole build is a minute): it ran, and nothing waited.
    fresh.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    fresh.setattr(_cpp, "NAME", "attncoda_cpp_stale")
    width = cpp.vector_width()
    fresh.setitem(_cpp_host.FLAGS, width, (*_cpp_host.FLAGS[width], "--no-such-flag"))
    folder = _cpp_host.build_folder(f"attncoda_cpp_stale_{width}")
    assert folder == tmp_path / f"attncoda_cpp_stale_{width}"  # torch's own folder
    lock = _stale_lock(folder, _cpp_host.BUILD_TIMEOUT + 60)
    found: list = []
    worker = threading.Thread(target=lambda: found.append(_cpp.unavailable()), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the build waited on the stale lock"
    assert found[0].startswith("it did not build ("), found
    assert not lock.exists()
    err = capsys.readouterr().err.splitlines()
    stale = [line for line in err if "build lock" in line]
    assert stale == [
        f"note: the cpp kernel's build lock {lock} is {_cpp_host.BUILD_TIMEOUT + 60:.0f} s old, "
        f"older than the {_cpp_host.BUILD_TIMEOUT:.0f} s a build may take (a killed build left "
        "it): removed, rebuilding"
    ]
    building = f"cpp kernel: building its {width} build (15 to 40 s) in {folder}: "
    assert f"{building}0/1 build (0 s)" in err


def test_a_live_lock_is_waited_on_and_removed_only_once_stale(tmp_path, capsys):
    lock = _stale_lock(tmp_path, 0)
    # Its holder (another process's build) releases it: nothing removed, nothing said.
    releaser = threading.Timer(0.3, lock.unlink)
    releaser.start()
    assert _cpp_host.clear_stale_lock(tmp_path, timeout=30.0) is False
    releaser.join()
    assert capsys.readouterr().err == ""
    # Held past the build's timeout: stale from then on, removed.
    lock = _stale_lock(tmp_path, 0)
    started = time.monotonic()
    assert _cpp_host.clear_stale_lock(tmp_path, timeout=0.5) is True
    assert 0.4 < time.monotonic() - started < 5 and not lock.exists()
    assert capsys.readouterr().err.startswith("note: the cpp kernel's build lock ")


def test_a_build_shows_as_progress_from_its_start(tmp_path, monkeypatch, capsys):
    from torch.utils import cpp_extension

    built = tmp_path / "attncoda_cpp_x.so"
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: kwargs["name"])
    assert _cpp_host.load_extension("attncoda_cpp_x", "avx2", tmp_path) == "attncoda_cpp_x"
    said = capsys.readouterr().err
    desc = f"cpp kernel: building its avx2 build (15 to 40 s) in {tmp_path}"
    assert said == f"{desc}: 0/1 build (0 s)\n{desc}: 1/1 build, done (0 s)\n"
    built.write_bytes(b"")  # built since the source last changed: loaded, nothing said
    later = _cpp_host.SOURCE.stat().st_mtime + 1
    os.utime(built, (later, later))
    _cpp_host.load_extension("attncoda_cpp_x", "avx2", tmp_path)
    assert capsys.readouterr().err == ""
    older = _cpp_host.SOURCE.stat().st_mtime - 1  # the source changed since: built again
    os.utime(built, (older, older))
    _cpp_host.load_extension("attncoda_cpp_x", "avx2", tmp_path)
    assert capsys.readouterr().err == said
