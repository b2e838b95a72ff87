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
