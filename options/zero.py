"""ZeRO / FSDP sharding (Rajbhandari et al., "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models", SC'20) over the devices that
hold the same shard of a weight, its data-parallel replicas under the
operator's configuration:

* stage 1 shards the optimizer state, stage 2 the gradients too, stage 3
  the weights too, each over the ``q`` replicas (``1/q`` of it per device);
  a training framework (``frameworks/``) says which of its copies each
  stage shards and how many bytes each takes;
* stages 1 and 2 replace the gradients' all-reduce by a reduce-scatter and
  an all-gather, which move what the all-reduce moves on a ring: the same
  cost; stage 3 gathers the weights before the forward pass and again
  before the backward pass, and reduce-scatters the gradients: one more
  all-gather than stages 0 to 2 (1.5 times their volume), and the gathered
  weights are held while the operator runs (a transient).
"""

from __future__ import annotations

from dataclasses import replace

from options.base import Option, register


@register
class Zero(Option):
    name = "zero"
    values = (0, 1, 2, 3)
    default = 0
    scope = "operator"
    help = "ZeRO stage: 0 none, 1 optimizer state, 2 and gradients, 3 and weights sharded over the replicas"

    def applies(self, op, context):
        return bool(weights_of(op, context))

    def parse(self, text):
        return super().parse(str(text).strip())

    def work(self, value, op, C, work, context, rules):
        """Stage 3: the gradients' all-reduces become reduce-scatters, and
        each weight is all-gathered over its replicas before the forward and
        before the backward pass (two all-gathers: with the reduce-scatter,
        1.5 times an all-reduce's volume).  Stages 2 and 3 mark the work's
        gradients sharded (``Work.sharded``: a framework may overlap them
        whatever the cluster's overlap)."""
        if value >= 1 and rules.framework is not None:  # the optimizer step updates this device's share
            from kinds.base import shard

            work = replace(work, updated=sum((shard(t, C) / C[letters] for t, letters in weights_of(op, context)),
                                             0.0))
        if value >= 2:
            work = replace(work, sharded=True)
        if value < 3:
            return work
        from kinds.base import Comm, shard

        comms = tuple(replace(c, pattern="reducescatter") if c.role == "gradients" and c.pattern == "allreduce"
                      else c for c in work.comms)
        gathers = tuple(Comm("weights", "allgather", shard(t, C), letters, count=2.0)
                        for t, letters in weights_of(op, context))
        return replace(work, comms=comms + gathers)

    def memory(self, value, op, C, footprint, context, rules):
        """Each weight's optimizer state (stage 1), its gradient too (2)
        and the weight itself (3) divided among its ``q`` replicas; stage 3
        holds the gathered weights while the operator runs, the one in use
        and the next one prefetched, and its gradient before the
        reduce-scatter (a transient).  As a framework keeps them (its bytes
        per copy and stage); in a pipeline stage (of several), a framework
        may keep the gathered weights and whole gradients for the step
        (``staged``, :func:`cost.rules.keeps_stage_whole`); micro-batches
        accumulated without a pipeline gather and reduce them each.
        A Float8 product whose framework gathers its weights in FP8 before
        each pass holds them gathered at a byte per element (a pipeline
        stage's weights kept for the step are counted as without Float8:
        no published run states what FSDP2 keeps of them then)."""
        if value == 0:
            return footprint
        from cost.rules import float8_product, gathered_in_fp8, keeps_stage_whole
        from kinds.base import shard

        (w_whole, w_sh), (g_whole, g_sh), (o_whole, o_sh) = rules.stage_bytes(value)
        gathered = rules.gathered_bytes()
        fw = rules.framework
        staged = value >= 3 and keeps_stage_whole(rules)
        if staged:  # a pipeline stage's weights gathered once, its gradients accumulated whole (a bf16 gradient
            # held while its operator runs)
            w_whole, g_whole, gathered = w_whole + fw.staged[0], g_whole + fw.staged[1], 2.0
        fp8 = 0.0  # a Float8 product's weights gathered in FP8 before each pass: the gathered copies (the one
        if value >= 3 and not staged and gathered_in_fp8(rules, "weights") and \
                float8_product(op, context, rules):  # in use and the next) at a byte rather than b, and no FP8
            fp8 = 1.0 + 2.0 * (float(rules.cluster.word_bytes) - 1.0)  # copy of their own (as_kept)
        w = g = o = transient = 0.0
        for t, letters in weights_of(op, context):
            held = shard(t, C)  # (K,) elements of the weight a device holds without ZeRO
            mine = held / C[letters]  # (K,) its share of them among the q replicas
            o = o + _part(held, mine, o_whole, o_sh)
            g = g + _part(held, mine, g_whole, g_sh)
            w = w + _part(held, mine, w_whole, w_sh)
            if value >= 3:
                transient = transient + held * (gathered - fp8)
        return replace(footprint, weights=footprint.weights * 0.0 + w, gradients=footprint.gradients * 0.0 + g,
                       optimizer=footprint.optimizer * 0.0 + o, transient=footprint.transient + transient)


def _part(held, mine, whole: float, sharded: float):
    """Bytes of one part of a weight's states: ``whole`` bytes per element
    it holds, ``sharded`` per element of its share."""
    if not sharded:
        return held * whole
    if not whole:
        return mine * sharded
    return held * whole + mine * sharded


def weights_of(op, context):
    """``(tensor, replica letters)`` of each weight ``op`` holds (not one
    another operator holds: a tied embedding is sharded where it is
    counted): the letters of its iteration space that split none of the
    weight's axes, whose devices hold the same shard."""
    out = []
    for i, t in enumerate(op.inputs):
        if t.role == "weight" and i not in context.shared:
            mine = set("".join(t.axes))
            out.append((t, "".join(c for c in op.dims if c not in mine)))
    return out



