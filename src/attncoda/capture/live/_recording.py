"""Statistics from the forward passes a user runs: :func:`recording`.

Inside ``with recording(model) as rec:`` the model's attention runs through the registered
``"attncoda"`` function (:func:`attncoda.capture.routing.routed`), and a forward pre-hook
and an always-called forward hook on the module that holds the layers open and close one
:class:`Recorder` per forward pass, whoever calls it: ``model(...)``,
``model.generate(...)``, or a wrapper that calls the model's modules (docs/design.md,
"Recording the user's own passes").

A pass that starts a sequence (no cached keys) opens one document per batch row. A pass that
continues a KV cache the recording has seen (``generate()`` with ``use_cache=True``, or a
``past_key_values`` handed back by the user) appends its queries to the documents of the
pass that filled that cache: each new query's row runs over every key the cache holds for
the layer, so a sliding-window layer's row runs over the window and a learned sink is one
more key, as in a full pass. ``Capture.n_prompt`` says how many positions of each document
came from its first pass; the rest were generated. The documents themselves, and their
assembly into a :class:`Capture`, are :mod:`attncoda.capture.live._documents`.

Leaving the block removes the hooks and restores the model's own attention implementation,
also when the block raised.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from attncoda._errors import AttncodaError, check_choice
from attncoda.capture._plan import CapturePlan, check_block_size
from attncoda.capture._result import Capture, concatenate
from attncoda.capture.kernels.registry import PORTABLE, choose
from attncoda.capture.names import METHODS
from attncoda.capture.routing import is_recorded, marked, routed
from attncoda.capture.sinks import parse_sink
from attncoda.capture.stats import PassPlan, Recorder, record_plan

from ._documents import Documents
from ._live import bridge_score_hooks, kind_of, live_model
from ._pass_recorder import cache_of, check_mask, past_length, record_scores

__all__ = ["Recording", "is_recorded", "recorded", "recording"]


class Recording:
    """What :func:`recording` yields: the passes recorded so far, read by :meth:`capture`.

    Attributes
    ----------
    model : transformers.PreTrainedModel
        The Hugging Face model whose passes are recorded.
    n_passes : int
        Forward passes recorded so far.
    """

    def __init__(self, model, plan: CapturePlan) -> None:
        self.model = model
        self.n_passes = 0
        self._hf = live_model(model)
        self._plan = plan
        # A recorded pass's fast path takes the kernel that runs everywhere (PORTABLE).
        self._kernels = choose(None) if plan.method == "fast" else None
        self._score_hooks: list[Any] = []
        self._groups: list[Documents] = []
        # id(cache) -> (the cache, the documents it holds); the cache is kept so its id
        # is not reused while the recording lasts.
        self._caches: dict[int, tuple[Any, Documents]] = {}
        self._open: list[tuple[Recorder, Documents, Any]] = []

    @property
    def recorder(self) -> Recorder | None:
        """The recorder of the pass under way, which the routed attention function and the
        bridge's score hooks fill (None: none)."""
        return self._open[-1][0] if self._open else None

    def _forward(self, groups) -> dict[str, Any]:
        """``Capture.forward`` and ``read_dtype`` of the recorded passes: a bridge's own
        attention (its scores read in its dtype), else the routed function's output, eager's
        on every pass that continues a cache."""
        if self._score_hooks or kind_of(self.model) == "bridge":
            dtype = str(getattr(self._hf, "dtype", "")).removeprefix("torch.") or None
            return {"forward": "transformer_lens", "read_dtype": dtype}
        if self._plan.method != "fast":
            return {"forward": "eager", "read_dtype": None}
        cached = any(bool((g.n_prompt < g.mask.bool().sum(-1).numpy()).any()) for g in groups)
        forward = f"fast:{PORTABLE}"
        if cached:
            forward += "; eager on passes that continue a cache"
        return {"forward": forward, "read_dtype": None}

    # -- the hooks ------------------------------------------------------------------------

    def _hook_scores(self) -> None:
        """(Re)register the bridge's score hooks, last: a user's hooks on the same points
        (``run_with_hooks`` adds them before the pass) run first, so the statistics see
        the scores they leave."""
        for handle in self._score_hooks:
            handle.remove()
        self._score_hooks = [
            point.register_forward_hook(self._scores) for point in bridge_score_hooks(self.model)
        ]

    def _scores(self, point, inputs, scores) -> None:
        record_scores(self.recorder, scores)

    def _unhook_scores(self) -> None:
        for handle in self._score_hooks:
            handle.remove()
        self._score_hooks = []

    def _before(self, module, args, kwargs) -> None:
        if self._score_hooks:
            self._hook_scores()
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        given = ids if ids is not None else embeds
        if given is None:
            raise AttncodaError(
                f"a recorded forward pass of {type(self._hf).__name__} got neither input_ids "
                f"nor inputs_embeds: pass one of them by keyword"
            )
        batch, q = int(given.shape[0]), int(given.shape[1])
        cache = cache_of(kwargs)
        past = past_length(cache, kwargs.get("cache_position"))
        mask = kwargs.get("attention_mask")
        if mask is None:
            mask = torch.ones((batch, past + q), dtype=torch.long)
        if mask.ndim != 2 or tuple(mask.shape) != (batch, past + q):
            raise AttncodaError(
                f"a recorded forward pass got an attention_mask of shape {tuple(mask.shape)} for "
                f"{batch} x {q} new tokens after {past} cached ones: recording needs a 2-D 0/1 "
                f"mask (batch, {past + q}) or none"
            )
        mask = mask.detach().to(torch.long).cpu()
        check_mask(mask)
        new_ids = (
            ids.detach().to(torch.long).cpu()
            if ids is not None
            else torch.full((batch, q), -1, dtype=torch.long)
        )
        if past == 0:
            group = self._open_documents(mask, new_ids)
        else:
            group = self._continued(cache, batch, past)
            group.extend(mask, new_ids)
        self._open.append((self._pass_recorder(group, past, q), group, cache))

    def _after(self, module, args, kwargs, output) -> None:
        if not self._open:
            return
        rec, group, cache = self._open.pop()
        if output is None:  # the pass raised: nothing of it is kept
            return
        if not rec.stats:
            raise AttncodaError(
                f"no attention layer of {type(self._hf).__name__} reached the attncoda "
                f"attention function in a recorded forward pass: capture this model with "
                f"mode='outputs'"
            )
        group.fold(rec)
        self.n_passes += 1
        returned = cache_of(output)
        for held in (cache, returned):
            if held is not None:
                self._caches[id(held)] = (held, group)

    # -- the documents --------------------------------------------------------------------

    def _open_documents(self, mask, ids) -> Documents:
        plan = self._plan
        first_doc = plan.first_doc + sum(int(g.mask.shape[0]) for g in self._groups)
        group = Documents.start(mask, ids, plan.sink, plan.tokenizer, first_doc)
        self._groups.append(group)
        return group

    def _continued(self, cache, batch: int, past: int) -> Documents:
        found = self._caches.get(id(cache)) if cache is not None else None
        if found is None or found[0] is not cache:
            raise AttncodaError(
                f"a recorded forward pass continues a cache of {past} positions that no pass "
                f"of this recording filled: start the sequence inside the recording block"
            )
        group = found[1]
        if group.length != past or int(group.mask.shape[0]) != batch:
            raise AttncodaError(
                f"a recorded forward pass continues a cache of {batch} x {past} positions, but "
                f"the recorded documents of that cache are {tuple(group.mask.shape)}: pass "
                f"the cache of the previous call"
            )
        return group

    def _pass_recorder(self, group: Documents, past: int, q: int) -> Recorder:
        real = group.mask.bool()
        query_real = real[:, past:]
        counts = query_real.sum(-1).tolist()
        rows = record_plan(counts, self._plan.record_rows, self._plan.seed, group.first_doc)
        # The row plan counts real queries of this pass; in padded pass coordinates a document's
        # real queries start at its offset (left padding) or at 0 (right, or a continuation).
        starts = query_real.long().argmax(-1).tolist()
        record = [torch.as_tensor(p) + s for p, s in zip(rows, starts, strict=True)]
        plan = self._plan
        passing = PassPlan(
            query_real, group.offsets, group.sink_keys, record, plan.block_size,
            learned=plan.sink.learned, method=plan.method, kernels=self._kernels, past=past,
            widths=real.sum(-1).tolist(),
        )  # fmt: skip
        return Recorder(passing)

    # -- the result -----------------------------------------------------------------------

    def capture(self) -> Capture:
        """The recorded passes as one :class:`Capture`: one document per batch row of each
        pass that started a sequence, in call order, with the positions of the passes that
        continued its cache appended (``Capture.n_prompt`` counts the first pass's).

        Raises
        ------
        AttncodaError
            When no forward pass was recorded.
        """
        groups = [g for g in self._groups if g.stats]
        if not groups:
            raise AttncodaError(
                f"no forward pass of {type(self._hf).__name__} was recorded: call the model "
                f"inside the recording block"
            )
        plan = self._plan
        virtual = int(any(groups[0].virtual))
        about: dict[str, Any] = {
            "virtual_keys": virtual,
            "sink_spec": plan.sink.text,
            "mode": "attention",
            "zeros": "raise",
            "model_class": type(self._hf).__name__,
            "n_floored": 0,
            "bos_token_id": None,
            "block_size": plan.block_size,
            "seed": plan.seed,
            "method": plan.method,
            # A recorded pass's fast path is the kernel that runs everywhere.
            "kernel": PORTABLE if plan.method == "fast" else None,
            **self._forward(groups),
        }
        parts = [group.capture(plan.sink.learned, virtual, about) for group in groups]
        return parts[0] if len(parts) == 1 else concatenate(parts)


