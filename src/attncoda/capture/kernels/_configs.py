"""Launch configurations of the fused kernel, as data, per (architecture, dtype, head dim)
(docs/design.md, "GPU kernels before a GPU").

Each entry gives the query and key block sizes, the warps, the software-pipelining stages
and, for float32, the dot precision. Every entry was compiled without a GPU for its
architecture (``bench/gpu_compile.py``, through ``bench/_offline.py``; a subset in
``tests/capture/kernels/test_gpu_compile.py``): it fits the architecture's opt-in shared
memory per block and spills no register. A float32 entry that cannot do both is
:class:`Refused`, by name, for that architecture: the two-call SDPA path serves it, with a
note. A :class:`Variant` of the kernel (its compile-time switches) says whether it takes
the plain entry or the heavy one.
"""

from __future__ import annotations

import dataclasses

__all__ = [
    "ARCHITECTURES",
    "DTYPES",
    "FLAGS",
    "HEAD_DIMS",
    "LaunchConfig",
    "Refused",
    "Variant",
    "architecture_of",
    "head_dim_class",
    "launch_config",
]

#: Opt-in shared memory per block, bytes, of the architectures configured.
ARCHITECTURES: dict[str, int] = {
    "sm_80": 166_912,  # A100
    "sm_86": 101_376,  # RTX 30xx, A10, A40
    "sm_89": 101_376,  # RTX 40xx, L4, L40
    "sm_90": 232_448,  # H100, H200
}
#: The input dtypes the kernel takes.
DTYPES = ("float32", "bfloat16", "float16")
#: Head dims compiled offline; any head dim up to 256 runs in the class above it.
HEAD_DIMS = (64, 80, 96, 128, 256)
#: FMA contraction in the compiled kernel (Triton's ``enable_fp_fusion``), passed at every
#: launch; the compiled kernel's bound counts it (docs/design.md, "Bounds per kernel").
FP_FUSION = True
#: The kernel's variants by mask and score options (each its own compile): ``sink`` is a
#: learned sink among the content keys, ``learned`` one in the sink set, ``sparse`` sink
#: keys after a document's prefix (``[SEP]``, explicit positions).
FLAGS = ("causal", "window", "softcap", "sink", "learned", "sparse", "padding")


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """One launch of the fused kernel.

    Attributes
    ----------
    block_m, block_n : int
        Queries and keys per block.
    num_warps, num_stages : int
        Warps per program and software-pipelining stages.
    precision : str
        ``tl.dot``'s input precision: ``"ieee"`` (bfloat16/float16 products are exact in
        float32 either way), or ``"tf32x3"`` for float32 on tensor cores.
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    precision: str = "ieee"


@dataclasses.dataclass(frozen=True)
class Refused:
    """A (architecture, dtype, head dim) the fused kernel does not serve, and why."""

    why: str


def head_dim_class(head_dim: int) -> int:
    """The padded head dim a kernel is configured for: 64, 128 or 256 (the next power of
    two, at least 64)."""
    for size in (64, 128, 256):
        if head_dim <= size:
            return size
    raise ValueError(f"head dim {head_dim} is above 256")


@dataclasses.dataclass(frozen=True)
class Variant:
    """The fused kernel's compile-time switches by mask and score options: each set is its
    own compile, and the set says which entry of the launch table it takes (:attr:`heavy`).

    Attributes
    ----------
    causal : bool
        Causal rows (otherwise bidirectional: an encoder's, with padding).
    window : bool
        A sliding window.
    softcap : bool
        Gemma 2's soft-cap.
    aux_content, aux_sink : bool
        A learned sink (GPT-OSS ``s_aux``) among the content keys, or in the sink set.
    sparse : bool
        Sink keys after a document's prefix (masked in the key tiles that hold them).
    """

    causal: bool
    window: bool = False
    softcap: bool = False
    aux_content: bool = False
    aux_sink: bool = False
    sparse: bool = False

    @classmethod
    def of(cls, flags) -> Variant:
        """The variant of ``flags``, a subset of :data:`FLAGS`: ``"padding"`` alone is
        bidirectional rows with padding; any other set is causal."""
        flags = set(flags)
        return cls(
            causal=flags != {"padding"}, window="window" in flags, softcap="softcap" in flags,
            aux_content="sink" in flags, aux_sink="learned" in flags, sparse="sparse" in flags,
        )  # fmt: skip

    @property
    def heavy(self) -> bool:
        """Whether the variant takes the heavy entry: more live registers in the loop (the
        soft-cap's ``tanh``, per-tile sink masks) or its epilogue (a learned sink), so it
        may need smaller blocks than the plain variants (causal, window, padding)."""
        return self.softcap or self.aux_content or self.aux_sink or self.sparse


def _table() -> dict[tuple[str, str, int, bool], LaunchConfig | Refused]:
    """The launch table (what ``bench/gpu_compile.py`` compiled and bench/RESULTS.md lists),
    keyed by (architecture, dtype, head-dim class, heavy).

    bfloat16 and float16, per architecture, sized for its shared memory and register file
    (each entry fits in every variant it serves and, at head dims 64, 128 and 256, spills
    nothing, compiled offline; head dims 80 and 96 take the 128 entry and spill 24 to 96 B
    in some variants, bench/RESULTS.md):

    - sm_90 (232,448 B): 128 x 64 blocks at head dim 64 (8 warps, 3 stages), 128 x 128 at
      128 (8 warps, 3 stages) and 128 x 32 at 256 (8 warps, 2 stages), the plain variants'
      blocks at 128 and 256 the fastest of a sweep on an H200 (``bench/gpu_sweep.py``,
      docs/design.md); the heavy variants at head dim 128 in 128 x 64 blocks and at 256 in
      64 x 32 blocks (8 warps), the largest that spill nothing;
    - sm_80 (166,912 B): 128 x 64 at 64 (8 warps, 3 stages), 64 x 32 at 128, 64 x 32 at
      256 (8 warps);
    - sm_86 and sm_89 (101,376 B): 128 x 64 at 64 (8 warps), 32 x 32 at 128, 32 x 16 at
      256.

    float32 takes ``tf32x3`` products on tensor cores in 16 x 32 blocks (its high and low
    operand halves double the registers) up to head dim 128, and IEEE products (FMA, no
    tensor cores) in 32 x 16 blocks (8 warps) at 256, where ``tf32x3`` spills in every block
    that fits. (On sm_90, 64 x 32 ``tf32x3`` blocks with 8 warps at head dim 64 compile
    without spills but made an illegal memory access on an H200.)
    """
    half = {
        "sm_90": {64: LaunchConfig(128, 64, 8, 3), 128: LaunchConfig(128, 128, 8, 3),
                  256: LaunchConfig(128, 32, 8, 2)},
        "sm_80": {64: LaunchConfig(128, 64, 8, 3), 128: LaunchConfig(64, 32, 4, 2),
                  256: LaunchConfig(64, 32, 8, 2)},
        "sm_86": {64: LaunchConfig(128, 64, 8, 2), 128: LaunchConfig(32, 32, 4, 2),
                  256: LaunchConfig(32, 16, 4, 2)},
    }  # fmt: skip
    half["sm_89"] = half["sm_86"]
    heavy = {
        ("sm_90", 128): LaunchConfig(128, 64, 8, 3),
        ("sm_90", 256): LaunchConfig(64, 32, 8, 2),
    }
    single = {
        64: LaunchConfig(16, 32, 4, 2, "tf32x3"),
        128: LaunchConfig(16, 32, 4, 2, "tf32x3"),
        256: LaunchConfig(32, 16, 8, 2, "ieee"),
    }

    table: dict[tuple[str, str, int, bool], LaunchConfig | Refused] = {}
    for arch in ARCHITECTURES:
        for size in (64, 128, 256):
            for heavy_variant in (False, True):
                blocks = half[arch][size]
                if heavy_variant:
                    blocks = heavy.get((arch, size), blocks)
                table[(arch, "bfloat16", size, heavy_variant)] = blocks
                table[(arch, "float16", size, heavy_variant)] = blocks
                table[(arch, "float32", size, heavy_variant)] = single[size]
    return table


#: (architecture, dtype, head-dim class, heavy) -> the launch configuration or a refusal.
TABLE: dict[tuple[str, str, int, bool], LaunchConfig | Refused] = _table()


def launch_config(
    arch: str, dtype: str, head_dim: int, heavy: bool = False
) -> LaunchConfig | Refused:
    """The table's entry for ``arch`` (``"sm_80"``), ``dtype`` (``"bfloat16"``),
    ``head_dim`` (up to 256) and the variant (``heavy``: :attr:`Variant.heavy`)."""
    return TABLE[(arch, dtype, head_dim_class(head_dim), bool(heavy))]


def architecture_of(capability: tuple[int, int], shared_bytes: int | None = None) -> str | None:
    """The configured architecture that serves a device of compute ``capability``.

    An architecture in :data:`ARCHITECTURES` serves itself. Another one of compute
    capability 8.0 or more takes the entries of the configured architecture with the most
    shared memory that its own ``shared_bytes`` (opt-in per block) still holds, the latest
    of those; its first-use check stands behind the choice. Older devices get None.
    """
    name = f"sm_{capability[0]}{capability[1]}"
    if name in ARCHITECTURES:
        return name
    if capability[0] < 8:
        return None
    limit = shared_bytes if shared_bytes is not None else min(ARCHITECTURES.values())
    fits = [arch for arch, size in ARCHITECTURES.items() if size <= limit]
    if not fits:
        return None
    return max(fits, key=lambda arch: (ARCHITECTURES[arch], arch))
