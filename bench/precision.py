"""What a half-precision forward costs and moves, per layer: ``python bench/precision.py
[--models smollm2,gemma3] [--dtype bfloat16] [--length 256] [--windows 3] [--threads T]``.

For each model, loaded in ``--dtype``, over the first ``--windows`` corpus windows of
``--length`` tokens (BOS first where the tokenizer prepends one), every layer:

1. *Eager patterns.* One eager forward with ``output_attentions``. Each layer's ``query`` and
   ``key`` are grabbed on the way by an attention function registered here, which runs the
   family's own eager function and returns what it returns. The entropy and sink mass (key 0)
   computed in float64 from eager's returned probabilities (what a TransformerLens or nnsight
   user reads) are compared with float64 statistics of the layer's own q and k.
2. *attncoda.* ``capture(method="exact")`` of the same windows runs eager's forward bit for
   bit (one query block), so its statistics are compared with the same float64 reference.
   ``method="fast"`` hands the model its own output, so its later layers see another
   forward: its difference from the reference is the drift of that forward plus its own
   error (below 1e-5 nats).
3. *Drift between forwards.* The float64 statistics of each layer's own q and k in a
   forward with transformers' SDPA attention, and in the float32 model's eager forward,
   against the eager forward's: how far the model's own rounding moves each layer.

Prints, per layer and comparison, the largest ``|dH|`` (nats) and ``|ds|`` over every row,
head and window, and the largest move of a head's mean entropy (over its rows and windows:
what tables of head means, and differences between heads, read), then the largest over
layers, with the machine. Nothing is asserted; docs/how-to/precision.md quotes the figures
(bench/RESULTS.md records them).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

GRAB = "attncoda_bench_grab"
COLUMNS = ("patterns", "exact", "fast", "sdpa", "float32")


def float64_statistics(query, key, scaling, mask, kw):
    """float64 ``(entropy, sink_mass)`` ``(batch, head, query_pos)`` from one layer's own q
    and k: soft-cap, mask (eager's additive or SDPA's boolean; None is causal) and learned
    sinks as the family applies them. The sink is key 0."""
    import torch

    q = query.to(torch.float64)
    k = key.to(torch.float64).repeat_interleave(query.shape[1] // key.shape[1], 1)
    z = q @ k.transpose(-1, -2) * scaling
    if kw.get("softcap") is not None:
        z = torch.tanh(z / kw["softcap"]) * kw["softcap"]
    n_q, n_k = z.shape[-2:]
    if mask is None:
        visible = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)[None, None]
    elif mask.dtype == torch.bool:
        visible = mask
    else:
        visible = mask > torch.finfo(mask.dtype).min / 2
    z = z.masked_fill(~visible, -math.inf)
    if kw.get("s_aux") is not None:
        sinks = kw["s_aux"].detach().to(torch.float64).reshape(1, -1, 1, 1)
        z = torch.cat([z, sinks.expand(z.shape[0], -1, n_q, 1)], -1)
    log_p = torch.log_softmax(z, -1)
    p = log_p.exp()
    entropy = -torch.where(p > 0, p * log_p, 0.0).sum(-1)
    return entropy, p[..., 0]


def pattern_statistics(probs):
    """float64 ``(entropy, sink_mass)`` of probabilities as a model returns them."""
    import torch

    p = probs.to(torch.float64)
    logs = torch.log(torch.where(p > 0, p, 1.0))
    return -(p * logs).sum(-1), p[..., 0]


def grabbing(found: list, inner):
    """An attention function that runs ``inner`` (``None``: the family's own eager function)
    and appends the float64 statistics of the layer's own q and k to ``found``."""

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        scale = module.head_dim**-0.5 if scaling is None else scaling
        found.append(float64_statistics(query, key, scale, attention_mask, kw))
        run = inner or sys.modules[type(module).__module__].eager_attention_forward
        return run(module, query, key, value, attention_mask, scaling=scaling, **kw)

    return attention


def run_grabbed(model, ids, implementation: str, patterns: bool = False):
    """One forward with ``implementation`` (``"eager"`` or ``"sdpa"``), grabbing each layer's
    float64 statistics; with ``patterns``, eager's returned probabilities' statistics too."""
    import torch
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import eager_mask, sdpa_mask

    found: list = []
    inner = None if implementation == "eager" else sdpa_attention_forward
    AttentionInterface.register(GRAB, grabbing(found, inner))
    AttentionMaskInterface.register(GRAB, eager_mask if implementation == "eager" else sdpa_mask)
    previous = model.config._attn_implementation
    model.set_attn_implementation(GRAB)
    try:
        with torch.inference_mode():
            out = model(torch.as_tensor(ids), output_attentions=patterns)
    finally:
        model.set_attn_implementation(previous)
    read = [pattern_statistics(a) for a in out.attentions] if patterns else None
    return found, read


def moved(a, b):
    """``a - b`` as float64 ``(batch, head, query_pos)``."""
    import torch

    return torch.as_tensor(a, dtype=torch.float64) - b


def measure(spec: str, dtype: str, length: int, windows: int) -> tuple[list[dict], float]:
    """Per layer and comparison, ``[largest |dH|, largest |ds|, summed dH per head, rows]``;
    and the seconds."""
    import numpy as np

    from attncoda.capture import capture
    from attncoda.models.load import load_model

    start = time.perf_counter()
    model, tokenizer, _ = load_model(spec, dtype=dtype)
    reference, _, _ = load_model(spec, dtype="float32")
    found, _ = corpus_rows(tokenizer, length, windows)
    ids = np.asarray(found)
    rows: list[dict] = []
    for window in ids:
        one = window[None]
        eager, patterns = run_grabbed(model, one, "eager", patterns=True)
        sdpa, _ = run_grabbed(model, one, "sdpa")
        full, _ = run_grabbed(reference, one, "eager")
        exact = capture(model, one, record_rows="none")
        fast = capture(model, one, record_rows="none", method="fast")
        for layer, (h, s) in enumerate(eager):
            got = {
                "patterns": patterns[layer],
                "exact": (exact.entropy[:, layer], exact.sink_mass[:, layer]),
                "fast": (fast.entropy[:, layer], fast.sink_mass[:, layer]),
                "sdpa": sdpa[layer],
                "float32": full[layer],
            }
            if len(rows) <= layer:
                rows.append({name: [0.0, 0.0, 0.0, 0] for name in COLUMNS})
            for name, (gh, gs) in got.items():
                worst = rows[layer][name]
                dh = moved(gh, h)
                worst[0] = max(worst[0], float(dh.abs().max()))
                worst[1] = max(worst[1], float(moved(gs, s).abs().max()))
                worst[2] = worst[2] + dh.sum((0, 2))  # per head
                worst[3] += dh.shape[0] * dh.shape[2]
    return rows, time.perf_counter() - start


def corpus_rows(tokenizer, length: int, windows: int):
    """``windows`` corpus windows of ``length`` tokens, BOS first where the tokenizer has one."""
    from attncoda.run.captured import corpus_windows

    first = tokenizer("a")["input_ids"][0]
    bos = first if first == tokenizer.bos_token_id else None
    body = length - (bos is not None)
    found, facts = corpus_windows(tokenizer, text=None, max_tokens=body, docs=windows)
    rows = [([bos] if bos is not None else []) + list(w.input_ids) for w in found]
    return rows, facts


def report(spec: str, rows: list[dict]) -> list[str]:
    """Per layer: ``largest |dH| / largest |ds| / largest |d mean H| of a head``."""
    head = " ".join(f"{name:>26}" for name in COLUMNS)
    lines = [f"{spec}: |dH| nats / |ds| of a row, |d mean H| of a head, per layer", f"layer {head}"]
    worst = {n: [0.0, 0.0, 0.0] for n in COLUMNS}
    for layer, row in enumerate(rows):
        cells = []
        for n in COLUMNS:
            dh, ds, summed, count = row[n]
            mean = float((summed / count).abs().max()) if count else 0.0
            cells.append(f"{dh:8.2e}/{ds:8.2e}/{mean:8.2e}")
            worst[n] = [max(worst[n][0], dh), max(worst[n][1], ds), max(worst[n][2], mean)]
        lines.append(f"{layer:5d} {' '.join(cells)}")
    cells = " ".join(f"{w[0]:8.2e}/{w[1]:8.2e}/{w[2]:8.2e}" for w in worst.values())
    lines.append(f"  all {cells}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2,gemma3")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).parent))
    from _machine import machine

    print(
        f"# {machine()}; torch {torch.__version__}; {args.dtype}, L = {args.length}, "
        f"{args.windows} corpus windows"
    )
    print("# columns: patterns = eager output_attentions vs float64 of the layer's own q, k;")
    print("#   exact, fast = attncoda's captures vs the same; sdpa, float32 = float64 of the")
    print("#   layer's own q, k in an SDPA forward / the float32 model's eager forward")
    for spec in args.models.split(","):
        rows, seconds = measure(spec, args.dtype, args.length, args.windows)
        print("\n".join(report(spec, rows)))
        print(f"# {spec}: {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
