"""A JAX model made from a PaSE graph, operator for operator: what runs a
plan of a model read from a file (a Hugging Face ``config.json``), whose
graph is all the tool knows of it.

Every operator of the graph is one block, run under
``jax.named_scope(name)``; every tensor it reads or writes, weights
included, passes through the ``Ctx`` hook of ``jax_models.py`` (where a
plan's shardings are applied).  The kinds a decoder is made of are
computed as they are defined (``kinds/``): ``Embedding`` as the cost
model's one-hot product (so that splitting the vocabulary means the same
here), ``Einsum`` with its bias, ``FusedAttention`` (causal softmax of the
scores, the context), ``Norm`` and ``RMSNorm``, ``Softmax``,
``SoftmaxCrossEntropy`` (the mean negative log-likelihood of labels),
``Elementwise`` (a sum; with pointwise work, ``silu(a) * b``),
``Unstack``, ``Split`` and ``Stack``.  An operator's own pointwise work (an
activation, rotary positions) is a GELU of its output: it costs the same
and shards alike.  A kind without a JAX counterpart here (a dropout,
which is random) stops the run with a message.

An operator names the node writing each of its inputs (``reads``), and
the edge from that node which of its outputs the last of them is; when it
reads several outputs of one node (queries, keys and values of a split),
the others are taken in order among the node's other outputs of the same
shape, which is how the model builders wire them.  A weight that another operator already reads (tied
embeddings, the graph's ``shared``) is the first weight of the same shape.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp


class UnsupportedGraph(SystemExit):
    """A graph with a kind this module cannot run."""


def _wiring(g):
    """{(node, input position): (producer, output index)} of every activation input."""
    from graph import operators

    ops = operators(g)
    out = {}
    for v, op in enumerate(ops):
        reads = g.nodes[v]["reads"]
        last = {u: (e["inp"], e["out"]) for u, _, e in g.in_edges(v, data=True)}  # the last input read from u
        taken = {}
        for i, (u, t) in enumerate(zip(reads, op.inputs)):
            if u is None:
                continue
            producer = ops[u]
            if last[u][0] == i:
                out[(v, i)] = (u, last[u][1])
                continue
            same = [j for j, o in enumerate(producer.outputs) if o.shape == t.shape and j != last[u][1]]
            k = taken.get(u, 0)
            taken[u] = k + 1
            if k < len(same):
                out[(v, i)] = (u, same[k])
            elif producer.outputs[last[u][1]].shape == t.shape:  # the same output read twice
                out[(v, i)] = (u, last[u][1])
            else:
                raise UnsupportedGraph(f"{op.name}: cannot tell which output of {producer.name} input {i} is")
    return out


class GraphModel:
    """Parameters, data and the loss of the graph ``g`` (see the module
    docstring)."""

    def __init__(self, g):
        from graph import operators

        self.g = g
        self.ops = operators(g)
        self.wiring = _wiring(g)
        for op in self.ops:
            if op.kind.name not in _KINDS:
                raise UnsupportedGraph(f"graph_model.py: {op.name} is a {op.kind.name}, which it cannot run "
                                       f"(it runs {', '.join(sorted(_KINDS))})")
        shared = set(map(tuple, g.graph.get("shared", ())))
        self.weights, self.tied = [], {}
        for v, op in enumerate(self.ops):
            for i, t in enumerate(op.inputs):
                if t.role != "weight":
                    continue
                if (v, i) in shared:
                    first = next(w for w in self.weights if self.ops[w[0]].inputs[w[1]].shape == t.shape)
                    self.tied[(v, i)] = first
                else:
                    self.weights.append((v, i))
        self.data_inputs = [(v, i) for v, op in enumerate(self.ops) for i, t in enumerate(op.inputs)
                            if t.role == "data"]
        self.loss_node = next(v for v, op in enumerate(self.ops) if op.kind.name == "SoftmaxCrossEntropy")

    def key(self, v, i) -> str:
        """The name of the weight input ``i`` of node ``v`` among the parameters."""
        return f"{self.ops[v].name}:{i}"

    def params(self, rng):
        out = {}
        for n, (v, i) in enumerate(self.weights):
            op, t = self.ops[v], self.ops[v].inputs[i]
            k = jax.random.fold_in(rng, n)
            if len(t.shape) == 1:  # a norm's scale or shift, a bias
                base = 1.0 if op.kind.name in ("Norm", "RMSNorm") and i == 1 else 0.0
                out[self.key(v, i)] = base + 0.1 * jax.random.normal(k, t.shape, jnp.float32)
            else:
                fan_in = max(1, math.prod(t.shape) // max(t.shape))
                out[self.key(v, i)] = jax.random.normal(k, t.shape, jnp.float32) / math.sqrt(fan_in)
        return out

    def data(self, rng):
        """The data inputs (token ids, positions) and the labels, in order."""
        out = []
        for n, (v, i) in enumerate(self.data_inputs):
            t, k = self.ops[v].inputs[i], jax.random.fold_in(rng, n)
            if self.ops[v].kind.name == "Embedding":  # ids
                out.append(jax.random.randint(k, t.shape, 0, self.ops[v].inputs[1].shape[0]))
            else:  # values (the built-in Transformer's positions)
                out.append(0.1 * jax.random.normal(k, t.shape, jnp.float32))
        logits = self.ops[self.loss_node].inputs[0]
        out.append(jax.random.randint(jax.random.fold_in(rng, 10**6), logits.shape[:-1], 0, logits.shape[-1]))
        return out

    def loss(self, params, *data, ctx):
        """The mean negative log-likelihood of the labels (the last of ``data``)."""
        feeds = {vi: x for vi, x in zip(self.data_inputs, data[:-1])}
        labels = data[-1]
        env, result = {}, None
        for v, op in enumerate(self.ops):
            with jax.named_scope(op.name):
                xs = []
                for i, t in enumerate(op.inputs):
                    if t.role == "weight":
                        x = params[self.key(*self.tied.get((v, i), (v, i)))]
                    elif t.role == "data":
                        x = feeds[(v, i)]
                    else:
                        x = env[self.wiring[(v, i)]]
                    xs.append(ctx.inp(op.name, i, x))
                if v == self.loss_node:
                    logp = ctx.out(op.name, 0, jax.nn.log_softmax(xs[0], axis=-1))
                    result = -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))
                    env[(v, 0)] = logp
                    continue
                ys = _KINDS[op.kind.name](op, xs)
                for j, y in enumerate(ys):
                    env[(v, j)] = ctx.out(op.name, j, y)
        return result


def _pointwise(y, pw):
    return jax.nn.gelu(y) if pw else y


def _einsum(op, xs):
    k = op.kind
    y = jnp.einsum(k.equation, xs[0], xs[1])
    if k.bias:
        out = k.equation.split("->")[1]
        n = op.inputs[2].axes
        bias = xs[2].reshape([xs[2].shape[n.index(c)] if c in n else 1 for c in out]) if list(n) == [
            c for c in out if c in n] else None
        if bias is None:
            raise UnsupportedGraph(f"{op.name}: a bias whose letters are not in the output's order")
        y = y + bias
    return (_pointwise(y, k.pw),)


def _fc(op, xs):
    y = xs[0] @ xs[1]
    if op.kind.bias:
        y = y + xs[2]
    return (_pointwise(y, op.kind.pw),)


def _embedding(op, xs):
    ids, table = xs
    return (jnp.einsum("...v,vd->...d", jax.nn.one_hot(ids, table.shape[0], dtype=table.dtype), table),)


def _attention(op, xs):
    q, k, v = xs
    s = jnp.einsum("...sd,...td->...st", q, k) / math.sqrt(q.shape[-1])
    if op.kind.causal:
        n, m = s.shape[-2], s.shape[-1]
        s = jnp.where(jnp.arange(n)[:, None] >= jnp.arange(m)[None, :], s, -1e30)
    return (jnp.einsum("...st,...td->...sd", jax.nn.softmax(s, axis=-1), v),)


def _norm(op, xs):
    x, a = xs[0], op.kind.axis
    if op.kind.name == "RMSNorm":
        y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=a, keepdims=True) + 1e-5)
    else:
        mean = jnp.mean(x, axis=a, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(jnp.mean(jnp.square(x - mean), axis=a, keepdims=True) + 1e-5)
    shape = [1] * x.ndim
    shape[op.kind.param_axis] = x.shape[op.kind.param_axis]
    for w, weight in enumerate(xs[1:]):
        y = y * weight.reshape(shape) if w == 0 else y + weight.reshape(shape)
    return (_pointwise(y, op.kind.pw),)


def _elementwise(op, xs):
    if op.kind.pw and len(xs) == 2:
        return (jax.nn.silu(xs[0]) * xs[1],)
    y = xs[0]
    for x in xs[1:]:
        y = y + x
    return (_pointwise(y, op.kind.pw),)


def _split(op, xs):
    edges = list(itertools.accumulate(op.kind.sizes))[:-1]
    return tuple(jnp.split(xs[0], edges, axis=op.kind.axis))


_KINDS = {
    "Einsum": _einsum,
    "FC": _fc,
    "Embedding": _embedding,
    "FusedAttention": _attention,
    "Norm": _norm,
    "RMSNorm": _norm,
    "Softmax": lambda op, xs: (jax.nn.softmax(xs[0], axis=op.kind.axis),),
    "SoftmaxCrossEntropy": None,  # the loss, computed by GraphModel.loss
    "Elementwise": _elementwise,
    "Unstack": lambda op, xs: tuple(xs[0][i] for i in range(xs[0].shape[0])),
    "Split": _split,
    "Stack": lambda op, xs: (jnp.stack(xs),),
}
