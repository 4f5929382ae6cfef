"""What one capture does, checked once: :class:`CapturePlan`, and the batch it runs,
:class:`Batch`.

:func:`attncoda.capture.capture` checks its arguments and the model once into a plan, and
the pass (:func:`attncoda.capture._pass.run_pass`) and the live recording
(:func:`attncoda.capture.live.capture_live`, :func:`attncoda.capture.live.recording`) take
it whole. Free of torch at import.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from attncoda.capture.sinks import SinkSpec

__all__ = ["Batch", "CapturePlan", "check_block_size"]


def check_block_size(block_size: object) -> None:
    """Refuse a ``block_size`` that is not a positive integer."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise AttncodaError(f"block_size must be a positive integer, got {block_size!r}")


@dataclass(frozen=True)
class CapturePlan:
    """How one capture runs: built by :func:`attncoda.capture.capture` (or
    :func:`attncoda.capture.live.recording`) after its checks, then handed down whole; those
    it is handed to assume it valid.

    Attributes
    ----------
    sink : SinkSpec
        The parsed sink spec (``"auto"``: found by a first pass).
    seed : int
        Seeds the row samples (per document: ``(seed, first_doc + index)``).
    method : {"exact", "fast"}
        The method the passes take (``"auto"`` resolved: :attr:`auto_method`).
    block_size : int
        Queries per block of the attention function.
    record_rows : {"auto", "all", "none"} or int
        Which query rows are kept in full (:func:`attncoda.capture.stats.record_plan`).
    tokenizer : optional
        For token sinks and the BOS id.
    first_doc : int
        The index of the batch's first document among those captured together.
    kernel : str or None
        ``method="fast"`` on a Hugging Face model: the kernel as asked (``"auto"`` or a
        name, resolved per layer where it runs); None otherwise (a recorded pass takes the
        portable one).
    mode : {"attention", "outputs"}
        Routed attention or eager ``output_attentions``, ``"auto"`` resolved.
    auto_mode : bool
        Whether the mode was asked as ``"auto"``: a model whose forward does not reach the
        attention function is then read from its eager outputs instead of refused.
    auto_method : bool
        Whether the method was asked as ``"auto"``: a model read from its eager outputs
        then takes the exact method instead of being refused the fast one.
    zeros : {"raise", "floor"}
        ``mode="outputs"``: what a visible key of probability exactly 0 gets.
    keep_outputs : bool
        Keep the logits (or last hidden state) and the next-token log-likelihoods.
    prepend_bos : bool
        Prepend the BOS id to every document.
    device : torch.device or None
        Where the model takes its inputs (:func:`attncoda.models.placement.input_device`):
        the sink mask goes there, and a fast pass on CUDA keeps its statistics in
        page-locked memory (:attr:`pinned`). None where the passes are the model's own,
        recorded (a wrapper's, a recording's).
    """

    sink: SinkSpec
    seed: int
    method: str
    block_size: int
    record_rows: Any
    tokenizer: Any = None
    first_doc: int = 0
    kernel: str | None = None
    mode: str = "attention"
    auto_mode: bool = False
    auto_method: bool = False
    zeros: str = "raise"
    keep_outputs: bool = False
    prepend_bos: bool = False
    device: torch.device | None = None

    @property
    def pinned(self) -> bool:
        """Whether the recorder keeps its statistics in page-locked memory: a fast pass on
        CUDA, whose kernels then copy each layer's statistics without waiting."""
        return self.method == "fast" and self.device is not None and self.device.type == "cuda"

    def sink_pass(self) -> CapturePlan:
        """The plan of the ``sink="auto"`` first pass, which sums the attention each key
        receives: the exact method (the fast path needs the sinks), no outputs kept."""
        return replace(self, method="exact", kernel=None, keep_outputs=False)


@dataclass(frozen=True)
class Batch:
    """A checked, padded batch of documents, as a capture's passes run it.

    Attributes
    ----------
    ids : torch.Tensor
        int64 ``(batch, pos)`` on the CPU (each forward moves it to the model's input
        device).
    mask : torch.Tensor
        ``(batch, pos)`` of 0/1; each row's real tokens are contiguous.
    docs : list of numpy.ndarray
        Each document's real token ids (after the BOS where one was prepended).
    sinks : list of numpy.ndarray or None
        Per document, its sink key positions from its first real token; None until the
        ``sink="auto"`` pass finds them (a pass of a batch without sinks is that pass).
    record : list of numpy.ndarray
        Per document, the sorted query positions from its first real token whose rows are
        kept in full.
    bos : int or None
        The BOS id prepended to every document (None: none).
    """

    ids: torch.Tensor
    mask: torch.Tensor
    docs: list[np.ndarray]
    sinks: list[np.ndarray] | None
    record: list[np.ndarray]
    bos: int | None = None

    @property
    def offsets(self) -> torch.Tensor:
        """int64 ``(batch,)``: the padded position of each document's first real token."""
        return self.mask.argmax(-1)

    @property
    def lengths(self) -> list[int]:
        """Each document's number of real tokens."""
        return [len(doc) for doc in self.docs]
