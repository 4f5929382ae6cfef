"""How much memory a model spec takes at its peak, loaded in float32 and captured.

The local pool of a run (:mod:`attncoda.run.pool`) never runs together models whose peaks
exceed the machine's memory: each spec knows its peak here, without loading it.

- An embedded model: its parameter count × 4 bytes × :data:`OVERHEAD`, plus :data:`BASE`
  (Qwen2.5-Coder-1.5B: 1.78e9 parameters, 8.9 GB; its measured peak is 8.7 GB).
- A folder (a ``train-tiny`` checkpoint, a saved model) or a shipped checkpoint
  (``bigram-backcopy@step2000``): its weight files' bytes × 2 (a half-precision file is
  loaded in float32) × :data:`OVERHEAD`, plus :data:`BASE`.
- Anything else (a hub id, a GGUF file by path): :data:`UNKNOWN`, so that it runs beside
  small models only.
"""

from __future__ import annotations

from pathlib import Path

from attncoda.models.spec import parse_spec

__all__ = ["BASE", "OVERHEAD", "UNKNOWN", "peak_bytes"]

#: A worker process with torch and transformers imported, before any model (bytes).
BASE = 400 * 2**20
#: The float32 weights times this: activations, the capture's rows and the allocator's slack.
OVERHEAD = 1.2
#: The peak assumed for a spec this module cannot size (bytes).
UNKNOWN = 8 * 2**30

_WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


def peak_bytes(spec: str) -> int:
    """The peak memory, in bytes, of a run's worker that loads ``spec`` and captures it.

    Parameters
    ----------
    spec : str
        A model spec (:func:`attncoda.load_model`'s), with or without a revision.

    Returns
    -------
    int
        An estimate from the spec alone (see the module docstring); nothing is loaded.
    """
    from attncoda.models.shipped import checkpoint_folder, is_shipped
    from attncoda.models.zoo import EMBEDDED

    parsed = parse_spec(spec)
    name = parsed.name
    if name in EMBEDDED:
        return int(BASE + EMBEDDED[name].n_params * 4 * OVERHEAD)
    path = checkpoint_folder(name, parsed.revision) if is_shipped(name) else Path(name)
    if path.is_dir():
        size = sum(f.stat().st_size for pattern in _WEIGHTS for f in path.rglob(pattern))
        if size:
            return int(BASE + size * 2 * OVERHEAD)
    return UNKNOWN
