"""ZeRO / FSDP sharding (Rajbhandari et al., "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models", SC'20) over the devices that
hold the same shard of a weight, its data-parallel replicas under the
operator's configuration:

* stage 1 shards the optimizer state, stage 2 the gradients too, stage 3
  the weights too, each over the ``q`` replicas (``1/q`` of it per device);
* stages 1 and 2 replace the gradients' all-reduce by a reduce-scatter and
  an all-gather, which move what the all-reduce moves on a ring: the same
  cost; stage 3 gathers the weights before the forward pass and again
  before the backward pass, and reduce-scatters the gradients: one more
  all-gather than stages 0 to 2 (1.5 times their volume), and the gathered
  weights are held while the operator runs (a transient).
"""

from __future__ import annotations

from options.base import Option, register


@register
class Zero(Option):
    name = "zero"
    values = (0, 1, 2, 3)
    default = 0
    scope = "operator"
    help = "ZeRO stage: 0 none, 1 optimizer state, 2 and gradients, 3 and weights sharded over the replicas"

    def applies(self, op, context):
        return any(t.role == "weight" for t in op.inputs)

    def parse(self, text):
        return super().parse(str(text).strip())
