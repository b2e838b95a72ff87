"""Memory: the bytes an operator keeps per device at each configuration
(weights, gradients, optimizer state, kept activations) before execution
options change them, from its kind's formula and the cost model's bytes per
element (:meth:`cost.rules.CostModel.memory_bytes`).  Execution options
(``options/``) adjust a :class:`kinds.base.Footprint` on top of this.

A training framework (:mod:`frameworks`) changes what is kept as it runs
the operator (:func:`as_kept`): the loss's fp32 log-probabilities and
gradients, an activation's input kept beside its output, an input kept as
this device's shard under sequence parallelism, the FP8 copies of a
Float8 product's operands.
"""

from __future__ import annotations

import numpy as np

from cost.rules import CostModel, extents, regathered
from graph import Operator
from kinds import Extents, shard
from kinds.base import Footprint, shard_bytes

__all__ = ["op_memory", "footprint", "shared_weights", "as_kept", "kept_items"]

def op_memory(op: Operator, configs, shared=()) -> tuple[np.ndarray, np.ndarray]:
    """Per-device elements of ``op``'s (weights, kept activations) at each
    configuration (K,): its kind's memory formula, less the weights at the
    input positions ``shared`` (a tensor another operator holds, e.g. tied
    embeddings: held once)."""
    _, C = extents(op, configs)
    w, a = op.kind.memory(op, C)
    for i in shared:
        w = w - shard(op.inputs[i], C)
    K = len(C)
    return (np.broadcast_to(w, (K,)).astype(float, copy=True),
            np.broadcast_to(a, (K,)).astype(float, copy=True))


def footprint(op: Operator, C: Extents, model: CostModel, shared=(), inside: bool = False) -> Footprint:
    """The bytes ``op`` holds at each configuration with its options at
    their default: its kind's weights and kept activations
    (:func:`op_memory`'s elements) at the precision's bytes, as the
    model's framework keeps them (:func:`as_kept`; ``inside``: the
    operator belongs to a repeated block)."""
    w, a = op.kind.memory(op, C)
    for i in shared:
        w = w - shard(op.inputs[i], C)
    K = len(C)
    w = np.broadcast_to(w, (K,)).astype(float, copy=True)
    a = np.broadcast_to(a, (K,)).astype(float, copy=True)
    wb, gb, ob, ab = model.memory_bytes(w, a)
    kept = op.kind.saved(op)
    if any(t.bytes for t in kept):  # a tensor of its own bytes per element (a dropout's mask)
        b = model.cluster.word_bytes
        ab = np.broadcast_to(sum((shard_bytes(t, C, b) for t in kept), np.zeros(K)), (K,)).astype(float)
    fp = Footprint(wb, gb, ob, ab, np.zeros(K))
    return fp if model.framework is None else as_kept(op, C, model, fp, inside)


def as_kept(op: Operator, C: Extents, model: CostModel, fp: Footprint, inside: bool) -> Footprint:
    """``fp`` as the model's framework keeps it:

    * the loss (a softmax cross-entropy) keeps ``loss_kept[0]`` bytes per
      logit (eager: fp32 log-probabilities; compiled: the bf16 logits) and
      holds ``loss_kept[1]`` more at its peak (its gradients, or
      temporaries), a transient; ``loss_split`` with the vocabulary split;
    * a product whose epilogue is an activation keeps the activation's
      input (the product's output) beside its own input when the framework
      says so (Megatron-LM's bias-GeLU: Korthikanti et al.'s ``8 s b h``);
    * a mixture of experts' combine keeps the routing alone where the
      framework applies the routing weights in the experts' activation
      (its ``expert_weights``), not the experts' outputs;
    * an input kept as this device's shard under sequence parallelism
      (:func:`cost.rules.regathered`) counts ``1 / q`` of itself;
    * with Float8, a weighted product of a block holds FP8 copies (a byte
      per element) of its weights and input while it runs (a transient),
      and keeps its input for the backward pass at ``float8_saved`` bytes
      per element where the framework keeps the FP8 cast;
    * ring attention (:func:`cost.time.ring_parts`) holds, while it runs,
      the keys and values its kernels read (all-gathered, or its own and
      the ones in flight passed step by step) and, backward, their fp32
      gradients' running sum and the sum in flight (a transient).
    """
    fw = model.framework
    b = float(model.cluster.word_bytes)
    acts, transient = fp.activations, fp.transient
    if op.kind.name == "SoftmaxCrossEntropy":
        logits = shard(op.inputs[0], C)
        split = C[op.dims[op.kind.axis]] > 1  # (K,) a vocabulary-parallel loss
        kept, held = fw.loss_kept
        acts = np.where(split, fw.loss_split[0], kept) * logits
        transient = transient + np.where(split, fw.loss_split[1], held) * logits
    if fw.activation_input and getattr(op.kind, "activation", False):
        acts = acts + b * shard(op.outputs[0], C)
    if _weighted_before(op, fw):
        acts = acts - shard_bytes(op.inputs[0], C, b)
    for i, letters in regathered(op, C, model):
        t = op.inputs[i]
        acts = acts - shard_bytes(t, C, b) * (1.0 - 1.0 / C[letters])
    if _float8_weighted(op, model, inside):
        copies = sum(shard(t, C) for t in op.inputs if t.role != "data")
        transient = transient + copies
        if fw.float8_saved:  # its inputs kept for the backward pass as their FP8 casts
            acts = acts - sum(x for (kind, i), x in kept_items(op, C, model)
                              if kind == "in" and op.inputs[i].role != "weight") * (1.0 - fw.float8_saved / b)
    if op.kind.name == "FusedAttention" and op.kind.ring(op, model):
        transient = transient + _ring_buffers(op, C, model)
    K = len(C)
    return Footprint(fp.weights, fp.gradients, fp.optimizer, np.broadcast_to(acts, (K,)).astype(float),
                     np.broadcast_to(transient, (K,)).astype(float))


