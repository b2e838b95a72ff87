"""The graph of a decoder read from a ``config.json``
(:class:`models.hf_config.DecoderConfig`), built from its parts.

Letters (see ``models/hf_config.py``): ``b s t e h d g r u j f v`` as in
the built-in Transformer, and for a mixture of experts ``o`` (the router's
experts), ``x`` (the experts), ``k`` (a token's chosen experts); in an
expert's buffer ``s`` counts its slots (``c = ceil(k s / x)`` per sample),
split with the sequence.  Multi-head latent attention adds ``q`` (the
queries' low rank) and ``l`` (the keys' and values' latent).

Per layer ``i``, ``layer{i}/attn`` then ``layer{i}/mlp``, each a norm, the
sub-layer and a residual (OLMo 2: the norm after the sub-layer; Gemma: a
norm before and one after).  Attention: ``qkv`` (fused, grouped-query as
``u = r + 2`` slots per key/value head), ``split``, ``q_norm``/``k_norm``
where the family has them, ``attention`` (fused, over the layer's window
or chunk; with gpt-oss's sinks) and ``out``; multi-head latent attention:
``q_a``, ``q_a_norm``, ``q_b`` (or ``q`` without a query rank),
``kv_a``, ``kv_split``, ``kv_a_norm``, ``kv_b``, ``kv_b_split``,
``k_rope`` (the rotary key shared by every head), ``k``, ``attention``,
``out``.  A dense MLP: ``gate_up``, ``split``, ``act``, ``down``; with
experts: ``router``, ``gate`` (top-k), ``dispatch`` (all-to-all),
``gate_up``, ``split``, ``act``, ``down`` over the experts, ``combine``
(all-to-all), and a shared expert (``shared/...``, Qwen2-MoE's gated by
``shared/gate``) added by ``shared_add``.
"""

from __future__ import annotations

__all__ = ["build_decoder"]


def build_decoder(B, cfg, batch: int, seq: int, attention: str = "fused") -> None:
    """Add the decoder's operators to the :class:`graph.GraphBuilder` ``B``
    and, for a mixture of experts, its active parameters to the graph."""
    from kinds.gemm import Einsum, Embedding
    from kinds.pointwise import Dropout, Elementwise, SoftmaxCrossEntropy

    e, v = cfg.width, cfg.vocab
    parts = _Parts(B, cfg, seq, attention)
    x = B.add("embed", Embedding(v, e, "e"), B.data((batch, seq), "bs"))
    if cfg.gpt2:
        pos = B.add("pos_embed", Embedding(cfg.positions, e, "e"), B.data((batch, seq), "bs"))
        x = B.add("embed/add", Elementwise(), x, pos)
    if cfg.embed_scale:  # times a factor
        x = B.add("embed/scale", Elementwise(), x)
    if cfg.embd_pdrop:
        x = B.add("embed/dropout", Dropout(cfg.embd_pdrop), x)
    for i in range(cfg.layers):
        attend = lambda pre, n: parts.attention(pre, n, *cfg.layer_window(i))  # noqa: E731
        feed = lambda pre, n: parts.mlp(pre, n, cfg.layer_moe(i))  # noqa: E731
        if cfg.parallel:
            x = parts.parallel(f"layer{i}", x, attend, feed)
        else:
            x = parts.sublayer(f"layer{i}/attn", x, attend)
            x = parts.sublayer(f"layer{i}/mlp", x, feed)
    x = parts.norm("norm", x)
    x = B.add("logits", Einsum("bse,ve->bsv", bias=cfg.head_bias), x, B.weight((v, e), "ve"),
              shared=(1,) if cfg.tied else ())
    if cfg.logit_scale:  # logits times (or over) a factor
        x = B.add("logits/scale", Elementwise(), x)
    if cfg.logit_softcap:  # cap * tanh(logits / cap)
        x = B.add("logits/softcap", Elementwise(pw=2), x)
    B.add("loss", SoftmaxCrossEntropy(), x)
    if cfg.experts:
        from graph import parameter_count

        B.graph.graph["active_parameters"] = parameter_count(B.graph) + parts.inactive


