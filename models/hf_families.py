"""The decoder families a Hugging Face ``config.json`` may name, each
described by its parts: a new family that combines known parts is one row
of :data:`FAMILIES`.

A :class:`Family` says which attention it has (grouped-query, or DeepSeek's
multi-head latent attention), whether queries and keys are normalised (per
head, over the whole projection, or an L2 norm without weights), where its
norms sit (before each sub-layer, after it, or both: "sandwich"), which
biases it has and under which key, its norms' and feed-forward's kind,
whether attention and feed-forward run side by side (a parallel block),
the keys of its dropouts and scale factors, how its layers take
sliding-window or chunked attention when the config lists no
``layer_types``, and for a mixture of experts which layers have experts,
the key of an expert's width, its shared experts and their gate, and
whether experts and the router have biases.  Its ``defaults`` are the
config class's own for the keys a released config may leave out.  ``text``: a multimodal config whose
``text_config`` holds the decoder (Llama 4, Gemma 3).

The keys read are the ones ``transformers``' config classes use; the
parameter counts equal those of ``transformers``' models built from the
same configs (``tests/test_torch_hf_families.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["Family", "FAMILIES", "layer_windows", "moe_layers"]


@dataclass(frozen=True)
class Family:
    """One ``model_type``'s parts (see the module docstring).  A bias is
    the key that switches it on (``attention_bias``) or a fixed value."""

    attention: str = "gqa"  # "gqa" (grouped-query or multi-head) or "mla" (multi-head latent attention)
    qk_norm: str = ""  # "", "head" (one scale per head width), "head_layer" (a LayerNorm over the head width, scale
    #                    and shift: Phi), "proj" (over every head), "l2" (no weights)
    qk_norm_key: str = ""  # the key that switches the q/k norm on ("": always there)
    norms: str = "pre"  # "pre", "post" (OLMo 2), "sandwich" (Gemma: before and after each sub-layer)
    qkv_bias: str | bool = "attention_bias"
    out_bias: str | bool = "attention_bias"
    mlp_bias: str | bool = "mlp_bias"
    tied: bool = False  # tie_word_embeddings when the config does not say
    windows: str = ""  # without layer_types: "" none, "all" (every layer slides when sliding_window is set),
    #                    "qwen" (from max_window_layers on, with use_sliding_window), "alternate" (even layers),
    #                    "pattern" (all but every sliding_window_pattern-th), "chunked" (Llama 4's rotary layers)
    moe: str = ""  # which layers have experts: "" none, "every", "first_dense" (after first_k_dense_replace),
    #                "sparse_step" (decoder_sparse_step, but mlp_only_layers), "interleave" (moe_layers, or every
    #                interleave_moe_layer_step-th)
    expert_ffn: str = "moe_intermediate_size"  # the key of an expert's hidden width
    dense_ffn: str = "intermediate_size"  # the key of a dense layer's hidden width
    shared: str = ""  # shared experts: "" none, "count" (n_shared_experts experts' widths), "size"
    #                   (shared_expert_intermediate_size), "ffn" (one of an expert's width)
    shared_gate: bool = False  # a sigmoid gate of one unit on the shared expert (Qwen2-MoE)
    expert_bias: bool = False  # experts' projections have biases (gpt-oss)
    router_bias: bool = False
    sinks: bool = False  # one learned logit per head joins each softmax (gpt-oss)
    norm: str = "rms"  # the norms: "rms" (RMSNorm), "layer" (LayerNorm, scale and shift), "scale" (LayerNorm with a
    #                    scale alone: Cohere), "plain" (LayerNorm without weights: OLMo)
    mlp: str = "gated"  # the feed-forward: "gated" (act(gate) * up, down) or "plain" (act(up), down)
    parallel: str = ""  # attention and feed-forward side by side on the same input, their outputs both added to it:
    #                     "" (one after the other), "one" (one norm feeds both: GPT-J, Phi, Cohere), "two" (each its
    #                     own norm: GPT-NeoX)
    parallel_key: str = ""  # the key that switches ``parallel`` on ("": always)
    head_bias: bool = False  # the head (lm_head) has a bias (Phi)
    # the key of a factor each residual branch is scaled by (Granite: residual_multiplier), and of one the logits are
    # (Granite: logits_scaling; Cohere: logit_scale): a pass over the tensor whatever the factor, as the modules run it
    residual_scale: str = ""
    logit_scale: str = ""
    resid_dropout: str = ""  # the key of a dropout on each residual branch ("": none; Seed-OSS: residual_dropout)
    embed_dropout: str = ""  # the key of a dropout on the embeddings ("": none)
    embed_scale: str = ""  # the key of a factor the embeddings are scaled by (Granite: embedding_multiplier)
    text: str = ""  # the decoder is the config's text_config, of this model_type
    defaults: dict = field(default_factory=dict)
    absent: dict = field(default_factory=dict)  # the sizes a config leaves out (not null: derived, as the classes do)


_DEEPSEEK = dict(attention="mla", moe="first_dense", shared="count")
_QWEN_MOE = dict(moe="sparse_step", windows="qwen", defaults={"decoder_sparse_step": 1})

#: every family read, by model_type
FAMILIES: dict[str, Family] = {
    "gpt2": Family(),  # read by its own keys (n_embd, n_layer ...): LayerNorm, learned positions, GELU
    "llama": Family(),
    "mistral": Family(windows="all"),
    "mixtral": Family(windows="all", moe="every", expert_ffn="intermediate_size"),
    "qwen2": Family(qkv_bias=True, out_bias=False, windows="qwen"),
    "qwen3": Family(qk_norm="head", windows="qwen"),
    "qwen2_moe": Family(qkv_bias="qkv_bias", out_bias=False, shared="size", shared_gate=True,
                        **{**_QWEN_MOE, "defaults": {"decoder_sparse_step": 1, "qkv_bias": True}}),
    "qwen3_moe": Family(qk_norm="head", **_QWEN_MOE),
    "phi3": Family(windows="all"),
    "olmo2": Family(qk_norm="proj", norms="post"),
    "gemma2": Family(norms="sandwich", windows="alternate", tied=True),
    "gemma3_text": Family(norms="sandwich", qk_norm="head", windows="pattern", tied=True,  # released text_configs
                          defaults={"sliding_window_pattern": 6, "vocab_size": 262208, "head_dim": 256,  # omit some
                                    "sliding_window": 4096, "max_position_embeddings": 131072}),
    "gemma3": Family(text="gemma3_text"),
    "granitemoe": Family(moe="every", expert_ffn="intermediate_size", residual_scale="residual_multiplier",
                         logit_scale="logits_scaling", embed_scale="embedding_multiplier"),
    "glm4_moe": Family(out_bias=False, qk_norm="head", qk_norm_key="use_qk_norm", moe="first_dense", shared="count",
                       defaults={"first_k_dense_replace": 1}),
    "deepseek_v2": Family(**_DEEPSEEK, defaults={"first_k_dense_replace": 0}),
    "deepseek_v3": Family(**_DEEPSEEK, defaults={"first_k_dense_replace": 3, "n_shared_experts": 1}),
    "gpt_oss": Family(windows="alternate", moe="every", expert_ffn="intermediate_size", expert_bias=True,
                      router_bias=True, sinks=True, defaults={"attention_bias": True}),
    "llama4_text": Family(qk_norm="l2", qk_norm_key="use_qk_norm", windows="chunked", moe="interleave",
                          expert_ffn="intermediate_size", dense_ffn="intermediate_size_mlp", shared="ffn",
                          defaults={"interleave_moe_layer_step": 1, "no_rope_layer_interval": 4,
                                    "use_qk_norm": True}),
    "llama4": Family(text="llama4_text"),
    "gemma": Family(tied=True),
    "granite": Family(residual_scale="residual_multiplier", logit_scale="logits_scaling",
                      embed_scale="embedding_multiplier"),
    "helium": Family(out_bias=False),
    "seed_oss": Family(out_bias="attention_out_bias", resid_dropout="residual_dropout",
                       defaults={"attention_bias": True}),
    "glm": Family(out_bias=False, defaults={"attention_bias": True}),
    "glm4": Family(norms="sandwich", out_bias=False, defaults={"attention_bias": True}),
    "olmoe": Family(qk_norm="proj", moe="every", expert_ffn="intermediate_size"),
    "exaone4": Family(qk_norm="head", norms="post", windows="pattern",
                      defaults={"sliding_window_pattern": 4, "sliding_window": 4096}),
    "smollm3": Family(tied=True),
    "ernie4_5": Family(qkv_bias="use_bias", out_bias="use_bias", mlp_bias="use_bias", tied=True),
    "gpt_neox": Family(norm="layer", mlp="plain", mlp_bias=True, parallel="two", parallel_key="use_parallel_residual",
                       resid_dropout="hidden_dropout", embed_dropout="hidden_dropout",
                       defaults={"attention_bias": True, "use_parallel_residual": True}),
    "phi": Family(norm="layer", mlp="plain", qkv_bias=True, out_bias=True, mlp_bias=True, parallel="one",
                  head_bias=True, qk_norm="head_layer", qk_norm_key="qk_layernorm", resid_dropout="resid_pdrop",
                  embed_dropout="embd_pdrop"),
    "starcoder2": Family(norm="layer", mlp="plain", qkv_bias="use_bias", out_bias="use_bias", mlp_bias="use_bias",
                         windows="all", tied=True, resid_dropout="residual_dropout", embed_dropout="embedding_dropout",
                         defaults={"use_bias": True}),
    # its qk_layernorm: a LayerNorm of each head's own weights (taken as one over every head: the same weights)
    "stablelm": Family(norm="layer", qkv_bias="use_qkv_bias", out_bias=False, parallel="one",
                       parallel_key="use_parallel_residual", qk_norm="proj", qk_norm_key="qk_layernorm"),
    # its q/k norms: a LayerNorm of each head's own weights (taken as one over every head: the same weights)
    "cohere": Family(norm="scale", parallel="one", qk_norm="proj", qk_norm_key="use_qk_norm", tied=True,
                     logit_scale="logit_scale"),
    "olmo": Family(norm="plain"),
}

#: the sizes a released config may leave out, as ``transformers``' config classes (5.24) default them where they
#: set a number (a key given as null is derived, as the classes derive it): the key/value heads (where they set
#: none, the heads, as here), the head width (where they set none, the width over the heads) and, in Gemma 3's
#: text config, the heads (its released 4B model leaves them out)
_GEMMA3 = {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256}
_CLASS_SIZES = {
    "mistral": {"num_key_value_heads": 8}, "mixtral": {"num_key_value_heads": 8},
    "qwen2": {"num_key_value_heads": 32}, "qwen3": {"num_key_value_heads": 32, "head_dim": 128},
    "qwen2_moe": {"num_key_value_heads": 16}, "qwen3_moe": {"num_key_value_heads": 4},
    "gemma": {"num_key_value_heads": 16, "head_dim": 256}, "gemma2": {"num_key_value_heads": 4, "head_dim": 256},
    "gemma3_text": _GEMMA3, "gemma3": _GEMMA3, "glm4_moe": {"num_key_value_heads": 8},
    "gpt_oss": {"num_key_value_heads": 8, "head_dim": 64}, "llama4_text": {"num_key_value_heads": 8, "head_dim": 128},
    "llama4": {"num_key_value_heads": 8, "head_dim": 128}, "helium": {"num_key_value_heads": 20, "head_dim": 128},
    "seed_oss": {"num_key_value_heads": 8, "head_dim": 128}, "glm": {"num_key_value_heads": 2, "head_dim": 128},
    "glm4": {"num_key_value_heads": 2, "head_dim": 128}, "exaone4": {"num_key_value_heads": 32},
    "smollm3": {"num_key_value_heads": 4}, "ernie4_5": {"num_key_value_heads": 2, "head_dim": 128},
    "starcoder2": {"num_key_value_heads": 2}, "stablelm": {"num_key_value_heads": 32},
}
FAMILIES = {name: replace(f, absent=_CLASS_SIZES.get(name, {})) for name, f in FAMILIES.items()}


def layer_windows(family: Family, layers: int, get) -> list[str]:
    """Per layer, ``full``, ``sliding`` or ``chunked`` attention, from the
    config's ``layer_types`` or, without them, by the family's rule;
    ``get(key, default)`` reads the config."""
    types = get("layer_types", None)
    if types is not None:
        return [{"sliding_attention": "sliding", "chunked_attention": "chunked"}.get(t, "full") for t in types]
    rule = family.windows
    if rule == "all":
        return ["sliding"] * layers
    if rule == "qwen":
        on = get("use_sliding_window", False)
        first = get("max_window_layers", layers)
        return ["sliding" if on and i >= first else "full" for i in range(layers)]
    if rule == "alternate":
        return ["sliding" if i % 2 == 0 else "full" for i in range(layers)]
    if rule == "pattern":
        every = get("sliding_window_pattern", None) or get("_sliding_window_pattern", None)
        return ["sliding" if (i + 1) % every else "full" for i in range(layers)]
    if rule == "chunked":
        rope = get("no_rope_layers", None)
        if rope is None:
            every = get("no_rope_layer_interval", 4)
            rope = [int((i + 1) % every != 0) for i in range(layers)]
        return ["chunked" if r else "full" for r in rope]
    return ["full"] * layers


def moe_layers(family: Family, layers: int, get) -> list[bool]:
    """Per layer, whether it has experts (see :class:`Family`)."""
    rule = family.moe
    if rule == "every":
        return [True] * layers
    if rule == "first_dense":
        first = get("first_k_dense_replace", 0)
        return [i >= first for i in range(layers)]
    if rule == "sparse_step":
        step, dense = get("decoder_sparse_step", 1), set(get("mlp_only_layers", None) or ())
        return [i not in dense and (i + 1) % step == 0 for i in range(layers)]
    if rule == "interleave":
        listed = get("moe_layers", None)
        if listed is None:
            step = get("interleave_moe_layer_step", 1)
            listed = range(step - 1, layers, step)
        chosen = set(listed)
        return [i in chosen for i in range(layers)]
    return [False] * layers