def _layers_module(model):
    """The module every forward pass of ``model`` goes through: its base model (the one
    that holds the layers), so a pass of the bare base model is recorded too."""
    base = getattr(model, "base_model", None)
    return base if isinstance(base, torch.nn.Module) else model


@contextlib.contextmanager
def recording(  # params: the public entry point, each keyword one a caller sets
    model, *, sink="first", method: str = "exact", record_rows="auto", tokenizer=None,
    block_size: int = 512, seed: int = 0,
) -> Iterator[Recording]:  # fmt: skip
    """Record the attention statistics of every forward pass of ``model`` inside the block.

    Parameters
    ----------
    model : transformers.PreTrainedModel, TransformerBridge or nnsight LanguageModel
        In eval mode. A Hugging Face model (also inside an nnsight ``LanguageModel``) has
        its attention routed through the attncoda attention function; a TransformerLens
        ``TransformerBridge`` is read from its components' ``hook_attn_scores`` (the masked
        logits), after any hook a user put on them.
    sink : str, int or sequence of int
        As in :func:`attncoda.capture.capture`, except ``"auto"`` (it needs a first
        pass over the documents). Positions and tokens are resolved on the pass that starts
        a sequence (the prompt).
    method : {"exact", "fast", "auto"}
        As in :func:`attncoda.capture.capture` (``"auto"`` is ``"exact"`` here: the passes
        are the user's own); passes that continue a KV cache take the exact path (one
        query a step leaves a fused kernel nothing to save).
    record_rows : {"none", "auto", "all"} or int
        Which query rows to keep in full, planned per pass over its real queries (so under
        ``generate()`` every generated row is kept unless ``"none"``).
    tokenizer : optional
        For token sinks.
    block_size : int
        Queries per block of the attention function (a bridge: of its score rows); a pass
        of at most ``block_size`` queries gives outputs bit-identical to eager.
    seed : int
        Seeds the row samples (per document: ``(seed, document index)``).

    Yields
    ------
    Recording
        ``rec.capture()`` is the :class:`Capture` of the passes so far, one document per
        batch row of each pass that started a sequence (docs/design.md, "Recording the
        user's own passes").

    Raises
    ------
    AttncodaError
        Bad arguments; a model in training mode or whose attention cannot be routed; a
        model already inside a recording.
    """
    check_choice("method", method, METHODS)
    method = "exact" if method == "auto" else method  # a recording's passes are the user's
    check_block_size(block_size)
    spec = parse_sink(sink)
    record_plan([1], record_rows, seed, 0)  # validates record_rows
    plan = CapturePlan(spec, seed, method, block_size, record_rows, tokenizer=tokenizer)
    with recorded(model, plan) as rec:
        yield rec