class _Parts:
    """The parts of one decoder's layers (see the module docstring)."""

    def __init__(self, B, cfg, seq: int, attention: str):
        self.B, self.cfg, self.seq, self.kind = B, cfg, seq, attention
        self.inactive = 0  # less the parameters of the experts a token does not use
        self.rotary = 0 if cfg.gpt2 else 1  # pointwise operations of the rotary positions on q, k, v

    def add(self, name, kind, *inputs, **how):
        return self.B.add(name, kind, *inputs, **how)

    def norm(self, name, x):
        from kinds.pointwise import Norm, RMSNorm

        kind = self.cfg.norm_kind
        return self.add(name, RMSNorm(-1) if kind == "rms" else Norm(-1, params={"layer": 2, "scale": 1}.get(kind, 0)),
                        x)

    def sublayer(self, pre, x, body):
        """``x + body(norm(x))`` with the family's norms and dropout."""
        from kinds.pointwise import Elementwise

        norms = self.cfg.norms
        y = body(pre, self.norm(f"{pre}/norm", x) if norms != "post" else x)
        if norms != "pre":
            y = self.norm(f"{pre}/post_norm", y)
        return self.add(f"{pre}/residual", Elementwise(), x, self.branch(pre, y))

    def branch(self, pre, y):
        """A residual branch's output ``y`` through the family's dropout and
        scale, before it is added."""
        from kinds.pointwise import Dropout, Elementwise

        if self.cfg.resid_pdrop:
            y = self.add(f"{pre}/dropout" + ("_out" if pre.endswith("attn") else ""), Dropout(self.cfg.resid_pdrop), y)
        if self.cfg.residual_scale:
            y = self.add(f"{pre}/scale", Elementwise(), y)
        return y

    def parallel(self, pre, x, attend, feed):
        """``x + attend(norm(x)) + feed(norm(x))``: one norm feeding both
        (``one``) or each its own (``two``), each branch through
        :meth:`branch`."""
        from kinds.pointwise import Elementwise

        n = self.norm(f"{pre}/attn/norm", x)
        a = attend(f"{pre}/attn", n)
        m = feed(f"{pre}/mlp", n if self.cfg.parallel == "one" else self.norm(f"{pre}/mlp/norm", x))
        a, m = self.branch(f"{pre}/attn", a), self.branch(f"{pre}/mlp", m)
        x = self.add(f"{pre}/attn/residual", Elementwise(), x, a)
        return self.add(f"{pre}/mlp/residual", Elementwise(), x, m)

    # -- attention --------------------------------------------------------------------
    def attention(self, pre, n, window: int, chunked: bool):
        if self.cfg.mla:
            return self.latent_attention(pre, n, window, chunked)
        from kinds.gemm import Einsum
        from kinds.shape import Split, Unstack

        cfg, e, d = self.cfg, self.cfg.width, self.cfg.head_dim
        if cfg.kv_heads == cfg.heads:  # one fused projection, heads h
            h = cfg.heads
            qkv = self.add(f"{pre}/qkv", Einsum("bse,jehd->jbhsd", pw=self.rotary, bias=cfg.qkv_bias, unsplit="jd",
                                                products=(1, 1, 1)), n, self.B.weight((3, e, h, d), "jehd"))
            q, k, val = self.add(f"{pre}/split", Unstack(), qkv)
            heads, w_out, kv, head_shape = "bh", (h, d, e), "bhtd", (h,)
        else:  # grouped-query: g key/value heads, each with r query heads, a key and a value (u = r + 2 slots)
            g, r = cfg.kv_heads, cfg.heads // cfg.kv_heads
            qkv = self.add(f"{pre}/qkv", Einsum("bse,egud->bgusd", pw=self.rotary, bias=cfg.qkv_bias, unsplit="ud",
                                                products=(r, 1, 1)), n, self.B.weight((e, g, r + 2, d), "egud"))
            q, k, val = self.add(f"{pre}/split", Split(2, (r, 1, 1)), qkv)
            heads, w_out, kv, head_shape = "bgr", (g, r, d, e), "bgutd", (g, r)  # a key's slot u (size 1) is squeezed
        q, k = self.qk_norms(pre, q, k)
        c = self.core(pre, q, k, val, heads, kv, head_shape, window, chunked)
        return self.add(f"{pre}/out", Einsum(f"{heads}sd,{heads[1:]}de->bse", bias=cfg.out_bias, unsplit="d"), c,
                        self.B.weight(w_out, heads[1:] + "de"))

    def qk_norms(self, pre, q, k):
        """The family's normalisation of queries and keys: per head, over
        every head of the projection, or an L2 norm without weights."""
        from kinds.pointwise import Norm, RMSNorm, RMSNormOver

        how = self.cfg.qk_norm
        if not how:
            return q, k
        out = []
        for name, t in (("q_norm", q), ("k_norm", k)):
            if how == "proj":  # every axis but the sample and the positions
                kind = RMSNormOver(tuple(i for i, c in enumerate(t.letters) if c not in "bs"))
            elif how == "head_layer":  # a LayerNorm over the head width, one scale and shift for every head
                kind = Norm(-1)
            else:
                kind = RMSNorm(-1, params=0 if how == "l2" else 1)
            out.append(self.add(f"{pre}/{name}", kind, t))
        return tuple(out)

    def core(self, pre, q, k, val, heads, kv, head_shape, window, chunked):
        """Scores, softmax and context: one fused operator, or materialised."""
        from kinds.attention import FusedAttention
        from kinds.gemm import Einsum
        from kinds.pointwise import Dropout, Elementwise, Softmax

        cfg, B = self.cfg, self.B
        sinks = (B.weight(head_shape, heads[1:]),) if cfg.sinks else ()
        if self.kind == "fused":  # scale, mask (causal, a window or a chunk), softmax and context in one kernel
            local = dict(chunk=window) if chunked else dict(window=window)
            return self.add(f"{pre}/attention", FusedAttention(causal=True, softcap=cfg.softcap, **local), q, k, val,
                            *sinks)
        # materialised, as an eager implementation runs it: the whole score matrix, masked
        s = self.add(f"{pre}/scores", Einsum(f"{heads}sd,{kv}->{heads}st", pw=2 + 2 * cfg.softcap, unsplit="d"), q, k)
        if sinks:
            s = self.add(f"{pre}/sinks", Elementwise(), s, B.weight(head_shape + (1, 1), heads[1:] + "st"))
        s = self.add(f"{pre}/softmax", Softmax(-1), s)
        if cfg.attn_pdrop:
            s = self.add(f"{pre}/dropout", Dropout(cfg.attn_pdrop), s)
        return self.add(f"{pre}/context", Einsum(f"{heads}st,{kv}->{heads}sd", unsplit="d"), s, val)

    def latent_attention(self, pre, n, window: int, chunked: bool):
        """DeepSeek's multi-head latent attention: queries through a rank
        ``q`` bottleneck, keys and values from one latent of rank ``l`` and
        a rotary key part shared by the heads."""
        from kinds.gemm import Einsum
        from kinds.pointwise import RMSNorm
        from kinds.shape import Concat, Expand, Split

        cfg, B, e, h = self.cfg, self.B, self.cfg.width, self.cfg.heads
        q_rank, kv_rank, rope, nope, dv = cfg.mla
        dq = rope + nope
        if q_rank:
            qa = self.add(f"{pre}/q_a", Einsum("bse,eq->bsq", bias=cfg.qkv_bias), n, B.weight((e, q_rank), "eq"))
            qa = self.add(f"{pre}/q_a_norm", RMSNorm(-1), qa)
            q = self.add(f"{pre}/q_b", Einsum("bsq,qhd->bhsd", pw=self.rotary, unsplit="d"), qa,
                         B.weight((q_rank, h, dq), "qhd"))
        else:
            q = self.add(f"{pre}/q", Einsum("bse,ehd->bhsd", pw=self.rotary, unsplit="d"), n, B.weight((e, h, dq), "ehd"))
        kva = self.add(f"{pre}/kv_a", Einsum("bse,el->bsl", bias=cfg.qkv_bias), n, B.weight((e, kv_rank + rope), "el"))
        latent, k_rope = self.add(f"{pre}/kv_split", Split(2, (kv_rank, rope)), kva)
        latent = self.add(f"{pre}/kv_a_norm", RMSNorm(-1), latent)
        kvb = self.add(f"{pre}/kv_b", Einsum("bsl,lhd->bhsd", unsplit="d"), latent, B.weight((kv_rank, h, nope + dv), "lhd"))
        k_nope, val = self.add(f"{pre}/kv_b_split", Split(3, (nope, dv)), kvb)
        k_rope = self.add(f"{pre}/k_rope", Expand(1, h, "h"), k_rope)
        k = self.add(f"{pre}/k", Concat(3), k_nope, k_rope)
        c = self.core(pre, q, k, val, "bh", "bhtd", (h,), window, chunked)
        return self.add(f"{pre}/out", Einsum("bhsd,hde->bse", bias=cfg.out_bias, unsplit="d"), c,
                        B.weight((h, dv, e), "hde"))

    # -- feed-forward -----------------------------------------------------------------
    def mlp(self, pre, n, moe: bool):
        from kinds.gemm import Einsum

        cfg, e = self.cfg, self.cfg.width
        if cfg.mlp_kind == "plain":  # act(up), down
            y = self.add(f"{pre}/up", Einsum("bse,ef->bsf", pw=1, bias=cfg.mlp_bias, activation=True), n,
                         self.B.weight((e, cfg.ffn), "ef"))
            return self.add(f"{pre}/down", Einsum("bsf,fe->bse", bias=cfg.mlp_bias), y,
                            self.B.weight((cfg.ffn, e), "fe"))
        if moe:
            return self.experts(pre, n)
        return self.gated(pre, n, "bs", "", cfg.ffn, cfg.mlp_bias)

    def gated(self, pre, x, lead, w_lead, f, bias):
        """gate and up fused, act(gate) * up, down; ``lead``: the letters
        before ``f`` (``bs``, or ``xbs`` in an expert), ``w_lead`` those the
        weights carry (``x`` in an expert)."""
        from kinds.gemm import Einsum
        from kinds.pointwise import Elementwise
        from kinds.shape import Unstack

        e = self.cfg.width
        wl = (self.cfg.experts,) if w_lead else ()
        gu = self.add(f"{pre}/gate_up", Einsum(f"{lead}e,j{w_lead}ef->j{lead}f", bias=bias, unsplit="j", products=(1, 1)), x,
                      self.B.weight((2,) + wl + (e, f), f"j{w_lead}ef"))
        gate, up = self.add(f"{pre}/split", Unstack(), gu)
        y = self.add(f"{pre}/act", Elementwise(pw=1, keeps_inputs=True), gate, up)
        return self.add(f"{pre}/down", Einsum(f"{lead}f,{w_lead}fe->{lead}e", bias=bias), y,
                        self.B.weight(wl + (f, e), f"{w_lead}fe"))

    def experts(self, pre, n):
        """Router, top-k, the all-to-all dispatch, the experts, the
        all-to-all combine; a shared expert beside them."""
        from kinds.gemm import Einsum
        from kinds.moe import Combine, Dispatch, TopKGating
        from kinds.pointwise import Elementwise

        cfg, B, e = self.cfg, self.B, self.cfg.width
        X, k = cfg.experts, cfg.top_k
        capacity = -(-k * self.seq // X)
        logits = self.add(f"{pre}/router", Einsum("bse,eo->bso", bias=cfg.router_bias, unsplit="o"), n, B.weight((e, X), "eo"))
        routing = self.add(f"{pre}/gate", TopKGating(k, cfg.groups), logits)
        limit = (cfg.groups, cfg.group_limit) if 0 < cfg.group_limit < cfg.groups else ()  # node-limited routing
        buffers = self.add(f"{pre}/dispatch", Dispatch(k, X, capacity, limit), n, routing)
        y = self.gated(pre, buffers, "xbs", "x", cfg.expert_ffn, cfg.expert_bias)
        y = self.add(f"{pre}/combine", Combine(k, X, limit), y, routing)
        per_expert = 3 * e * cfg.expert_ffn + (2 * cfg.expert_ffn + e if cfg.expert_bias else 0)
        self.inactive -= (X - k) * per_expert  # the experts a token does not use
        if cfg.shared_ffn:
            s = self.gated(f"{pre}/shared", n, "bs", "", cfg.shared_ffn, cfg.mlp_bias)
            if cfg.shared_gate:  # sigmoid(n w) * shared
                gate = self.add(f"{pre}/shared/gate", Einsum("bse,ez->bsz"), n, B.weight((e, 1), "ez"))
                s = self.add(f"{pre}/shared/gated", Elementwise(pw=1, keeps_inputs=True), s, gate)
            y = self.add(f"{pre}/shared_add", Elementwise(), y, s)
        return y
