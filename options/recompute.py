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

A training framework (``frameworks/``) may select otherwise: Megatron-LM
recomputes the modules its ``recompute_modules`` name
(``--recompute-modules``, :data:`options.base.MODULES`; the attention
core by default): the outputs of the named modules' operators are not
kept by the operators of the block that read them, and those operators run
their forward pass again in the backward pass; torchtitan's
op-level selective checkpointing (``selective = "ops"``) saves the results
of matrix products, every second one (the first, third, ... separate
product of a block, :func:`options.base.products_of`), of fused
attention and of a mixture of experts' all-to-alls (not sent again), and
recomputes everything else; the block's input stays kept.
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
        layer's all-reduces run again) and the forward half of its
        all-to-alls (a mixture of experts' dispatch and combine); under
        op-level selection, the part of each operator whose result is not
        saved."""
        if value == "selective" and _by_ops(rules):
            # every collective off the save list runs again whatever the product's result: the all-reduce of its
            # partial sums, or under sequence parallelism the all-gather but not the (saved) reduce-scatter
            again, sums = 1.0 - _saved(op, context), 0.5 if rules.framework.sp else 1.0
            return _replayed(work, again, alltoalls=op.kind.name not in A2A_SAVED, sums=sums)
        if value == "full" or value == "selective" and _replays(context, rules):
            return _replayed(work, 1.0)
        return work

    def memory(self, value, op, C, footprint, context, rules):
        """What is not kept any more: everything but the block's input
        (``full``), or the attention probabilities (``selective``); the
        backward pass holds it again while the block is recomputed (a
        transient)."""
        if value == "none":
            return footprint
        if value == "selective" and _by_ops(rules):
            return _ops_memory(op, C, footprint, context, rules)
        if rules.framework is not None:  # what the framework keeps, item by item
            from cost.memory import kept_items

            items = kept_items(op, C, rules, context.block is not None)
        else:
            from kinds.base import shard_bytes

            items = [(origin, t) for origin, t in kept_tensors(op)]
        if value == "full":
            drop = [x for origin, x in items if not (origin[0] == "in" and origin[1] in context.outside)]
        else:
            drops = _drops(context, rules)
            drop = [x for origin, x in items if origin in drops]
        if not drop:
            return footprint
        if rules.framework is None:
            drop = [shard_bytes(t, C, rules.cluster.word_bytes) for t in drop]
        gone = sum(drop)  # (K,) bytes
        return replace(footprint, activations=footprint.activations - gone, transient=footprint.transient + gone)


def _modules(rules):
    """The modules the framework's selective recomputation re-runs
    (``None``: the attention core, as the tool's own rule says)."""
    fw = rules.framework
    return fw.recompute_modules if fw is not None and fw.recompute_modules else None


def _replays(context, rules) -> bool:
    """Whether an operator runs its forward pass again under selective
    recomputation: in the attention core, or in a module it names."""
    mods = _modules(rules)
    core = context.replays and (mods is None or "core_attn" in mods)
    return bool(core or (mods is not None and context.module in mods))


def _drops(context, rules) -> set:
    """What selective recomputation drops of an operator's kept tensors:
    the attention core's probabilities, and the outputs of the modules the
    framework names."""
    mods = _modules(rules)
    out = set(context.drops) if mods is None or "core_attn" in mods else set()
    if mods is not None:
        out |= {origin for m, origin in context.module_drops if m in mods}
    return out


def _by_ops(rules) -> bool:
    """Whether the framework's selective recomputation is op-level."""
    fw = rules.framework
    return fw is not None and fw.selective == "ops"


#: the operators whose all-to-all's result op-level selection saves (torchtitan's ``_op_sac_save_list``
#: names ``_c10d_functional.all_to_all_single``, and DeepEP's dispatch and combine, "to avoid
#: re-communication"): the all-to-all is not sent again, the rest of their forward pass runs again.  The
#: list names ``_c10d_functional.reduce_scatter_tensor`` too: under sequence parallelism a row-parallel
#: product's reduce-scatter is not sent again, the all-gathers before the column-parallel products are
#: (half of the all-reduces the model counts for the partial sums; without it, the all-reduces run again)
A2A_SAVED = ("Dispatch", "Combine")


def _saved(op, context) -> float:
    """The share of ``op``'s result op-level selection saves: all of fused
    attention's, the share of a weighted product's output its odd-numbered
    separate products make (counted through the block), none of anything
    else's (a dispatch's or combine's all-to-all result is saved, but the
    rest of its forward pass runs again: :data:`A2A_SAVED`)."""
    from options.base import products_of

    if op.kind.name == "FusedAttention":
        return 1.0
    parts = products_of(op)
    if not parts:
        return 0.0
    return sum(x for j, x in enumerate(parts) if (context.products + j) % 2 == 0) / float(sum(parts))


def _ops_memory(op, C, footprint, context, rules):
    """Op-level selection: ``op`` keeps the block's input it reads and the
    share of its result that is saved (fused attention: its output and
    statistics); what it kept otherwise is recomputed for the backward pass
    (a transient)."""
    from cost.memory import kept_items
    from kinds.base import shard_bytes

    b = rules.cluster.word_bytes
    items = kept_items(op, C, rules, context.block is not None)
    if op.kind.name == "FusedAttention":
        gone = [x for origin, x in items if origin[0] == "in" and origin[1] not in context.outside]
    else:
        gone = [x for origin, x in items if not (origin[0] == "in" and origin[1] in context.outside)]
    if not gone and not op.outputs:
        return footprint
    share = _saved(op, context) if op.kind.name != "FusedAttention" else 0.0
    dropped = sum(gone) if gone else 0.0
    saved = share * shard_bytes(op.outputs[0], C, b) if share else 0.0
    if op.kind.name in A2A_SAVED:  # the all-to-all's result: the dispatch's output, the experts' results the
        saved = saved + shard_bytes(op.outputs[0] if op.kind.name == "Dispatch" else op.inputs[0], C, b)  # combine
        # receives (as many elements as the experts send back)
    return replace(footprint, activations=footprint.activations - dropped + saved,
                   transient=footprint.transient + dropped)


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


def _replayed(work, again: float, alltoalls: bool = True, sums: float | None = None):
    """``work`` with its forward pass run ``again`` times more: its partial
    sums reduced again (``again`` times, or ``sums`` times where given:
    op-level selection sends its collectives again whatever share of the
    product it saves), and its all-to-alls (counted forward and backward)
    sent forward again, unless their results are saved (``alltoalls``
    false)."""
    more = tuple(replace(c, count=c.count * (again if sums is None else sums)) for c in work.comms
                 if c.role == "partial sums")
    if alltoalls:
        more += tuple(replace(c, count=c.count * again / 2.0) for c in work.comms
                      if c.role == "exchange" and c.pattern == "alltoall")
    return replace(work, replays=work.replays + again, comms=work.comms + more)
