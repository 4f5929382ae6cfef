"""The training loop of ``train-tiny``: model, optimiser, schedule, evaluation, checkpoints.

- **Model**: GPT-NeoX (rotary, parallel residual: Pythia's architecture) of the config's
  size, with eager attention, initialised under ``torch.manual_seed(seed)``.
- **Optimiser**: AdamW (betas 0.9/0.95, weight decay on matrices only), linear warmup then
  cosine decay to a tenth of the peak rate, gradient clipping at 1.0: Pythia's recipe.
- **Determinism**: run inside :func:`deterministic`, in the pinned worker of
  :mod:`attncoda.training.pinned`, the same config gives bit-identical checkpoints on every
  x86-64 CPU with the same library versions: the weights are initialised in a forked RNG,
  windows are drawn from a generator seeded with ``seed``, deterministic algorithms are on,
  one thread runs, and the kernels are pinned.

At every step of :func:`attncoda.training.checkpoints.checkpoint_steps` the model is
evaluated (mean next-token cross-entropy in nats, per-head attention on ``<|bos|>``) and
saved.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attncoda._devices import to_input_device
from attncoda.data.tasks import bos_attention
from attncoda.training.checkpoints import (
    TrainResult,
    checkpoint_steps,
    save_checkpoint,
    task_fields,
    write_series,
)
from attncoda.training.config import SIZES, ResolvedTrainConfig
from attncoda.training.data import N_ATTENTION_WINDOWS, TrainData, corpus_info, with_bos

__all__ = ["deterministic", "learning_rate", "train"]


@contextmanager
def deterministic(threads: int) -> Iterator[None]:
    """Deterministic algorithms, ``threads`` torch threads and a forked CPU RNG inside the
    block; the caller's settings and RNG state are restored afterwards."""
    old_threads = torch.get_num_threads()
    old_deterministic = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_deterministic, warn_only=old_warn)


def train(
    out: Path,
    tokenizer: Any,
    data: TrainData,
    config: ResolvedTrainConfig,
    record: dict[str, Any],
    report: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train a fresh model on ``data`` and save every checkpoint of the schedule in ``out``.

    Parameters
    ----------
    out : Path
        The series folder (it exists and holds nothing in the way).
    tokenizer : transformers.PreTrainedTokenizerFast
        Saved with every checkpoint; its BOS, EOS and pad ids go into the model config.
    data : TrainData
    config : ResolvedTrainConfig
        The run (:meth:`attncoda.training.config.TrainConfig.resolved`).
    record : dict
        The JSON config the checkpoints and the series file record.
    report : callable, optional
        Called after each optimiser step with the steps done and the running training loss
        (nats; an exponential mean).

    Returns
    -------
    TrainResult
    """
    model = _fresh_model(tokenizer, config)
    optimizer = _optimizer(model, config)
    sampler: Any = (
        torch.Generator().manual_seed(config.seed)
        if data.task is None
        else np.random.default_rng(config.seed)
    )
    schedule = checkpoint_steps(config.steps)
    corpus = (
        {"corpus_sha256": record["corpus_sha256"], "corpus": corpus_info(data)}
        if data.task is None
        else {}
    )
    saved = {"seed": config.seed, "config": record, **corpus}  # what every checkpoint records
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    running = float("nan")
    for step in range(config.steps + 1):
        if step == schedule[len(records)]:
            evaluated = _evaluate(model, data, step)
            save_checkpoint(out, step, model, tokenizer, {**evaluated, **saved})
            records.append(evaluated)
        if step == config.steps:
            break
        loss = _train_step(model, optimizer, data, sampler, step, config)
        running = loss if math.isnan(running) else 0.95 * running + 0.05 * loss
        if report is not None:
            report(step + 1, running)
    return _series(out, record, records, time.perf_counter() - start, config.steps)


def _fresh_model(tokenizer: Any, config: ResolvedTrainConfig) -> Any:
    """A GPT-NeoX of the config's size for ``tokenizer``'s vocabulary and special ids,
    initialised under ``torch.manual_seed(config.seed)``."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    layers, hidden, heads = SIZES[config.size]
    model_config = GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=config.window,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        use_parallel_residual=True,
    )
    torch.manual_seed(config.seed)
    # Eager attention: deterministic, and it returns the attention weights the checkpoint
    # statistics need; at these widths and lengths attention is a small share of the cost.
    return GPTNeoXForCausalLM._from_config(model_config, attn_implementation="eager")


