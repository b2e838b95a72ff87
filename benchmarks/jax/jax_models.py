"""AlexNet and the Transformer in JAX, layer for layer as graph.py builds them.

Every operator of graph.py is one block here, run under ``jax.named_scope``
with the operator's name, and every tensor it reads or writes passes through
``ctx.inp`` / ``ctx.out``: the hook where a plan's shardings are applied (and
where the shapes are recorded, so that tests can check them against graph.py).
Weights are named after their operator.  The embedding is the cost model's
one-hot GEMM, so that the plan's splits of the vocabulary mean the same thing
here.  ``Sizes`` shrink batch, width and depth for quick numerical checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp


class Ctx:
    """Applies a plan's shardings (an :class:`exports.frameworks.jax_mesh.MeshPlan`,
    as the jax export's loader reads it; or nothing) and records shapes."""

    def __init__(self, plan=None, mesh=None):
        self.plan, self.mesh = plan, mesh
        self.shapes = {}  # name -> {("in", i) or ("out", j): shape}

    def _put(self, name, kind, i, x):
        self.shapes.setdefault(name, {})[(kind, i)] = tuple(x.shape)
        if self.plan is None or name not in self.plan.layers:
            return x
        from jax.sharding import NamedSharding

        layer = self.plan.layers[name]
        axes = (layer.inputs if kind == "in" else layer.outputs)[i]
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, self.plan.spec(axes)))

    def inp(self, name, i, x):
        return self._put(name, "in", i, x)

    def out(self, name, j, y):
        return self._put(name, "out", j, y)

    def dim(self, name, i, x):
        """Shard a 1-D parameter along iteration-space dimension ``i`` of ``name``."""
        if self.plan is None or name not in self.plan.layers:
            return x
        from jax.sharding import NamedSharding

        axes = self.plan.layers[name].dims[i]
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, self.plan.spec((axes,))))


def _init(key, shape, fan_in):
    return jax.random.normal(key, shape, jnp.float32) / math.sqrt(fan_in)


def softmax_xent(ctx, name, logits, labels):
    with jax.named_scope(name):
        logits = ctx.inp(name, 0, logits)
        logp = jax.nn.log_softmax(logits, axis=-1)
        logp = ctx.out(name, 0, logp)
        nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)
        return jnp.mean(nll)


# -- AlexNet -----------------------------------------------------------------------


@dataclass(frozen=True)
class AlexNetSizes:
    batch: int = 128
    shrink: int = 1  # divide every channel and unit count by this

    def channels(self):
        return tuple(c // self.shrink for c in (96, 256, 384, 384, 256))

    def units(self):
        return tuple(u // self.shrink for u in (4096, 4096, 1024))


_ALEX_CONVS = [  # name, kernel, stride, pad, pooled after
    ("conv1", 11, 4, 0, "pool1"),
    ("conv2", 5, 1, 2, "pool2"),
    ("conv3", 3, 1, 1, None),
    ("conv4", 3, 1, 1, None),
    ("conv5", 3, 1, 1, "pool5"),
]


def alexnet_params(key, sz: AlexNetSizes):
    params, c_in = {}, 3
    keys = jax.random.split(key, 8)
    for (name, k, _, _, _), c_out, kk in zip(_ALEX_CONVS, sz.channels(), keys):
        params[name] = _init(kk, (c_out, c_in, k, k), c_in * k * k)  # (n, c, r, s)
        c_in = c_out
    k_in = c_in * 6 * 6
    for name, n, kk in zip(("fc6", "fc7", "fc8"), sz.units(), keys[5:]):
        params[name] = _init(kk, (k_in, n), k_in)  # (k, n)
        k_in = n
    return params


def alexnet_data(key, sz: AlexNetSizes):
    k1, k2 = jax.random.split(key)
    x = jax.random.normal(k1, (sz.batch, 3, 227, 227), jnp.float32)
    y = jax.random.randint(k2, (sz.batch,), 0, sz.units()[-1])
    return x, y


def alexnet_loss(params, x, labels, ctx: Ctx):
    for name, _, stride, pad, pool in _ALEX_CONVS:
        with jax.named_scope(name):
            x = ctx.inp(name, 0, x)
            w = ctx.inp(name, 1, params[name])
            x = jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                             dimension_numbers=("NCHW", "OIHW", "NCHW"))
            x = ctx.out(name, 0, jax.nn.relu(x))
        if pool:
            with jax.named_scope(pool):
                x = ctx.inp(pool, 0, x)
                x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "VALID")
                x = ctx.out(pool, 0, x)
    with jax.named_scope("flatten/ravel"):
        x = ctx.inp("flatten/ravel", 0, x)
        x = ctx.out("flatten/ravel", 0, x.reshape(-1))
    with jax.named_scope("flatten/unravel"):
        x = ctx.inp("flatten/unravel", 0, x)
        x = ctx.out("flatten/unravel", 0, x.reshape(labels.shape[0], -1))
    for name, relu in (("fc6", True), ("fc7", True), ("fc8", False)):
        with jax.named_scope(name):
            x = ctx.inp(name, 0, x)
            x = x @ ctx.inp(name, 1, params[name])
            x = ctx.out(name, 0, jax.nn.relu(x) if relu else x)
    return softmax_xent(ctx, "softmax", x, labels)


