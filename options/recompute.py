"""Activation recomputation: keep less for the backward pass, re-run the
forward pass to get it back.  Defined on blocks of layers (a transformer
layer), after Korthikanti et al., "Reducing Activation Recomputation in
Large Transformer Models" (2022):

* ``none``: every operator keeps what its gradient needs;
* ``selective``: the attention core is recomputed: the attention
  probabilities (the outputs of a block's Softmax operators, large and
  cheap to make) are not kept; the softmax and the product that feeds it
  run their forward pass again in the backward pass;
* ``full``: the block keeps only what it reads from outside (its input);
  the backward pass re-runs the forward pass of every operator of the block,
  and holds the block's activations while it does (a transient, counted in
  the peak, not in what is kept).
"""

from __future__ import annotations

from dataclasses import replace

from options.base import Option, register


@register
class Recompute(Option):
    name = "recompute"
    values = ("none", "selective", "full")
    default = "none"
    scope = "block"
    help = "none, selective (the attention core) or full (only the block's input is kept)"

    def applies(self, op, context):
        return context.block is not None

    def work(self, value, op, C, work, context, rules):
        """The forward pass runs once more: in every operator of the block
        (``full``), or in those of the attention core (``selective``),
        with the reductions of its partial sums (a tensor-parallel
        layer's all-reduces run again)."""
        if value == "full" or value == "selective" and context.replays:
            again = tuple(c for c in work.comms if c.role == "partial sums")
            return replace(work, replays=work.replays + 1.0, comms=work.comms + again)
        return work

    def memory(self, value, op, C, footprint, context, rules):
        """What is not kept any more: everything but the block's input
        (``full``), or the attention probabilities (``selective``); the
        backward pass holds it again while the block is recomputed (a
        transient)."""
        if value == "none":
            return footprint
        if value == "full":
            drop = [t for origin, t in kept_tensors(op) if not (origin[0] == "in" and origin[1] in context.outside)]
        else:
            drop = [t for origin, t in kept_tensors(op) if origin in context.drops]
        if not drop:
            return footprint
        from kinds.base import shard_bytes

        gone = sum(shard_bytes(t, C, rules.cluster.word_bytes) for t in drop)  # (K,) bytes
        return replace(footprint, activations=footprint.activations - gone, transient=footprint.transient + gone)


def kept_tensors(op):
    """``(origin, tensor)`` of every tensor ``op`` keeps for its backward
    pass: ``("in", i)``, ``("out", j)`` or ``("own", None)`` (one of its
    own, such as an LSTM's gates)."""
    out = []
    for t in op.kind.saved(op):
        origin = next((("in", i) for i, x in enumerate(op.inputs) if x is t), None) or \
            next((("out", j) for j, x in enumerate(op.outputs) if x is t), ("own", None))
        out.append((origin, t))
    return out