def _series(
    out: Path, record: dict[str, Any], records: list[dict[str, Any]], seconds: float, steps: int
) -> TrainResult:
    """The :class:`TrainResult` of ``steps`` optimiser steps in ``seconds``, whose
    checkpoints' evaluations are ``records``; written with the series file in ``out``."""
    result = TrainResult(
        out_dir=out,
        steps=tuple(r["step"] for r in records),
        checkpoints=tuple(out / f"step{r['step']}" for r in records),
        train_loss=tuple(r["train_loss"] for r in records),
        val_loss=tuple(r["val_loss"] for r in records),
        first_token_attention=tuple(tuple(r["first_token_attention"]) for r in records),
        seconds=seconds,
        steps_per_second=steps / seconds,
        **task_fields(record, records),
    )
    write_series(out, record, records, result)
    return result


def _optimizer(model: Any, config: ResolvedTrainConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": config.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=config.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )


def learning_rate(step: int, config: ResolvedTrainConfig) -> float:
    """The learning rate of optimiser step ``step`` (from 0): linear warmup over
    ``config.warmup`` steps to ``config.lr``, then cosine decay to a tenth of it."""
    peak, warmup, total = config.lr, config.warmup, config.steps
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _train_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    data: TrainData,
    sampler: Any,
    step: int,
    config: ResolvedTrainConfig,
) -> float:
    if data.task is not None:
        batch = torch.from_numpy(data.task.sample(config.batch_size, sampler))
    else:
        body = config.window - 1
        n_starts = len(data.train_stream) - body + 1
        starts = torch.randint(n_starts, (config.batch_size,), generator=sampler)
        offsets = torch.arange(body)
        batch = with_bos(data.train_stream[starts[:, None] + offsets], model.config.bos_token_id)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(step, config)
    model.train()
    (batch,) = to_input_device(model, batch)
    loss = model(input_ids=batch, labels=batch).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach())


@torch.no_grad()
def _evaluate(model: Any, data: TrainData, step: int) -> dict[str, Any]:
    model.eval()
    train_loss = _mean_loss(model, data.train_eval)
    val_loss = _mean_loss(model, data.val)
    heads = _first_token_attention(model, data.val[:N_ATTENTION_WINDOWS])
    record = {
        "step": step,
        "train_loss": train_loss,
        "val_loss": val_loss,
        "first_token_attention": [sum(row) / len(row) for row in heads],
        "first_token_attention_per_head": heads,
    }
    if data.task is not None:
        (val,) = to_input_device(model, data.val)
        attentions = model(input_ids=val, output_attentions=True).attentions
        trigger, non_trigger = bos_attention(
            attentions, data.task.trigger_queries(data.val.numpy())
        )
        record["bos_attention_trigger"] = trigger
        record["bos_attention_non_trigger"] = non_trigger
    return record


def _mean_loss(model: Any, windows: torch.Tensor) -> float:
    # transformers' own ``labels=`` loss (its cross-entropy, not a gather and logsumexp), as
    # in every recorded series. Every window has the same length, so the mean over batches
    # of 16 is the token mean.
    (windows,) = to_input_device(model, windows)
    losses = [
        float(model(input_ids=chunk, labels=chunk).loss) * chunk.shape[0]
        for chunk in windows.split(16)
    ]
    return sum(losses) / windows.shape[0]


def _first_token_attention(model: Any, windows: torch.Tensor) -> list[list[float]]:
    """Mean attention on key 0 per ``[layer][head]``, over windows and queries ``1..n-1``."""
    (windows,) = to_input_device(model, windows)
    attentions = model(input_ids=windows, output_attentions=True).attentions
    # each: (batch, head, query_pos, key_pos); query 0 can only attend to key 0: left out.
    return [a[:, :, 1:, 0].mean(dim=(0, 2)).tolist() for a in attentions]