def _ring_buffers(op: Operator, C: Extents, model: CostModel):
    """Bytes ring attention holds beyond its inputs while it runs (K,):
    ``kv`` the keys and values its kernels read over ``c`` devices (the
    device's own ``kv / c`` an input), all of them all-gathered or two
    steps' worth in flight passed step by step, and two gradient buffers of
    ``kv / c`` (the running sum and the one in flight); nothing where
    ``c = 1``."""
    from cost.time import ring_kv

    c, kv, b, g = ring_kv(op, C, model)
    held = kv * (1.0 - 1.0 / c) if model.framework.ring == "allgather" else 2.0 * kv / c
    return np.where(c > 1, b * held + 2.0 * g * kv / c, 0.0)


def _weighted_before(op: Operator, fw) -> bool:
    """Whether ``op`` is a mixture of experts' combine whose routing weights
    the framework ``fw`` applied in the experts' activation (its
    ``expert_weights``): it keeps the routing, not the experts' outputs."""
    return fw is not None and fw.expert_weights == "activation" and op.kind.name == "Combine"


def _float8_weighted(op: Operator, model: CostModel, inside: bool) -> bool:
    """Whether ``op`` is a weighted product of a repeated block (``inside``)
    run in FP8 under the model's framework (``--float8``)."""
    fw = model.framework
    return bool(fw is not None and fw.float8 and inside and op.kind.name in ("Einsum", "FC")
                and any(t.role == "weight" for t in op.inputs))


def kept_items(op: Operator, C: Extents, model: CostModel, inside: bool = False) -> list:
    """``(origin, bytes)`` of each thing ``op`` keeps for its backward
    pass as the model's framework keeps it (what a recomputation may
    drop): each kept tensor (``("in", i)``, ``("out", j)``, ``("own",
    None)``), a sequence-parallel input at its shard's bytes
    (:func:`cost.rules.regathered`), a Float8 product's input at the bytes
    its framework keeps of it (``inside``: ``op`` belongs to a repeated
    block; :func:`as_kept`), and an activation's input kept beside the
    product's output (``("act", None)``)."""
    b = model.cluster.word_bytes
    shards = dict(regathered(op, C, model))
    fw = model.framework
    fp8 = fw.float8_saved / float(b) if fw is not None and fw.float8_saved and _float8_weighted(op, model, inside) \
        else 1.0
    out = []
    for t in op.kind.saved(op):
        origin = next((("in", i) for i, x in enumerate(op.inputs) if x is t), None) or \
            next((("out", j) for j, x in enumerate(op.outputs) if x is t), ("own", None))
        size = shard_bytes(t, C, b)
        if origin[0] == "in" and origin[1] in shards:
            size = size / C[shards[origin[1]]]
        if origin[0] == "in" and t.role != "weight":
            size = size * fp8
        out.append((origin, size))
    if _weighted_before(op, fw):
        out = [(origin, size) for origin, size in out if origin != ("in", 0)]
    if fw is not None and fw.activation_input and getattr(op.kind, "activation", False):
        out.append((("act", None), float(b) * shard(op.outputs[0], C)))
    return out


def shared_weights(g) -> dict[int, tuple[int, ...]]:
    """Per node, the input positions whose weight another operator holds."""
    out = {}
    for v, i in g.graph.get("shared", ()):
        out.setdefault(v, ())
        out[v] += (i,)
    return out
