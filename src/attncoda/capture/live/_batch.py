""":func:`attncoda.capture.capture` of a TransformerBridge or an nnsight model: the padded
batch run as the wrapper's users run it, inside one :func:`recording` (docs/design.md, "Live
models").
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.capture._forward import bos_id, check_batch, pad
from attncoda.capture._result import Capture

from ._live import live_model, run_live
from ._recording import recording

__all__ = ["capture_live"]


def capture_live(
    model,
    input_ids,
    attention_mask,
    *,
    sink,
    tokenizer,
    block_size,
    record_rows,
    seed,
    mode,
    prepend_bos,
    method,
    keep_outputs,
    first_doc,
) -> Capture:
    """:func:`attncoda.capture.capture` of a TransformerBridge or an nnsight model: one
    recorded pass over the right-padded batch (arguments as there, checked there but for
    those below).

    Raises
    ------
    AttncodaError
        ``mode="outputs"``, ``keep_outputs=True``, or a left-padded batch.
    """
    name = type(model).__name__
    if mode == "outputs":
        raise AttncodaError(
            f"mode='outputs' reads eager output_attentions of a Hugging Face model: capture "
            f"the {name} with mode='attention', or its Hugging Face model with mode='outputs'"
        )
    if keep_outputs:
        raise AttncodaError(
            f"keep_outputs=True is not available for a {name}: read the outputs of your own "
            f"call inside attncoda.recording, or capture its Hugging Face model"
        )
    ids, mask = check_batch(input_ids, attention_mask)
    bos = None
    if prepend_bos:
        bos = bos_id(tokenizer, live_model(model))
        docs = [np.concatenate([[bos], ids[b][mask[b].bool()].numpy()]) for b in range(len(ids))]
        ids, mask = pad([d.astype(np.int64) for d in docs], 0, False)
    if bool((mask[:, 0] == 0).any()):
        raise AttncodaError(
            f"a {name} numbers positions itself, so a left-padded document would not get "
            f"the positions it has alone: pad on the right (padding_side='right')"
        )
    with recording(
        model,
        sink=sink,
        method=method,
        record_rows=record_rows,
        tokenizer=tokenizer,
        block_size=block_size,
        seed=seed,
        _first_doc=first_doc,
    ) as rec:
        run_live(model, ids, mask)
    return replace(rec.capture(), bos_token_id=bos)
