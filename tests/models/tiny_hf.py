"""Tiny models and a word-level tokenizer built from configs, for the model-loading tests."""

from __future__ import annotations

import torch
import transformers

IDS = [[3, 5, 7, 9, 4, 8, 6]]


def tiny_tokenizer():
    from tokenizers import Tokenizer, pre_tokenizers, processors
    from tokenizers import models as tok_models

    words = ["[UNK]", "[BOS]", "[PAD]", *"the river ran under old bridge hello world".split()]
    inner = Tokenizer(tok_models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    inner.pre_tokenizer = pre_tokenizers.Whitespace()
    inner.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=inner, bos_token="[BOS]", unk_token="[UNK]", pad_token="[PAD]"
    )


def tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=1,
    )
    return eager_model(transformers.AutoModelForCausalLM, config)


def eager_model(auto, config):
    # The reference runs eager attention too: sdpa rounds differently, and the comparisons
    # below are exact.
    return auto.from_config(config, attn_implementation="eager").eval()


def logits_of(model, ids=IDS):
    with torch.no_grad():
        out = model(torch.tensor(ids))
    return out.logits if hasattr(out, "logits") else out.last_hidden_state
