"""The choices capture takes, in a module free of torch: the CLI builds its options from
them without importing the model layer. The kernels' names are the registry's
(:data:`attncoda.capture.kernels.registry.KERNELS`, also free of torch)."""

#: Capture modes: route when possible, always route, or read eager output_attentions.
MODES = ("auto", "attention", "outputs")
#: The capture methods: ``auto`` (the default: the fused-kernel fast path wherever a kernel
#: serves the model's device and dtype, the exact path elsewhere), the exact path (eager's
#: forward, the reference) and the fast path.
METHODS = ("auto", "exact", "fast")
#: What a zero probability in a row does (``zeros=``): refuse it, or floor it.
ZEROS = ("raise", "floor")

#: File types of saved attention (``--attentions``,
#: :func:`attncoda.capture.given.read_attentions`).
ATTENTION_FILES = (".npz", ".pt", ".safetensors")

__all__ = ["ATTENTION_FILES", "METHODS", "MODES", "ZEROS"]
