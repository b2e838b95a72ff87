"""Decoder-only language models from a Hugging Face ``config.json``.

The families GPT-2, Llama, Mistral, Qwen2 and Mixtral (the config's
``model_type``), read from the keys their configs use, without downloading
anything and without the ``transformers`` package.  The graph is built like
the built-in Transformer (``models/sequence.py``): einsums over named
letters, fused projections taken apart by an Unstack.  Letters:

    b batch            s positions (queries)   t positions (keys)
    e width            h heads                 d width of a head (never split)
    g key/value heads and r query heads per key/value head (grouped-query
      attention, when the config has fewer key/value heads than heads)
    f feed-forward hidden units   v vocabulary   j a stack of fused projections
    x experts          c slots of an expert's buffer (capacity)

Never split: ``d``, the stacks ``j`` and slots ``u`` of fused projections,
an expert's capacity ``c``, and the tokens ``s`` of a sample in the
dispatch and combine einsums (GShard splits groups of tokens, here a
sample's sequence, not the tokens of a group).

Operators, in order: ``embed`` (token embedding; GPT-2 adds learned
positions, ``pos_embed`` and ``embed/add``), then per layer ``i``

    layer{i}/attn: norm, qkv (fused: q, k, v as a stack ``j``, or with
                   grouped-query attention as ``u = r + 2`` slots per key/value
                   head), split, attention (one fused operator, as PyTorch's
                   ``scaled_dot_product_attention`` runs it; with ``attention =
                   "materialized"``: scores, softmax, context), out, residual
    layer{i}/mlp:  norm, then GPT-2: up (GELU), down; Llama, Mistral, Qwen2:
                   gate_up (fused), split, act (SiLU(gate) * up), down;
                   Mixtral: router, gate (top-k), dispatch, gate_up, split,
                   act, down, combine; then residual

and last ``norm``, ``logits`` (the LM head, sharing the embedding's table
when the config ties them) and ``loss`` (softmax cross-entropy).

Modelling choices, in the pointwise counts of the built-in graphs: an
activation is one pointwise operation per element (GELU, SiLU); rotary
positions are one on the q, k and v projections; materialised scores carry
two (scaling and the causal mask), which the fused attention does inside.  A norm is RMSNorm (LayerNorm with scale and
shift for GPT-2).  Biases are weights as the family has them (GPT-2 all,
Qwen2 on q, k, v; Llama per ``attention_bias`` and ``mlp_bias``).  A mixture
of experts follows GShard and Mesh-TensorFlow: the router's top-k gating
fills ``c = ceil(k * s / x)`` slots per expert and sample (capacity factor
1), and dispatch and combine are einsums with the expert letter ``x``, so
expert parallelism is a split of ``x``.  Sliding-window attention (Mistral)
is costed as full causal attention.  The weights are those of the model:
the parameter count equals the published one.  The sequence length defaults
to 2048, or the config's limit when smaller; a longer one is planned as
asked (a learned position table keeps its rows, read by position ids), with
a note in the graph's ``notes`` that the report prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from errors import SettingError, printable, shown
from models.registry import ATTENTION_KINDS, BATCH, MAX_LAYERS, MAX_SIZE, check_choice, check_int
from models.files import ModelFileError, file_identity

__all__ = ["FAMILIES", "DecoderConfig", "read_config", "load_config", "DEFAULT_SEQ"]

FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "mixtral")
DEFAULT_SEQ = 2048  # sequence length when not given (or the model's limit when smaller)
MODEL_DIMS = "xghfv"  # Mesh-TensorFlow's model dimensions, the first one an operator has is split
_MISSING = object()


@dataclass(frozen=True)
class DecoderConfig:
    """What the graph needs from a config, checked."""

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

    @property
    def gpt2(self) -> bool:
        return self.family == "gpt2"


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

    def integer(*names, default=_MISSING, most=MAX_SIZE, what=""):
        """The first of ``names`` the config sets, at most ``most`` (the
        bound of the flags that set such a size) ``what``."""
        for name in names:
            if data.get(name) is not None:
                v = data[name]
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    fail(f"{name} must be a positive integer, got {shown(v)}")
                if v > most:
                    fail(f"{name} is {v:,}; the tool plans at most {most:,}{' ' + what if what else ''}")
                return v
        if default is _MISSING:
            fail(f"missing key {names[0]!r}")
        return default

    def flag(name, default):
        v = data.get(name, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            fail(f"{name} must be true or false, got {shown(v)}")
        return v

    def probability(name, default):
        v = data.get(name, default)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            fail(f"{name} must be a probability from 0 to below 1, got {shown(v)}")
        return float(v)

    family = data.get("model_type", _MISSING)
    if family is _MISSING:
        fail("missing key 'model_type'")
    if family not in FAMILIES:
        fail(f"model_type {shown(family)} is not a decoder family the tool reads ({', '.join(FAMILIES)})")
    if family == "gpt2":
        names = {"width": "n_embd", "heads": "n_head"}
        width = integer("n_embd", "hidden_size")
        layers = integer("n_layer", "num_hidden_layers", most=MAX_LAYERS, what="layers")
        heads = integer("n_head", "num_attention_heads")
        kv_heads = heads
        ffn = integer("n_inner", default=4 * width)
        positions = integer("n_positions", "n_ctx", "max_position_embeddings")
        tied = flag("tie_word_embeddings", True)
        biases = dict(qkv_bias=True, out_bias=True, mlp_bias=True)
        drops = dict(embd_pdrop=probability("embd_pdrop", 0.1), attn_pdrop=probability("attn_pdrop", 0.1),
                     resid_pdrop=probability("resid_pdrop", 0.1))  # GPT2Config's defaults
    else:
        names = {"width": "hidden_size", "heads": "num_attention_heads"}
        width = integer("hidden_size")
        layers = integer("num_hidden_layers", most=MAX_LAYERS, what="layers")
        heads = integer("num_attention_heads")
        kv_heads = integer("num_key_value_heads", default=heads)
        ffn = integer("intermediate_size")
        positions = integer("max_position_embeddings", default=None)
        tied = flag("tie_word_embeddings", False)
        if family == "qwen2":
            biases = dict(qkv_bias=True)
        else:
            attn = flag("attention_bias", False)
            biases = dict(qkv_bias=attn, out_bias=attn, mlp_bias=flag("mlp_bias", False))
        drops = dict(attn_pdrop=probability("attention_dropout", 0.0))
    vocab = integer("vocab_size")
    head_dim = integer("head_dim", default=None)
    if head_dim is None:
        if width % heads:
            fail(f"{names['heads']} {heads} does not divide {names['width']} {width}")
        head_dim = width // heads
    if heads % kv_heads:
        fail(f"num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}")
    experts = top_k = 0
    if family == "mixtral":
        experts = integer("num_local_experts")
        top_k = integer("num_experts_per_tok")
        if top_k > experts:
            fail(f"num_experts_per_tok {top_k} is more than num_local_experts {experts}")
    position_keys = ("n_positions", "n_ctx", "max_position_embeddings") if family == "gpt2" else \
        ("max_position_embeddings",)
    positions_key = next((k for k in position_keys if data.get(k) is not None), "")
    return DecoderConfig(family, width, layers, heads, kv_heads, head_dim, ffn, vocab, positions, tied,
                         experts=experts, top_k=top_k, **biases, **drops, positions_key=positions_key)


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
    from dataclasses import replace

    from graph import GraphBuilder

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
    if cfg.positions is not None and values["seq"] > cfg.positions:  # planned as asked, but worth saying
        B.graph.graph["notes"] = (f"The sequence of {values['seq']:,} tokens exceeds the {cfg.positions:,} "
                                  f"positions {name} has ({cfg.positions_key}); planned as asked.",)
    return B.graph


def build_decoder(B, cfg: DecoderConfig, batch: int, seq: int, attention: str = "fused") -> None:
    """Add the decoder's operators to the :class:`graph.GraphBuilder` ``B``."""
    from kinds.attention import FusedAttention
    from kinds.gemm import Einsum, Embedding
    from kinds.pointwise import Dropout, Elementwise, Norm, RMSNorm, Softmax, SoftmaxCrossEntropy
    from kinds.shape import Split, Unstack

    e, d, f, v = cfg.width, cfg.head_dim, cfg.ffn, cfg.vocab
    rotary = 0 if cfg.gpt2 else 1  # pointwise operations of the rotary positions on q, k, v

    def norm(name, x):
        return B.add(name, Norm(-1) if cfg.gpt2 else RMSNorm(-1), x)

    def self_attention(pre, x):
        n = norm(f"{pre}/norm", x)
        if cfg.kv_heads == cfg.heads:  # one fused projection, heads h
            h = cfg.heads
            qkv = B.add(f"{pre}/qkv", Einsum("bse,jehd->jbhsd", pw=rotary, bias=cfg.qkv_bias, unsplit="jd",
                                             products=(1, 1, 1)), n, B.weight((3, e, h, d), "jehd"))
            q, k, val = B.add(f"{pre}/split", Unstack(), qkv)
            heads, w_out = "bh", (h, d, e)
            kv = "bhtd"
        else:  # grouped-query: g key/value heads, each with r query heads, a key and a value (u = r + 2 slots)
            g, r = cfg.kv_heads, cfg.heads // cfg.kv_heads
            qkv = B.add(f"{pre}/qkv", Einsum("bse,egud->bgusd", pw=rotary, bias=cfg.qkv_bias, unsplit="ud",
                                             products=(r, 1, 1)), n, B.weight((e, g, r + 2, d), "egud"))
            q, k, val = B.add(f"{pre}/split", Split(2, (r, 1, 1)), qkv)
            heads, w_out, kv = "bgr", (g, r, d, e), "bgutd"  # a key's slot u (size 1) is squeezed
        if attention == "fused":  # scale, causal mask, softmax and context in one kernel
            c = B.add(f"{pre}/attention", FusedAttention(causal=True), q, k, val)
        else:
            s = B.add(f"{pre}/scores", Einsum(f"{heads}sd,{kv}->{heads}st", pw=2, unsplit="d"), q, k)
            s = B.add(f"{pre}/softmax", Softmax(-1), s)
            if cfg.attn_pdrop:
                s = B.add(f"{pre}/dropout", Dropout(cfg.attn_pdrop), s)
            c = B.add(f"{pre}/context", Einsum(f"{heads}st,{kv}->{heads}sd", unsplit="d"), s, val)
        o = B.add(f"{pre}/out", Einsum(f"{heads}sd,{heads[1:]}de->bse", bias=cfg.out_bias, unsplit="d"), c,
                  B.weight(w_out, heads[1:] + "de"))
        if cfg.resid_pdrop:
            o = B.add(f"{pre}/dropout_out", Dropout(cfg.resid_pdrop), o)
        return B.add(f"{pre}/residual", Elementwise(), x, o)

    def swiglu(pre, x, lead, w_lead):
        """gate and up fused, SiLU(gate) * up, down; ``lead``: the letters
        before ``f`` (``bs``, or ``xbc`` in an expert), ``w_lead`` those the
        weights carry (``x`` in an expert)."""
        sizes = {"x": cfg.experts}
        wl = tuple(sizes[c] for c in w_lead)
        slots = "c" if "c" in lead else ""  # an expert's capacity is never split
        gu = B.add(f"{pre}/gate_up", Einsum(f"{lead}e,j{w_lead}ef->j{lead}f", bias=cfg.mlp_bias,
                                            unsplit="j" + slots, products=(1, 1)), x,
                   B.weight((2,) + wl + (e, f), f"j{w_lead}ef"))
        gate, up = B.add(f"{pre}/split", Unstack(), gu)
        y = B.add(f"{pre}/act", Elementwise(pw=1, keeps_inputs=True), gate, up)
        return B.add(f"{pre}/down", Einsum(f"{lead}f,{w_lead}fe->{lead}e", bias=cfg.mlp_bias, unsplit=slots), y,
                     B.weight(wl + (f, e), f"{w_lead}fe"))

    def mlp(pre, x):
        n = norm(f"{pre}/norm", x)
        if cfg.gpt2:
            y = B.add(f"{pre}/up", Einsum("bse,ef->bsf", pw=1, bias=True, activation=True), n, B.weight((e, f), "ef"))
            y = B.add(f"{pre}/down", Einsum("bsf,fe->bse", bias=True), y, B.weight((f, e), "fe"))
        elif cfg.experts:
            y = experts(pre, n)
        else:
            y = swiglu(pre, n, "bs", "")
        if cfg.resid_pdrop:
            y = B.add(f"{pre}/dropout", Dropout(cfg.resid_pdrop), y)
        return B.add(f"{pre}/residual", Elementwise(), x, y)

    def experts(pre, n):
        from kinds.moe import TopKGating

        X, k = cfg.experts, cfg.top_k
        capacity = -(-k * seq // X)
        logits = B.add(f"{pre}/router", Einsum("bse,ex->bsx"), n, B.weight((e, X), "ex"))
        gate = B.add(f"{pre}/gate", TopKGating(k, capacity), logits)
        xs = B.add(f"{pre}/dispatch", Einsum("bsxc,bse->xbce", unsplit="cs"), gate, n)
        y = swiglu(pre, xs, "xbc", "x")
        return B.add(f"{pre}/combine", Einsum("bsxc,xbce->bse", unsplit="cs"), gate, y)

    x = B.add("embed", Embedding(v, e, "e"), B.data((batch, seq), "bs"))
    if cfg.gpt2:
        pos = B.add("pos_embed", Embedding(cfg.positions, e, "e"), B.data((batch, seq), "bs"))
        x = B.add("embed/add", Elementwise(), x, pos)
        if cfg.embd_pdrop:
            x = B.add("embed/dropout", Dropout(cfg.embd_pdrop), x)
    for i in range(cfg.layers):
        x = mlp(f"layer{i}/mlp", self_attention(f"layer{i}/attn", x))
    x = norm("norm", x)
    x = B.add("logits", Einsum("bse,ve->bsv"), x, B.weight((v, e), "ve"), shared=(1,) if cfg.tied else ())
    B.add("loss", SoftmaxCrossEntropy(), x)

