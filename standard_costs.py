"""Standard configurations costed by counting: each kind of operator once.

A standard configuration (:mod:`standard`) decides alike for operators
alike: the same split and options for every operator equal up to names in
the same context (:func:`options.contexts`), so for the repeated blocks of
a transformer, the same decision in every block.  The figures
``planner._standard_result`` gives a configuration (the step and the peak
memory of :func:`cost_model.evaluate`, or of :func:`pipeline.evaluate`
with stages or accumulated micro-batches) are sums, over the operators and
edges of the model or of each stage, of per-operator and per-edge figures
that depend only on

* the operator's *class* (the operator up to names, and its context),
* its decision (splits and options),
* the cluster it runs on (the whole one, or a stage's: :func:`pipeline.stage_cluster`),

and, for an edge, the classes and splits at both ends.  :class:`Costing`
works each of these out once, for every configuration that needs it at
once (the cost model's functions take many splits together), and costs a
configuration by counting: how many operators and edges of each class the
model, or a stage, holds (a stage is the embedding and ``c`` blocks, ``c``
blocks, or ``c`` blocks and the head), times their figures; the stages are
assembled by :func:`pipeline.assemble`, as when a pipeline is evaluated.

The counts and figures are the same numbers the plan's own evaluation
sums, in another order: an estimate equal to it up to rounding (a few
units in the last place).  :mod:`standard_search` uses the estimates to
rank and bound, and decides what rounding could change (near ties, a
memory at the capacity) with the plan's own evaluation.

:meth:`Costing.floor` bounds a configuration's step from below, whatever
its recomputation: its step without (recomputation adds forward passes and
the collectives they repeat, and leaves the rest as it is); with stages,
the pipeline's time without the gradients' synchronisation after the last
micro-batch (a busier stage may hide more of it).  ZeRO stages 0 to 2
take the same time, but with a framework stages 1 and 2 shorten the
optimizer step (each device updates its shard), so they are bounded apart
from 0 there; stage 3 is bounded apart.  :meth:`Costing.least_states`
bounds its memory from below without costing anything: the weights,
gradients and optimizer state of the parameters at their most sharded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from errors import InputError
from frameworks.host import in_expert_blocks, micro_batch, wait, waits

__all__ = ["Costing", "Estimate"]

PLAIN = "plain"  # the whole model at the whole batch on the whole cluster (no stages)
_FIELDS = 8  # per operator: compute, communication, synchronisation, the four memory parts, transient


@dataclass(frozen=True)
class Estimate:
    """A configuration's step (FLOP at the device's peak) and peak memory
    per device (bytes), ``sig``: what decides them (equal signatures, equal
    figures bit for bit), and ``floor``: what no recomputation can make
    faster (the step without stages; with stages, the pipeline's time
    without the gradients' synchronisation at the end, which more work in
    a stage may hide better)."""

    cost: float
    memory: float
    sig: tuple
    floor: float


class _EdgeTable:
    """The costs of one edge class: a matrix of source configurations
    (rows) by target configurations (columns), grown as more are asked."""

    def __init__(self):
        self.src: dict = {}  # configuration -> row
        self.tgt: dict = {}  # configuration -> column
        self.m = np.empty((0, 0))

    def get(self, a, b):
        i, j = self.src.get(a), self.tgt.get(b)
        return None if i is None or j is None else float(self.m[i, j])

    def extend(self, sources, targets, m) -> None:
        for a in sources:
            self.src[a] = len(self.src)
        for b in targets:
            self.tgt[b] = len(self.tgt)
        self.m = m


class _Layout:
    """One graph (the model at a micro-batch): its operators' classes, its
    edges' classes, and the sums of ranges of operators (stages).

    Built from the whole graph, or from the model with only its first
    blocks (``blocks``: how many the whole model has): every block beyond
    the first and before the last is then the second one again (the
    same classes and edges, block after block), which is what the whole
    graph holds (:meth:`Costing.layout` checks its chain against the whole
    model's)."""

    def __init__(self, g, blocks: int | None = None):
        from blocks import find_chains
        from graph import operators
        from options import contexts

        self.g = g
        self.short = blocks is not None
        ops = operators(g)
        chains = find_chains(g)
        chain = max(chains, key=lambda c: c.count * c.size) if chains else None
        ctx = contexts(g, chains)
        ids: dict = {}
        node_class = []
        self.reps = []  # per class: (operator, context)
        for op, c in zip(ops, ctx):
            key = (op, c.key)
            if key not in ids:
                ids[key] = len(ids)
                self.reps.append((op, c))
            node_class.append(ids[key])
        self.nc = len(self.reps)
        edges = sorted((u, v, d["out"], d["inp"]) for u, v, d in g.edges(data=True))
        eids: dict = {}
        edge_class = []
        self.edge_reps = []  # per class: (source class, output, target class, input)
        for u, v, o, i in edges:
            key = (node_class[u], o, node_class[v], i)
            if key not in eids:
                eids[key] = len(eids)
                self.edge_reps.append(key)
            edge_class.append(eids[key])
        self.ne = len(self.edge_reps)
        sizes = [ops[u].outputs[o].size for u, _, o, _ in edges]
        group = [("block", c.block) if c.block is not None else ("op", v) for v, c in enumerate(ctx)]
        edges = [(u, v, o, e, z) for (u, v, o, _), e, z in zip(edges, edge_class, sizes)]
        self.chain = chain
        from pipeline import block_layers

        self.layers = block_layers(g, chain) if chain is not None else 1  # read once: every point's split asks it
        if blocks is not None and (chain is None or chain.count != 3 or blocks < 3):
            raise ValueError("the model's first layers are not three blocks")
        if blocks is not None:  # the blocks beyond the second and before the last, added
            from dataclasses import replace as copy

            node_class, edges, group = _stretch(chain, blocks, node_class, edges, group)
            self.chain = copy(chain, count=blocks)
        self.n = len(node_class)
        self.node_class = np.asarray(node_class, dtype=np.intp)
        self.eu = np.asarray([e[0] for e in edges], dtype=np.intp)
        self.ev = np.asarray([e[1] for e in edges], dtype=np.intp)
        self.eout = np.asarray([e[2] for e in edges], dtype=np.intp)
        self.edge_class = np.asarray([e[3] for e in edges], dtype=np.intp)
        self.esize = np.asarray([e[4] for e in edges], dtype=np.int64)
        # the groups whose transients add up (a block; an operator outside blocks alone), by kind
        groups: dict = {}
        for v, key in enumerate(group):
            groups.setdefault(key, []).append(v)
        kinds: dict = {}
        first, group_kind = [], []
        for members in groups.values():
            counts = np.bincount(self.node_class[members], minlength=self.nc)
            group_kind.append(kinds.setdefault(counts.tobytes(), len(kinds)))
            first.append(members[0])
        self.kinds = np.zeros((len(kinds), self.nc))
        for key, k in kinds.items():
            self.kinds[k] = np.frombuffer(key, dtype=np.intp)
        self.group_kind = np.asarray(group_kind, dtype=np.intp)
        self.group_first = np.asarray(first, dtype=np.intp)
        # whether each node is in a block that dispatches tokens to experts (frameworks.host), and is a dispatch
        experts = {c for c, (op, _) in enumerate(self.reps) if op.kind.name == "Dispatch"}
        dispatches = [c in experts for c in node_class]
        self.moe = np.asarray(in_expert_blocks(dispatches, [k if k[0] == "block" else None for k in group]))
        self.dispatch = np.asarray(dispatches, dtype=bool) & self.moe
        self.moe_classes = {c for c, inside in zip(node_class, self.moe) if inside}
        self._ranges: dict = {}
        self._moe: dict = {}

    def experts(self, lo: int, hi: int):
        """The operators ``[lo, hi)`` in blocks that dispatch tokens to
        experts: their count by class, their edges' count by class, and how
        many dispatches (expert layers) they hold."""
        key = (lo, hi)
        if key not in self._moe:
            mine = self.moe[lo:hi]
            cc = np.bincount(self.node_class[lo:hi][mine], minlength=self.nc).astype(float)
            sel = (self.eu >= lo) & (self.eu < hi) & (self.ev >= lo) & (self.ev < hi) & self.moe[self.eu]
            ec = np.bincount(self.edge_class[sel], minlength=self.ne).astype(float)
            self._moe[key] = (cc, ec, int(self.dispatch[lo:hi].sum()))
        return self._moe[key]

    def summary(self, lo: int, hi: int):
        """The operators ``[lo, hi)``: their count by class, their edges'
        count by class, the kinds of transient groups they hold, and the
        elements they send to later operators."""
        key = (lo, hi)
        if key not in self._ranges:
            cc = np.bincount(self.node_class[lo:hi], minlength=self.nc).astype(float)
            inside = (self.eu >= lo) & (self.eu < hi) & (self.ev >= lo) & (self.ev < hi)
            ec = np.bincount(self.edge_class[inside], minlength=self.ne).astype(float)
            kinds = np.unique(self.group_kind[(self.group_first >= lo) & (self.group_first < hi)])
            out = (self.eu >= lo) & (self.eu < hi) & (self.ev >= hi)
            pairs = np.unique(np.stack([self.eu[out], self.eout[out]], axis=1), axis=0) if out.any() else ()
            sizes = {(int(u), int(o)): int(s) for u, o, s in zip(self.eu[out], self.eout[out], self.esize[out])}
            crossing = float(sum(sizes[(int(u), int(o))] for u, o in pairs))
            self._ranges[key] = (cc, ec, self.kinds[kinds], crossing)
        return self._ranges[key]


def _stretch(chain, blocks: int, node_class, edges, group):
    """The classes, edges ``(source, target, output, class, elements)`` and
    transient groups of a model of ``blocks`` blocks, from those of the
    same model with the three blocks of ``chain``: the operators before the
    chain, its first block, the second block ``blocks - 2`` times, its last
    block, and what follows (node ids shifted); each block's edges, and
    those from one block to the next, as in the blocks they repeat."""
    k, size, start = chain.count, chain.size, chain.start
    extra = (blocks - k) * size  # nodes added

    def where(v):  # -1 before the chain, the block, or k after it
        return -1 if v < start else k if v >= chain.stop else (v - start) // size

    def moved(v, to):  # node v of its block (or after the chain), in block ``to`` of the long model
        b = where(v)
        return v + extra if b == k else v if b < 0 else v + (to - b) * size

    def spread(b):  # the blocks of the long model block ``b`` of the short one stands for
        return [0] if b == 0 else range(1, blocks - 1) if b == 1 else [blocks - 1]

    cls = list(node_class[:start + size])
    for _ in range(blocks - 2):
        cls += node_class[start + size:start + 2 * size]
    cls += node_class[chain.stop - size:]
    out = []
    for u, v, o, e, z in edges:
        bu, bv = where(u), where(v)
        if bu == bv and 0 <= bu < k:  # inside a block
            out += [(moved(u, t), moved(v, t), o, e, z) for t in spread(bu)]
        elif 0 <= bu < k and bv == bu + 1 < k:  # from one block to the next: the last one's, else the first's
            targets = [blocks - 2] if bu == k - 2 and bu > 0 else range(0, blocks - 2) if bu == 0 else []
            out += [(moved(u, t), moved(v, t + 1), o, e, z) for t in targets]
        else:  # before or after the chain, into its first block, out of its last
            out.append((moved(u, blocks - 1 if bu == k - 1 else 0), moved(v, 0), o, e, z))
    grp = []
    for v in range(len(cls)):
        if v < start:
            grp.append(group[v])
        elif v >= start + blocks * size:
            grp.append(group[v - extra])
        else:
            grp.append(("block", (v - start) // size))
    return cls, out, grp


class _Part:
    """What :func:`pipeline.assemble` reads of a stage's result."""

    __slots__ = ("compute", "communication", "sync", "memory", "transient", "sharded_gradients")

    def __init__(self, compute, communication, sync, memory, transient, sharded_gradients):
        self.compute, self.communication, self.sync = compute, communication, sync
        self.memory, self.transient, self.sharded_gradients = memory, transient, sharded_gradients


class Costing:
    """The figures of standard configurations of one model (``build(b)``:
    its graph at a batch of ``b`` samples; ``batch`` the step's) on ``p``
    devices under the cost model ``model`` (see the module docstring)."""

    def __init__(self, build, model, p: int, batch: int, first_layers=None, chain=None):
        self.build, self.model, self.p, self.batch = build, model, p, batch
        self._first, self._chain = first_layers, chain
        self._layouts: dict = {}
        self._decided: dict = {}
        self._roles: dict = {}  # (layout, the degrees check_roles reads) -> the roles
        self._moments: dict = {}  # (schedule, stage, pp, micro-batches) -> pipeline.Schedule.forward_moments
        self._ops: dict = {}  # (micro, variant, class, options) -> {config: figures}
        self._edges: dict = {}  # (micro, variant, edge class) -> _EdgeTable
        self._wanted: dict = {}  # (micro, variant) -> per class, the configurations registered
        self._models = {}  # variant (see shape) -> its cost model
        self.calls = 0  # batched calls of the cost model's functions
        self._params = None
        self._estimates: dict = {}

    # -- what a configuration is made of ------------------------------------------------
    @property
    def graphs(self) -> dict:
        """The whole graphs built so far, by batch, with their chains."""
        return {micro: (L.g, L.chain) for micro, L in self._layouts.items() if not L.short}

    def layout(self, micro: int) -> _Layout:
        """The graph at a batch of ``micro`` samples: built with three of its
        blocks when ``first_layers(micro, 3)`` can (a graph and how many
        blocks the model has), and its chain stretched is the whole
        model's (``chain``); else the whole graph."""
        if micro not in self._layouts:
            L = None
            if self._first is not None and self._chain is not None:
                got = self._first(micro, 3)
                if got is not None:
                    try:
                        L = _Layout(*got)
                    except ValueError:
                        L = None
                    if L is not None and L.chain != self._chain:
                        L = None
            self._layouts[micro] = L if L is not None else _Layout(self.build(micro))
        return self._layouts[micro]

    def shape(self, std):
        """``(micro, variant, staged)``: the graph's batch, the variant of
        the cost model the operators are costed under (where they run: the
        whole cluster or a stage's devices; and whether a framework keeps
        sequence-parallel activations), and whether the step is a
        pipeline's (stages, or micro-batches accumulated)."""
        staged = std.pp > 1 or std.microbatch * std.dp < self.batch
        sp = bool(std.sp) and self.model.framework is not None  # only a framework's rules read it
        if not staged:
            micro, variant = self.batch, (PLAIN, sp)
        else:
            from pipeline import stage_cluster

            cluster = stage_cluster(self.model.cluster, self.p // std.pp)
            micro, variant = std.microbatch * std.dp, (("stage", cluster.gpus_per_node), sp)
        if variant not in self._models:
            model = self.model.with_sequence_parallel(sp)
            if staged:
                model = replace(model, cluster=cluster, micro_batches=None)
            self._models[variant] = model
        return micro, variant, staged

    def decisions(self, L: _Layout, micro: int, std) -> tuple:
        """One decision per class of ``L`` (:func:`standard.decide`); an
        :class:`InputError` when the model cannot take ``std``."""
        key = (micro, std.tp, std.dp, std.cp, std.ep, std.etp, std.sp, std.recompute, std.zero)
        out = self._decided.get(key)
        if out is None:
            splits = self._decided.get(key[:7])  # the splits, decided without options
            if splits is None:
                from standard import check_roles, decide

                bare = replace(std, recompute="none", zero=0)
                try:
                    which = (L, bare.cp > 1, bare.ep > 1, bare.etp is not None, bare.sp)  # what check_roles reads
                    roles = self._roles.get(which)
                    if roles is None:
                        roles = self._roles[which] = check_roles(L.g, bare)
                    splits = tuple(decide(op, bare, roles, ctx) for op, ctx in L.reps)
                except InputError as e:
                    splits = e
                self._decided[key[:7]] = splits
            if isinstance(splits, InputError):
                out = splits
            else:
                out = tuple(d.with_options(**self._options(L, micro, c, std.recompute, std.zero)) if
                            std.recompute != "none" or std.zero else d for c, d in enumerate(splits))
            self._decided[key] = out
        if isinstance(out, InputError):
            raise out
        return out

    def _options(self, L: _Layout, micro: int, c: int, recompute: str, zero: int) -> dict:
        """The options of class ``c`` under ``recompute`` and ``zero``
        (those that apply to it, as :func:`standard.decide` sets them)."""
        key = (micro, c, recompute, zero)
        out = self._decided.get(key)
        if out is None:
            from options import OPTIONS

            op, ctx = L.reps[c]
            out = {name: value for name, value in (("recompute", recompute), ("zero", zero))
                   if value != OPTIONS[name].default and OPTIONS[name].applies(op, ctx)}
            self._decided[key] = out
        return out

    def stages(self, L: _Layout, std) -> tuple[list, list]:
        """``(counts, ranges)`` of the stages of ``std`` on ``L`` (as
        ``planner._standard_pipeline`` cuts them); an :class:`InputError`
        when they cannot be cut so."""
        from pipeline import Schedule, chunking_error, split_counts, stage_ranges

        if L.chain is None:
            if std.pp > 1 or std.schedule == "interleaved":
                raise InputError(f"--plan: pp={std.pp} needs repeated blocks")
            return [L.n], [(0, L.n)]
        counts = split_counts(L.chain.count, std.pp, Schedule(std.schedule, std.chunks).v, self.model.framework,
                              L.layers)
        if min(counts) < 1:
            raise InputError(f"--plan: pp={std.pp} is more stages than the {L.chain.count} blocks")
        why = chunking_error(counts, Schedule(std.schedule, std.chunks))
        if why:
            raise InputError(f"--plan: {why}")
        return counts, stage_ranges(L.n, L.chain, counts)

    def register(self, std) -> None:
        """Note what ``std`` needs, so that its operators are costed with
        every other configuration of the same graph and cluster at once
        (:class:`InputError` when the model cannot take it)."""
        micro, variant, staged = self.shape(std)
        L = self.layout(micro)
        decs = self.decisions(L, micro, std)
        if staged:
            self.stages(L, std)
        wanted = self._wanted.setdefault((micro, variant), [dict() for _ in range(L.nc)])
        for c, d in enumerate(decs):
            wanted[c][d.config] = None

    # -- the cost model, once per class, for many configurations at once ---------------
    def _fill_ops(self, micro, variant, c, options, configs) -> dict:
        from cost.tables import node_arrays, with_options
        from cost.time import price_stage
        from options import OPTIONS

        table = self._ops.setdefault((micro, variant, c, options), {})
        todo = [cfg for cfg in configs if cfg not in table]
        if not todo:
            return table
        op, ctx = self.layout(micro).reps[c]
        model = self._models[variant]
        given = {name: dict(options).get(name, OPTIONS[name].default) for name in OPTIONS}
        K, priced = len(todo), None  # priced: the staged variant's extents and work records, for the host's wait
        self.calls += 1
        if variant[0] == PLAIN:
            na = node_arrays(op, todo, model, ctx, given=given)
            comp, comm, sync, parts, trans = na.compute, na.comm, np.zeros(K), na.parts, na.transient
        else:  # one of the stage's micro-batches (a framework spreads its once-a-step work over them)
            model = replace(model, micro_batches=self.batch // micro)
            C, work, fp = with_options(op, todo, model, ctx, given)
            priced = (C, work)
            comp, comm, sync = (np.broadcast_to(x, (K,)).astype(float) for x in price_stage(work, C, model, op))
            parts = np.stack([np.broadcast_to(x, (K,)) for x in fp.parts]).astype(float)
            trans = np.broadcast_to(fp.transient, (K,)).astype(float)
        micro_time = np.zeros(K)  # an expert block's operator: its micro-batch's device time (frameworks.host)
        if waits(model) and c in self.layout(micro).moe_classes:
            micro_time = np.broadcast_to(micro_batch(op, todo, model, ctx, given, priced), (K,))
        rows = np.column_stack([comp, comm, sync, parts.T, trans, micro_time])  # (K, 9)
        for cfg, row in zip(todo, rows):
            table[cfg] = row
        return table

    def _fill_edges(self, micro, variant, e, sources, targets) -> "_EdgeTable":
        """The table of edge class ``e``, with every pair of ``sources`` and
        ``targets`` (and of those costed before) costed."""
        from cost.rules import float8_input
        from cost.tables import tp_room
        from cost.time import edge_costs

        table = self._edges.setdefault((micro, variant, e), _EdgeTable())
        new_src = sorted({a for a in sources if a not in table.src})
        new_tgt = sorted({b for b in targets if b not in table.tgt})
        if not new_src and not new_tgt:
            return table
        L = self.layout(micro)
        cu, out, cv, inp = L.edge_reps[e]
        model = self._models[variant]
        fp8 = float8_input(L.reps[cv][0], inp, L.reps[cv][1], model)

        def costs(src, tgt):
            self.calls += 1
            room = tp_room(L.reps[cv][0], tgt, model, L.reps[cv][1])
            return edge_costs(L.reps[cu][0], out, L.reps[cv][0], inp, src, tgt, model, fp8, room=room)

        old_src, old_tgt = list(table.src), list(table.tgt)
        m = np.empty((len(old_src) + len(new_src), len(old_tgt) + len(new_tgt)))
        m[:len(old_src), :len(old_tgt)] = table.m
        if new_tgt:  # every source against the new targets
            m[:, len(old_tgt):] = costs(old_src + new_src, new_tgt)
        if new_src and old_tgt:  # the new sources against the old targets
            m[len(old_src):, :len(old_tgt)] = costs(new_src, old_tgt)
        table.extend(new_src, new_tgt, m)
        return table

    def _figures(self, micro, variant, decs) -> np.ndarray:
        """(classes, 9) figures of the decisions ``decs``, costed for every
        configuration registered on the same graph and cluster when missing."""
        wanted = self._wanted.get((micro, variant))
        rows = []
        for c, d in enumerate(decs):
            table = self._ops.get((micro, variant, c, d.options))
            row = None if table is None else table.get(d.config)
            if row is None:
                configs = list(wanted[c]) if wanted is not None else []
                if d.config not in configs:
                    configs.append(d.config)
                row = self._fill_ops(micro, variant, c, d.options, configs)[d.config]
            rows.append(row)
        return np.asarray(rows)

    def _edge_figures(self, micro, variant, L: _Layout, decs) -> np.ndarray:
        out = np.empty(L.ne)
        wanted = self._wanted.get((micro, variant))
        for e, (cu, _, cv, _) in enumerate(L.edge_reps):
            pair = (decs[cu].config, decs[cv].config)
            table = self._edges.get((micro, variant, e))
            x = None if table is None else table.get(*pair)
            if x is None:  # with every pair the registered configurations make
                sources, targets = [pair[0]], [pair[1]]
                if wanted is not None:
                    sources += wanted[cu]
                    targets += wanted[cv]
                x = self._fill_edges(micro, variant, e, sources, targets).get(*pair)
            out[e] = x
        return out

    # -- bounds ----------------------------------------------------------------------
    def floor(self, std, zeros) -> float:
        """A lower bound of ``std``'s step whatever its recomputation and
        its ZeRO stage among ``zeros`` (see the module docstring); an
        :class:`InputError` when the model cannot take it."""
        # stages 0 to 2 take the same time, but with a framework 1 and 2 shorten the optimizer step (each device
        # updates its shard: options/zero.py); stage 3 gathers the weights
        times = {3 if z == 3 else 1 if z and self.model.framework is not None else 0 for z in zeros}
        return min(self.estimate(replace(std, zero=z, recompute="none")).floor for z in sorted(times))

    def least_states(self, std, zero: int) -> float:
        """A lower bound of the bytes of weights, gradients and optimizer
        state a device of ``std`` keeps with ZeRO up to stage ``zero``:
        the parameters split by the tensor, pipeline and expert degrees
        (ZeRO's sharding over every device for what it shards)."""
        if self._params is None:
            from graph import parameter_count

            self._params = parameter_count(self.build(self.batch))
        params = self._params
        wb, gb, ob = self.model.parameter_bytes()
        split = max(std.tp, std.expert_tp) * std.pp * std.ep  # the most ways a stage's weights split without ZeRO
        # ZeRO's stage 1 shards the optimizer state, 2 the gradients too, 3 the weights too
        return sum(b * params / (self.p if zero >= stage else split) for b, stage in ((wb, 3), (gb, 2), (ob, 1)))

    # -- a configuration's figures -----------------------------------------------------
    @staticmethod
    def _wait(model, L: _Layout, lo: int, hi: int, per_class, E, std) -> float:
        """What the expert blocks among ``L``'s operators ``[lo, hi)`` wait on
        the host per micro-batch under ``model`` (:func:`frameworks.host.wait`),
        their classes' micro-batch costing ``per_class`` (without what a
        step does once) and their edges ``E``."""
        cc, ec, layers = L.experts(lo, hi)
        if not layers:
            return 0.0
        return wait(model, layers, float(cc @ per_class + ec @ E), layers if std.recompute == "full" else 0)

    def estimate(self, std) -> Estimate:
        """``std``'s step and peak memory (see the module docstring); an
        :class:`InputError` when the model cannot take it."""
        out = self._estimates.get(std)
        if out is None:
            out = self._estimates[std] = self._estimate(std)
        return out

    def _estimate(self, std) -> Estimate:
        micro, variant, staged = self.shape(std)
        L = self.layout(micro)
        decs = self.decisions(L, micro, std)
        F = self._figures(micro, variant, decs)
        E = self._edge_figures(micro, variant, L, decs)
        model = self._models[variant]
        host = waits(model)
        if not staged:
            cc, ec, kinds, _ = L.summary(0, L.n)
            cost = float(cc @ F[:, 0] + cc @ F[:, 1] + ec @ E)
            if host:
                cost += self._wait(model, L, 0, L.n, F[:, 8], E, std)
            trans = float((kinds @ F[:, 7]).max()) if len(kinds) else 0.0
            memory = math.fsum([float(cc @ F[:, 3 + k]) for k in range(4)] + [trans])
            return Estimate(cost, memory, (F.tobytes(), E.tobytes(), micro), cost)
        import pipeline

        counts, ranges = self.stages(L, std)
        pp, m = std.pp, self.batch // micro
        comm = F[:, 1] + F[:, 2] / float(m)
        parts, done, sends = [], {}, []
        for i, (lo, hi) in enumerate(ranges):
            cc, ec, kinds, crossing = L.summary(lo, hi)
            key = (i == 0, i == pp - 1, counts[i])
            if key not in done:
                trans = float((kinds @ F[:, 7]).max()) if len(kinds) else 0.0
                done[key] = _Part(float(cc @ F[:, 0]), float(cc @ comm + ec @ E), float(cc @ F[:, 2]),
                                  tuple(float(cc @ F[:, 3 + k]) for k in range(4)), trans, std.zero >= 2)
            parts.append(done[key])
            sends.append(crossing)
        sched = pipeline.Schedule(std.schedule, std.chunks)
        chunks = share = None
        if sched.v > 1:  # each model chunk's activations (the stage's, chunk by chunk)
            chunks = [tuple(float(L.summary(a, b)[0] @ F[:, 6])
                            for a, b in pipeline.chunk_ranges(L.chain, lo, hi, sched.v)) for lo, hi in ranges]
            share = pipeline.chunk_share(counts, sched.v)
        if host:
            hosts = [self._wait(model, L, lo, hi, F[:, 8], E, std) for lo, hi in ranges]
        else:
            hosts = None
        pipe = pipeline.assemble(L.g, model, self.p, pp, m, micro, sched, ranges, parts,
                                 crossing=sends, chunks=chunks, share=share, moments=self._moments, hosts=hosts)
        return Estimate(pipe.step, pipe.peak_memory, (F.tobytes(), E.tobytes(), micro, pp, str(sched)),
                        pipe.step - pipe.sync)
