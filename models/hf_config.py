"""Decoder-only language models from a Hugging Face ``config.json``.

The families of :data:`models.hf_families.FAMILIES` (the config's
``model_type``: GPT-2, Llama, Mistral, Mixtral, Qwen 2 and 3 and their
mixtures of experts, Phi-3, OLMo 2 and OLMoE, Gemma 1, 2 and 3, Granite
and Granite MoE, GLM, GLM-4 and GLM-4 MoE, DeepSeek V2 and V3, gpt-oss,
Llama 4, Helium, Seed-OSS, EXAONE 4, SmolLM3, ERNIE 4.5, GPT-NeoX, Phi,
StarCoder 2, StableLM, Command R, OLMo), read from the keys their configs
use, without downloading anything and without the ``transformers``
package; :class:`DecoderConfig` is what the graph needs, checked, and
``models/decoder.py`` builds the graph from it.  Letters:

    b batch            s positions (queries)   t positions (keys)
    e width            h heads                 d width of a head (never split)
    g key/value heads and r query heads per key/value head (grouped-query
      attention, when the config has fewer key/value heads than heads)
    f feed-forward hidden units   v vocabulary   j a stack of fused projections
    o the router's experts   x experts   k a token's chosen experts
    q, l the low ranks of multi-head latent attention's queries and keys

The weights are those of the model: the parameter count equals that of
``transformers``' model built from the same config.  The sequence length
defaults to 2048, or the config's limit when smaller; a longer one is
planned as asked (a learned position table keeps its rows, read by
position ids), with a note in the graph's ``notes`` that the report prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from errors import SettingError, printable, shown
from models.files import ModelFileError, file_identity
from models.hf_families import FAMILIES as FAMILY_PARTS
from models.hf_families import layer_windows, moe_layers
from models.registry import ATTENTION_KINDS, BATCH, MAX_LAYERS, MAX_SIZE, check_choice, check_int

__all__ = ["FAMILIES", "DecoderConfig", "read_config", "load_config", "DEFAULT_SEQ"]

FAMILIES = tuple(FAMILY_PARTS)
DEFAULT_SEQ = 2048  # sequence length when not given (or the model's limit when smaller)
MODEL_DIMS = "xghfv"  # Mesh-TensorFlow's model dimensions, the first one an operator has is split
_MISSING = object()


@dataclass(frozen=True)
class DecoderConfig:
    """What the graph needs from a config, checked.  ``windows``: per layer
    its attention's window (0: the whole causal sequence) and ``chunked``
    whether it is a chunk; ``moe``: per layer whether it has experts."""

    family: str
    width: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    positions: int | None  # the context length the model was trained for
    tied: bool
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    experts: int = 0
    top_k: int = 0
    embd_pdrop: float = 0.0  # dropout of the embeddings' sum, the attention probabilities, each residual branch
    attn_pdrop: float = 0.0
    resid_pdrop: float = 0.0
    positions_key: str = ""  # the config's key that gave ``positions``
    mla: tuple = ()  # multi-head latent attention: (q rank or 0, kv rank, rotary width, other width, value width)
    qk_norm: str = ""
    norms: str = "pre"
    windows: tuple = ()  # per layer: (window or chunk, chunked)
    moe: tuple = ()  # per layer: experts or not
    expert_ffn: int = 0
    shared_ffn: int = 0
    shared_gate: bool = False
    expert_bias: bool = False
    router_bias: bool = False
    groups: int = 0  # groups of experts a token's experts come from
    group_limit: int = 0  # of them, how many a token's experts come from (DeepSeek's topk_group; 0: any)
    sinks: bool = False
    norm_kind: str = "rms"  # "rms", "layer", "scale" or "plain" (models.hf_families.Family.norm)
    mlp_kind: str = "gated"  # "gated" or "plain"
    parallel: str = ""  # "", "one" or "two": attention and feed-forward side by side (Family.parallel)
    head_bias: bool = False
    residual_scale: bool = False  # each residual branch scaled by a factor before it is added (Granite)
    embed_scale: bool = False  # the embeddings scaled by a factor (Granite)
    logit_scale: bool = False  # the logits scaled by a factor (Granite, Cohere)
    softcap: bool = False  # the attention's scores soft-capped
    logit_softcap: bool = False  # the final logits soft-capped
    multimodal: str = ""  # the config's own model_type where its decoder is its text_config (gemma3, llama4)

    @property
    def gpt2(self) -> bool:
        return self.family == "gpt2"

    def layer_window(self, i: int) -> tuple[int, bool]:
        return self.windows[i] if self.windows else (0, False)

    def layer_moe(self, i: int) -> bool:
        return self.moe[i] if self.moe else bool(self.experts)


MAX_CONFIG_BYTES = 16 << 20  # a config.json is a few kB


def _read_json(path: str):
    from readers import read_json

    try:
        return read_json(path, MAX_CONFIG_BYTES, "model config")
    except ValueError as e:
        raise ModelFileError(str(e)) from None


def read_config(path: str) -> DecoderConfig:
    """The decoder a ``config.json`` describes; :class:`ModelFileError`
    naming the key for a config that is not one."""
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ModelFileError(f"{path}: not a model config (a JSON object with a model_type)")

    def fail(problem: str):
        raise ModelFileError(f"{path}: {problem}")

    family = data.get("model_type", _MISSING)
    if family is _MISSING:
        fail("missing key 'model_type'")
    if not isinstance(family, str) or family not in FAMILY_PARTS:
        fail(f"model_type {shown(family)} is not a decoder family the tool reads ({', '.join(FAMILIES)})")
    parts = FAMILY_PARTS[family]
    if parts.text:  # a multimodal model: its decoder is the text part
        outer = family
        text = data.get("text_config")
        if not isinstance(text, dict):
            fail(f"a {family} config needs its text_config (an object)")
        data, family = {"model_type": parts.text, **text}, parts.text
        if data["model_type"] != parts.text:
            fail(f"text_config's model_type {shown(data['model_type'])} is not {parts.text}")
        parts = FAMILY_PARTS[family]
        return replace(_Reader(data, fail, family, parts).config(), multimodal=outer)
    return _Reader(data, fail, family, parts).config()


class _Reader:
    """Reads one config's keys, checked, with the family's defaults."""

    def __init__(self, data: dict, fail, family: str, parts):
        self.data, self.fail, self.family, self.parts = data, fail, family, parts

    def get(self, name, default=None):
        v = self.data.get(name)
        if v is not None:
            return v
        if name not in self.data and name in self.parts.absent:  # left out: the class's number
            return self.parts.absent[name]
        return self.parts.defaults.get(name, default)

    def integer(self, *names, default=_MISSING, most=MAX_SIZE, what="", low=1):
        """The first of ``names`` the config sets, at most ``most`` (the
        bound of the flags that set such a size) ``what``."""
        for name in names:
            v = self.get(name)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int) or v < low:
                    self.fail(f"{name} must be a {'positive' if low else 'non-negative'} integer, got {shown(v)}")
                if v > most:
                    self.fail(f"{name} is {v:,}; the tool plans at most {most:,}{' ' + what if what else ''}")
                return v
        if default is _MISSING:
            given = next((name for name in names if name in self.data), None)  # there, but null
            self.fail(f"{given} is null; the tool needs a number" if given else f"missing key {names[0]!r}")
        return default

    def flag(self, name, default):
        v = self.get(name, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.fail(f"{name} must be true or false, got {shown(v)}")
        return v

    def bias(self, rule) -> bool:
        return rule if isinstance(rule, bool) else self.flag(rule, False)

    def probability(self, name, default):
        v = self.get(name, default)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            self.fail(f"{name} must be a probability from 0 to below 1, got {shown(v)}")
        return float(v)

    def listed(self, name, length: int, ok, what: str):
        """A list of ``length`` items ``ok`` accepts, or ``None``."""
        v = self.data.get(name)
        if v is None:
            return None
        if not isinstance(v, list) or len(v) != length or not all(ok(x) for x in v):
            self.fail(f"{name} must be a list of {length} {what}")
        return v

    def config(self) -> DecoderConfig:
        integer, flag, family, parts = self.integer, self.flag, self.family, self.parts
        if family == "gpt2":
            return self.gpt2()
        width = integer("hidden_size")
        layers = integer("num_hidden_layers", most=MAX_LAYERS, what="layers")
        heads = integer("num_attention_heads")
        kv_heads = integer("num_key_value_heads", default=heads)
        vocab = integer("vocab_size")
        head_dim = integer("head_dim", default=None)
        if head_dim is None:  # the config classes' rule: the width over the heads, rounded down
            if width < heads:
                self.fail(f"num_attention_heads {heads} is more than hidden_size {width}")
            head_dim = width // heads
        if heads % kv_heads:
            self.fail(f"num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}")
        positions = integer("max_position_embeddings", default=None)
        tied = flag("tie_word_embeddings", parts.tied)
        moe = moe_layers(parts, layers, self.checked_get(layers))
        experts = top_k = expert_ffn = shared_ffn = groups = group_limit = 0
        if any(moe):
            experts = integer("num_local_experts", "num_experts", "n_routed_experts")
            top_k = integer("num_experts_per_tok", "experts_per_token")
            if top_k > experts:
                self.fail(f"num_experts_per_tok {top_k} is more than the {experts} experts")
            expert_ffn = integer(parts.expert_ffn)
            if parts.shared == "count":
                shared_ffn = integer("n_shared_experts", default=0, low=0) * expert_ffn
            elif parts.shared == "size":
                shared_ffn = integer("shared_expert_intermediate_size", default=0, low=0)
            elif parts.shared == "ffn":
                shared_ffn = expert_ffn
            n_group = integer("n_group", default=0, low=0)
            if n_group > 1 and experts % n_group:
                self.fail(f"n_group {n_group} does not divide the {experts} experts")
            groups = n_group if n_group > 1 and self.get("topk_method") != "greedy" else 0  # greedy: any group
            if groups:  # node-limited routing: a token's experts from topk_group of the groups
                group_limit = integer("topk_group", default=groups, low=1)
                if group_limit > groups:
                    self.fail(f"topk_group {group_limit} is more than the {groups} groups (n_group)")
        dense_ffn = integer(parts.dense_ffn) if not all(moe) else integer(parts.dense_ffn, default=0, low=0)
        windows = self.windows(layers)
        mla = ()
        if parts.attention == "mla":
            # q_lora_rank null or left out: queries without the low-rank pair
            mla = (integer("q_lora_rank", default=0), integer("kv_lora_rank"), integer("qk_rope_head_dim"),
                   integer("qk_nope_head_dim"), integer("v_head_dim"))
            kv_heads = heads
        qk_norm = parts.qk_norm if not parts.qk_norm_key or flag(parts.qk_norm_key, False) else ""
        attn_bias = dict(qkv_bias=self.bias(parts.qkv_bias), out_bias=self.bias(parts.out_bias),
                         mlp_bias=self.bias(parts.mlp_bias))
        return DecoderConfig(
            family, width, layers, heads, kv_heads, head_dim, dense_ffn, vocab, positions, tied,
            experts=experts, top_k=top_k, attn_pdrop=self.probability("attention_dropout", 0.0),
            resid_pdrop=self.probability(parts.resid_dropout, 0.0) if parts.resid_dropout else 0.0,
            norm_kind=parts.norm, mlp_kind=parts.mlp, head_bias=parts.head_bias,
            residual_scale=bool(parts.residual_scale), logit_scale=bool(parts.logit_scale),  # multiplied, 1 or not
            embed_scale=bool(parts.embed_scale),
            embd_pdrop=self.probability(parts.embed_dropout, 0.0) if parts.embed_dropout else 0.0,
            parallel=parts.parallel if not parts.parallel_key or flag(parts.parallel_key, False) else "",
            positions_key="max_position_embeddings" if positions is not None else "", mla=mla, qk_norm=qk_norm,
            norms=parts.norms, windows=windows, moe=tuple(moe), expert_ffn=expert_ffn, shared_ffn=shared_ffn,
            shared_gate=parts.shared_gate and shared_ffn > 0, expert_bias=parts.expert_bias,
            router_bias=parts.router_bias, groups=groups, group_limit=group_limit, sinks=parts.sinks,
            softcap=self.get("attn_logit_softcapping") is not None,
            logit_softcap=self.get("final_logit_softcapping") is not None, **attn_bias)

    def checked_get(self, layers: int):
        """``get`` for the layer rules, with their lists checked."""
        def get(name, default=None):
            if name in ("moe_layers", "mlp_only_layers"):
                v = self.data.get(name)
                if v is not None and (not isinstance(v, list) or not all(
                        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in v)):
                    self.fail(f"{name} must be a list of layer numbers from 0 to {layers - 1}")
                return v
            if name == "layer_types":
                return self.listed(name, layers, lambda t: t in ("full_attention", "sliding_attention",
                                                                 "chunked_attention"),
                                   "of full_attention, sliding_attention, chunked_attention")
            if name == "no_rope_layers":  # an empty list: the default, as Llama4TextConfig reads it
                if self.data.get(name) == []:
                    return None
                return self.listed(name, layers, lambda t: t in (0, 1) and not isinstance(t, bool), "0 or 1")
            if name in ("use_sliding_window",):
                return self.flag(name, default)
            steps = ("decoder_sparse_step", "interleave_moe_layer_step", "sliding_window_pattern",
                     "_sliding_window_pattern", "no_rope_layer_interval")  # every n-th layer: n of 1 or more
            return self.integer(name, default=default, low=1 if name in steps else 0)
        return get

    def windows(self, layers: int) -> tuple:
        """Per layer ``(window or chunk, chunked)``."""
        kinds = layer_windows(self.parts, layers, self.checked_get(layers))
        sliding = self.integer("sliding_window", default=0, low=0) if "sliding" in kinds else 0
        chunk = self.integer("attention_chunk_size", default=0, low=0) if "chunked" in kinds else 0
        out = tuple((sliding, False) if k == "sliding" else (chunk, True) if k == "chunked" and chunk else (0, False)
                    for k in kinds)
        return out if any(w for w, _ in out) else ()

    def gpt2(self) -> DecoderConfig:
        integer, flag = self.integer, self.flag
        width = integer("n_embd", "hidden_size")
        layers = integer("n_layer", "num_hidden_layers", most=MAX_LAYERS, what="layers")
        heads = integer("n_head", "num_attention_heads")
        ffn = integer("n_inner", default=4 * width)
        positions = integer("n_positions", "n_ctx", "max_position_embeddings")
        vocab = integer("vocab_size")
        if width % heads:
            self.fail(f"n_head {heads} does not divide n_embd {width}")
        drops = dict(embd_pdrop=self.probability("embd_pdrop", 0.1), attn_pdrop=self.probability("attn_pdrop", 0.1),
                     resid_pdrop=self.probability("resid_pdrop", 0.1))  # GPT2Config's defaults
        key = next((k for k in ("n_positions", "n_ctx", "max_position_embeddings") if self.data.get(k) is not None), "")
        return DecoderConfig("gpt2", width, layers, heads, heads, width // heads, ffn, vocab, positions,
                             flag("tie_word_embeddings", True), qkv_bias=True, out_bias=True, mlp_bias=True,
                             positions_key=key, norm_kind="layer", mlp_kind="plain", **drops)


def _model_name(path: str, cfg: DecoderConfig) -> str:
    """The directory holding the config (``llama3-8b``), else the family."""
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return printable(folder) or cfg.family


def _params(cfg: DecoderConfig, name: str, given: dict) -> dict:
    stray = [k for k in given if k not in ("batch", "seq", "attention")]
    if stray:
        raise SettingError(stray[0], f"is not a parameter of {name} (it takes batch, seq, attention)")
    limit = cfg.positions
    batch = check_int("batch", given.get("batch", BATCH.default))
    seq = check_int("seq", given.get("seq", min(DEFAULT_SEQ, limit or DEFAULT_SEQ)))
    attention = check_choice("attention", given.get("attention", "fused"), ATTENTION_KINDS)
    return {"batch": batch, "seq": seq, "attention": attention}


def load_config(path: str, layers_at_most: int | None = None, **params):
    """The graph of the decoder ``path`` describes (a ``config.json``) with
    ``batch``, ``seq`` and ``attention`` (``fused``, the default, or
    ``materialized``); with ``layers_at_most``, only its first layers (a
    model the same but for its depth: ``graph.graph["layers"]`` says how
    many the config has)."""

    from graph import GraphBuilder
    from models.decoder import build_decoder

    cfg = read_config(path)
    layers = cfg.layers
    if layers_at_most is not None:
        cfg = replace(cfg, layers=min(layers, layers_at_most))
    name = _model_name(path, cfg)
    values = _params(cfg, name, params)
    B = GraphBuilder(name, 1, params=values, expert="mesh_tensorflow", model_dims=MODEL_DIMS,
                     batch=values["batch"], source=file_identity(path), defaults={"attention": "fused"},
                     roles={"seq": "s", "tensor": "ghfv", "expert": "x"})
    build_decoder(B, cfg, **values)
    if layers_at_most is not None:
        B.graph.graph["layers"] = layers
    notes = ()
    if cfg.multimodal:  # the decoder alone: say so, the parameter count being the text model's
        notes += (f"{name} is a multimodal {cfg.multimodal} model: its text model ({cfg.family}, the config's "
                  "text_config) is planned, not its vision tower.",)
    if cfg.positions is not None and values["seq"] > cfg.positions:  # planned as asked, but worth saying
        notes += (f"The sequence of {values['seq']:,} tokens exceeds the {cfg.positions:,} positions {name} has "
                  f"({cfg.positions_key}); planned as asked.",)
    if notes:
        B.graph.graph["notes"] = notes
    return B.graph
