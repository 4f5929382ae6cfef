""":func:`attncoda.capture.capture` of a TransformerBridge or an nnsight model: the padded
batch run as the wrapper's users run it, inside one :func:`recording` (docs/design.md, "Live
models").
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.capture._forward import bos_id, check_batch, pad
from attncoda.capture._plan import CapturePlan
from attncoda.capture._result import Capture

from ._live import live_model, run_live
from ._recording import recorded

__all__ = ["capture_live"]


def capture_live(model, input_ids, attention_mask, plan: CapturePlan) -> Capture:
    """:func:`attncoda.capture.capture` of a TransformerBridge or an nnsight model: one
    recorded pass over the right-padded batch, as ``plan`` says (checked there; prior
    validation is assumed).

    Raises
    ------
    AttncodaError
        A batch :func:`attncoda.capture.check_batch` refuses, or a left-padded one; what
        :func:`attncoda.capture.live.recording` refuses of the sink and the model.
    """
    ids, mask = check_batch(input_ids, attention_mask)
    bos = None
    if plan.prepend_bos:
        bos = bos_id(plan.tokenizer, live_model(model))
        docs = [np.concatenate([[bos], ids[b][mask[b].bool()].numpy()]) for b in range(len(ids))]
        ids, mask = pad([d.astype(np.int64) for d in docs], 0, False)
    if bool((mask[:, 0] == 0).any()):
        raise AttncodaError(
            f"a {type(model).__name__} numbers positions itself, so a left-padded document "
            f"would not get the positions it has alone: pad on the right (padding_side='right')"
        )
    with recorded(model, plan) as rec:
        run_live(model, ids, mask)
    return replace(rec.capture(), bos_token_id=bos)
