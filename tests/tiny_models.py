"""Tiny seeded models of every family the tests route, built from configs (no weights to
download). Shared by the capture, ablation and prune tests."""

from __future__ import annotations

import torch
import transformers
from packaging.version import Version

VOCAB = 120
#: Families whose model class routes its attention through transformers' AttentionInterface
#: only from a transformers release on (Falcon: 5.25); before it capture reads them through
#: eager outputs.
ROUTES_FROM = {"falcon": "5.25"}


def routes_here(family: str) -> bool:
    """Whether ``family``'s model class uses the AttentionInterface in the installed
    transformers (:data:`ROUTES_FROM`; a family not listed there: by its list in the test)."""
    since = ROUTES_FROM.get(family)
    return since is None or Version(transformers.__version__) >= Version(since)
#: Families built as bare encoders (AutoModel); the others as causal language models.
ENCODERS = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "mpnet")


def _configs(positions: int) -> dict:
    common = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=positions,
    )
    gqa = dict(common, num_key_value_heads=2)
    gpt2 = dict(
        vocab_size=VOCAB,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=positions,
        bos_token_id=1,
        eos_token_id=1,
    )
    return {
        "gpt2": lambda: transformers.GPT2Config(**gpt2),
        "gpt2-upcast": lambda: transformers.GPT2Config(
            **gpt2, reorder_and_upcast_attn=True, scale_attn_by_inverse_layer_idx=True
        ),
        "gpt_neox": lambda: transformers.GPTNeoXConfig(**common),
        "opt": lambda: transformers.OPTConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            ffn_dim=64,
            max_position_embeddings=positions,
            word_embed_proj_dim=32,
        ),
        "llama": lambda: transformers.LlamaConfig(**gqa, bos_token_id=1),
        "qwen2": lambda: transformers.Qwen2Config(**gqa),
        "mistral": lambda: transformers.MistralConfig(**gqa),
        "bert": lambda: transformers.BertConfig(**common),
        "bloom": lambda: transformers.BloomConfig(
            vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4
        ),
        "falcon": lambda: transformers.FalconConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            new_decoder_architecture=False,
            alibi=False,
        ),
        "qwen3": lambda: transformers.Qwen3Config(**gqa, head_dim=8),
        "phi3": lambda: transformers.Phi3Config(**gqa, pad_token_id=0),
        "phi": lambda: transformers.PhiConfig(**common),
        "gemma": lambda: transformers.GemmaConfig(**gqa, head_dim=8),
        # Soft-capped logits and sliding-window layers, as in Gemma 2.
        "gemma2": lambda: transformers.Gemma2Config(
            **gqa, head_dim=8, sliding_window=4, attn_logit_softcapping=2.0
        ),
        "gemma3": lambda: transformers.Gemma3TextConfig(
            **gqa,
            head_dim=8,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
        ),
        # Learned per-head sink logits (s_aux) and a sliding-window layer, as in GPT-OSS.
        "gpt_oss": lambda: transformers.GptOssConfig(
            **gqa,
            head_dim=8,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
        ),
        "olmo2": lambda: transformers.Olmo2Config(**gqa),
        "starcoder2": lambda: transformers.Starcoder2Config(**gqa),
        "granite": lambda: transformers.GraniteConfig(**gqa),
        "stablelm": lambda: transformers.StableLmConfig(**gqa),
        "mixtral": lambda: transformers.MixtralConfig(
            **gqa, num_local_experts=4, num_experts_per_tok=2
        ),
        "gptj": lambda: transformers.GPTJConfig(
            vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=positions, rotary_dim=4
        ),
        "roberta": lambda: transformers.RobertaConfig(**common),
        "xlm-roberta": lambda: transformers.XLMRobertaConfig(**common),
        "camembert": lambda: transformers.CamembertConfig(**common),
        "electra": lambda: transformers.ElectraConfig(**common, embedding_size=32),
        "distilbert": lambda: transformers.DistilBertConfig(
            vocab_size=VOCAB,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=64,
            max_position_embeddings=positions,
        ),
        "mpnet": lambda: transformers.MPNetConfig(**common),
        "gpt_neo": lambda: transformers.GPTNeoConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_layers=2,
            num_heads=4,
            attention_types=[[["global", "local"], 1]],
            window_size=4,
            max_position_embeddings=positions,
        ),
    }


def tiny(
    family: str,
    dtype=torch.float32,
    *,
    seed: int = 0,
    positions: int = 2048,
    eager: bool = False,
    **extra,
):
    """A seeded 2-layer, 4-head model of ``family`` in eval mode (GQA with 2 KV heads for
    the families built from ``gqa``); ``extra`` sets config fields; ``eager`` builds it with eager
    attention (the reference implementation) instead of the library default."""
    config = _configs(positions)[family]()
    for key, value in extra.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    kwargs = {"attn_implementation": "eager"} if eager else {}
    auto = transformers.AutoModel if family in ENCODERS else transformers.AutoModelForCausalLM
    model = auto.from_config(config, **kwargs)
    return model.to(dtype).eval()