@contextlib.contextmanager
def recorded(model, plan: CapturePlan) -> Iterator[Recording]:
    """:func:`recording` under a plan whose arguments were checked (by :func:`recording`, or
    :func:`attncoda.capture.capture` for a wrapper): the model, and the sink a recording can
    find, checked here.

    Raises
    ------
    AttncodaError
        Sink ``"auto"``; a model in training mode or whose attention cannot be routed; a
        model already inside a recording.
    """
    if plan.sink.kind == "auto":
        raise AttncodaError(
            "sink 'auto' needs a first pass over the documents, which a recording does not "
            "run: give 'first', positions or tokens"
        )
    kind = kind_of(model)
    hf = live_model(model)
    if hf.training:
        raise AttncodaError(
            f"{type(hf).__name__} is in training mode: recording runs in eval mode only "
            f"(call model.eval())"
        )
    if is_recorded(hf):
        raise AttncodaError(
            f"{type(hf).__name__} is already being recorded: leave the first recording "
            f"block before opening another on the same model"
        )
    rec = Recording(model, plan)
    with contextlib.ExitStack() as stack:
        if kind == "bridge":
            # The bridge's components compute attention themselves: their score hooks,
            # not the attention function, feed the recorder.
            stack.enter_context(marked(hf))
            rec._hook_scores()
            stack.callback(rec._unhook_scores)
        else:
            stack.enter_context(routed(hf, None, method=plan.method, recording=rec))
        target = _layers_module(hf)
        before = target.register_forward_pre_hook(rec._before, with_kwargs=True)
        stack.callback(before.remove)
        after = target.register_forward_hook(rec._after, with_kwargs=True, always_call=True)
        stack.callback(after.remove)
        yield rec