# -- Transformer -------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerSizes:
    batch: int = 128
    seq: int = 256
    width: int = 512
    heads: int = 8
    key_width: int = 64
    vocab: int = 50000
    layers: int = 6

    @property
    def ff(self):
        return 4 * self.width


def _attn_names(pre):
    return {k: f"{pre}/{k}" for k in ("stack", "qkv", "split", "scores", "softmax", "context", "out",
                                      "residual", "norm")}


def _layer_prefixes(layers: int):
    return [f"enc{i}" for i in range(layers)], [f"dec{i}" for i in range(layers)]


def transformer_params(key, sz: TransformerSizes):
    e, h, k, f, v = sz.width, sz.heads, sz.key_width, sz.ff, sz.vocab
    params = {}
    keys = iter(jax.random.split(key, 16 * sz.layers + 8))
    params["enc/embed"] = _init(next(keys), (v, e), e)
    params["dec/embed"] = _init(next(keys), (v, e), e)
    enc, dec = _layer_prefixes(sz.layers)
    attn = [f"{p}/attn" for p in enc] + [f"{p}/{s}" for p in dec for s in ("self", "cross")]
    for pre in attn:
        params[f"{pre}/qkv"] = _init(next(keys), (3, h, e, k), e)
        params[f"{pre}/out"] = _init(next(keys), (h, e, k), h * k)
        params[f"{pre}/norm"] = (jnp.ones((e,)), jnp.zeros((e,)))
    for pre in [f"{p}/ffn" for p in enc + dec]:
        params[f"{pre}/in"] = _init(next(keys), (e, f), e)
        params[f"{pre}/out"] = _init(next(keys), (f, e), f)
        params[f"{pre}/norm"] = (jnp.ones((e,)), jnp.zeros((e,)))
    params["logits"] = _init(next(keys), (e, v), e)
    return params


def transformer_data(key, sz: TransformerSizes):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    enc_ids = jax.random.randint(k1, (sz.batch, sz.seq), 0, sz.vocab)
    dec_ids = jax.random.randint(k2, (sz.batch, sz.seq), 0, sz.vocab)
    pos = jax.random.normal(k3, (sz.batch, sz.seq, sz.width), jnp.float32) * 0.1
    labels = jax.random.randint(k4, (sz.batch, sz.seq), 0, sz.vocab)
    return enc_ids, dec_ids, pos, labels


def _einsum(ctx, name, eq, x, w):
    with jax.named_scope(name):
        return jnp.einsum(eq, ctx.inp(name, 0, x), ctx.inp(name, 1, w))


