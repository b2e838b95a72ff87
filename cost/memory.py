"""Memory: the bytes an operator keeps per device at each configuration
(weights, gradients, optimizer state, kept activations) before execution
options change them, from its kind's formula and the cost model's bytes per
element (:meth:`cost.rules.CostModel.memory_bytes`).  Execution options
(``options/``) adjust a :class:`kinds.base.Footprint` on top of this.
"""

from __future__ import annotations

import numpy as np

from cost.rules import CostModel, extents
from graph import Operator
from kinds import Extents, shard
from kinds.base import Footprint, shard_bytes

__all__ = ["op_memory", "footprint", "shared_weights"]

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


def footprint(op: Operator, C: Extents, model: CostModel, shared=()) -> Footprint:
    """The bytes ``op`` holds at each configuration with its options at
    their default: its kind's weights and kept activations
    (:func:`op_memory`'s elements) at the precision's bytes."""
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
    return Footprint(wb, gb, ob, ab, np.zeros(K))


def shared_weights(g) -> dict[int, tuple[int, ...]]:
    """Per node, the input positions whose weight another operator holds."""
    out = {}
    for v, i in g.graph.get("shared", ()):
        out.setdefault(v, ())
        out[v] += (i,)
    return out