def _norm(ctx, name, x, scale_bias):
    with jax.named_scope(name):
        x = ctx.inp(name, 0, x)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        scale, bias = (ctx.dim(name, x.ndim - 1, p) for p in scale_bias)
        y = (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale + bias
        return ctx.out(name, 0, y)


def _add(ctx, name, x, y):
    with jax.named_scope(name):
        return ctx.out(name, 0, ctx.inp(name, 0, x) + ctx.inp(name, 1, y))


def _embedding(ctx, name, ids, table):
    """The cost model's embedding: a one-hot (b, s, v) times the (v, d) table."""
    with jax.named_scope(name):
        ids = ctx.inp(name, 0, ids)
        onehot = jax.nn.one_hot(ids, table.shape[0], dtype=table.dtype)
        y = jnp.einsum("bsv,vd->bsd", onehot, ctx.inp(name, 1, table))
        return ctx.out(name, 0, y)


def _attention(ctx, params, pre, xs):
    n = _attn_names(pre)
    w = params[n["qkv"]]
    if len(xs) == 3:
        with jax.named_scope(n["stack"]):
            st = jnp.stack([ctx.inp(n["stack"], i, x) for i, x in enumerate(xs)])
            st = ctx.out(n["stack"], 0, st)
        qkv = _einsum(ctx, n["qkv"], "sble,shek->sbhlk", st, w)
    else:
        qkv = _einsum(ctx, n["qkv"], "ble,shek->sbhlk", xs[0], w)
    qkv = ctx.out(n["qkv"], 0, qkv)
    with jax.named_scope(n["split"]):
        qkv = ctx.inp(n["split"], 0, qkv)
        q, k, v = (ctx.out(n["split"], j, qkv[j]) for j in range(3))
    with jax.named_scope(n["scores"]):
        s = jnp.einsum("bhlk,bhmk->bhlm", ctx.inp(n["scores"], 0, q), ctx.inp(n["scores"], 1, k))
        s = ctx.out(n["scores"], 0, s / math.sqrt(q.shape[-1]))
    with jax.named_scope(n["softmax"]):
        s = ctx.out(n["softmax"], 0, jax.nn.softmax(ctx.inp(n["softmax"], 0, s), axis=3))
    with jax.named_scope(n["context"]):
        c = jnp.einsum("bhlm,bhmk->bhlk", ctx.inp(n["context"], 0, s), ctx.inp(n["context"], 1, v))
        c = ctx.out(n["context"], 0, c)
    o = ctx.out(n["out"], 0, _einsum(ctx, n["out"], "bhlk,hek->ble", c, params[n["out"]]))
    o = _add(ctx, n["residual"], xs[0], o)
    return _norm(ctx, n["norm"], o, params[n["norm"]])


def _feed_forward(ctx, params, pre, x):
    y = _einsum(ctx, f"{pre}/in", "ble,ef->blf", x, params[f"{pre}/in"])
    y = ctx.out(f"{pre}/in", 0, jax.nn.relu(y))
    y = ctx.out(f"{pre}/out", 0, _einsum(ctx, f"{pre}/out", "blf,fe->ble", y, params[f"{pre}/out"]))
    y = _add(ctx, f"{pre}/residual", x, y)
    return _norm(ctx, f"{pre}/norm", y, params[f"{pre}/norm"])


def transformer_loss(params, enc_ids, dec_ids, pos, labels, ctx: Ctx):
    enc_pre, dec_pre = _layer_prefixes(sum(k.startswith("enc") and k.endswith("/attn/qkv") for k in params))
    x = _embedding(ctx, "enc/embed", enc_ids, params["enc/embed"])
    x = _add(ctx, "enc/pos", x, pos)
    for pre in enc_pre:
        x = _feed_forward(ctx, params, f"{pre}/ffn", _attention(ctx, params, f"{pre}/attn", [x]))
    enc = x
    x = _embedding(ctx, "dec/embed", dec_ids, params["dec/embed"])
    x = _add(ctx, "dec/pos", x, pos)
    for pre in dec_pre:
        a = _attention(ctx, params, f"{pre}/self", [x])
        x = _feed_forward(ctx, params, f"{pre}/ffn", _attention(ctx, params, f"{pre}/cross", [a, enc, enc]))
    y = ctx.out("logits", 0, _einsum(ctx, "logits", "ble,ev->blv", x, params["logits"]))
    return softmax_xent(ctx, "softmax", y, labels)

