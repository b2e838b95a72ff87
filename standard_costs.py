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
from 0 there (where a framework reduce-scatters stage 2's gradients after
every micro-batch, stage 1's floor still bounds it: the same step and
more collectives); stage 3 is bounded apart.  :meth:`Costing.least_states`
bounds its memory from below without costing anything: the weights,
gradients and optimizer state of the parameters at their most sharded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from cost.rules import contention_of
from errors import InputError
from frameworks.host import micro_batch, wait, waits
from standard_layout import Layout

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


class _Part:
    """What :func:`pipeline.assemble` reads of a stage's result."""

    __slots__ = ("compute", "communication", "sync", "sync_exposed", "memory", "transient", "sharded_gradients")

    def __init__(self, compute, communication, sync, sync_exposed, memory, transient, sharded_gradients):
        self.compute, self.communication, self.sync, self.sync_exposed = compute, communication, sync, sync_exposed
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

    def layout(self, micro: int) -> Layout:
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
                        L = Layout(*got)
                    except ValueError:
                        L = None
                    if L is not None and L.chain != self._chain:
                        L = None
            self._layouts[micro] = L if L is not None else Layout(self.build(micro))
        return self._layouts[micro]

    def shape(self, std):
        """``(micro, variant, staged)``: the graph's batch, the variant of
        the cost model the operators are costed under (where they run: the
        whole cluster or a stage's devices; whether the stage is one of
        several where the framework keeps a stage's states whole over the
        step, :func:`cost.rules.keeps_stage_whole`; and whether a framework
        keeps sequence-parallel activations), and whether the step is a
        pipeline's (stages, or micro-batches accumulated)."""
        staged = std.pp > 1 or std.microbatch * std.dp < self.batch
        fw = self.model.framework
        sp = bool(std.sp) and fw is not None  # only a framework's rules read it
        if not staged:
            micro, variant = self.batch, (PLAIN, sp)
        else:
            from pipeline import stage_cluster

            cluster = stage_cluster(self.model.cluster, self.p // std.pp)
            whole = std.pp > 1 and fw is not None and any(fw.staged)  # else a stage of several costs as one
            micro, variant = std.microbatch * std.dp, (("stage", cluster.gpus_per_node, whole), sp)
        if variant not in self._models:
            model = self.model.with_sequence_parallel(sp)
            if staged:
                model = replace(model, cluster=cluster, micro_batches=None, pipelined=variant[0][2])
            self._models[variant] = model
        return micro, variant, staged

    def decisions(self, L: Layout, micro: int, std) -> tuple:
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

    def _options(self, L: Layout, micro: int, c: int, recompute: str, zero: int) -> dict:
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

    def stages(self, L: Layout, std) -> tuple[list, list]:
        """``(counts, ranges)`` of the stages of ``std`` on ``L`` (as
        ``planner._standard_pipeline`` cuts them); an :class:`InputError`
        when they cannot be cut so."""
        from pipeline import Schedule, chunking_error, counts_ends, split_counts, stage_ranges

        if L.chain is None:
            if std.pp > 1 or std.schedule == "interleaved":
                raise InputError(f"--plan: pp={std.pp} needs repeated blocks")
            return [L.n], [(0, L.n)]
        split = (L.chain.count, std.pp, Schedule(std.schedule, std.chunks).v, self.model.framework, L.layers)
        counts = split_counts(*split)
        if min(counts) < 1:
            raise InputError(f"--plan: pp={std.pp} is more stages than the {L.chain.count} blocks")
        why = chunking_error(counts, Schedule(std.schedule, std.chunks), counts_ends(*split))
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
        from cost.evaluate import RECORD, overlap_record
        from cost.tables import with_options
        from cost.time import _real_parts, last_sync_exposed, price, price_stage
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
        if variant[0] != PLAIN:  # one of the stage's micro-batches (a framework spreads its once-a-step work over them)
            model = replace(model, micro_batches=self.batch // micro)
        C, work, fp = with_options(op, todo, model, ctx, given)
        real = _real_parts(work, C, model, op) if model.cluster.realistic else None  # read by both prices below
        if variant[0] == PLAIN:
            comp, comm, sync, exposed = (*price(work, C, model, op, real), 0.0, 0.0)
        else:
            priced = (C, work)
            comp, comm, sync = price_stage(work, C, model, op, parts=real)
            exposed = last_sync_exposed(work, C, model, op, parts=real)  # accumulation without stages pays it
        comp, comm, sync, exposed = (np.broadcast_to(x, (K,)).astype(float) for x in (comp, comm, sync, exposed))
        parts = np.stack([np.broadcast_to(x, (K,)) for x in fp.parts]).astype(float)
        trans = np.broadcast_to(fp.transient, (K,)).astype(float)
        micro_time = np.zeros(K)  # an expert block's operator: its micro-batch's device time (frameworks.host)
        if waits(model) and c in self.layout(micro).moe_classes:
            micro_time = np.broadcast_to(micro_batch(op, todo, model, ctx, given, priced), (K,))
        # a block's operator: what its overlapped collectives leave exposed, and its passes (pooled in its block)
        pool = overlap_record(work, C, model, op, real) if ctx.block is not None else np.zeros((len(RECORD), K))
        # (K, 10 + len(RECORD)): the last, what the step's gradient reduction leaves exposed (accumulation)
        rows = np.column_stack([comp, comm, sync, parts.T, trans, micro_time, pool.T, exposed])
        for cfg, row in zip(todo, rows):
            table[cfg] = row
        return table

    def _fill_edges(self, micro, variant, e, sources, targets) -> "_EdgeTable":
        """The table of edge class ``e``, with every pair of ``sources`` and
        ``targets`` (and of those costed before) costed."""
        from cost.rules import float8_input
        from cost.tables import tp_room
        from cost.edges import edge_costs

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
        """(classes, 10 + len(RECORD)) figures of the decisions ``decs``, costed for every
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

    def _edge_figures(self, micro, variant, L: Layout, decs) -> np.ndarray:
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
    def _wait(model, L: Layout, lo: int, hi: int, per_class, E, std, pool) -> float:
        """What the expert blocks among ``L``'s operators ``[lo, hi)`` wait on
        the host per micro-batch under ``model`` (:func:`frameworks.host.wait`),
        their classes' micro-batch costing ``per_class`` (without what a
        step does once) and their edges ``E``, less what pooling their
        collectives saves (``pool``: each kind of block's, :meth:`Layout.block_savings`)."""
        cc, ec, layers = L.experts(lo, hi)
        if not layers:
            return 0.0
        device = float(cc @ per_class + ec @ E) - L.pooled(lo, hi, pool, experts=True)
        return wait(model, layers, device, layers if std.recompute == "full" else 0)

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
        pool = L.block_savings(F[:, 9:-1], contention_of(model))  # what each kind of block saves pooled
        if not staged:
            cc, ec, kinds, _ = L.summary(0, L.n)
            cost = float(cc @ F[:, 0] + cc @ F[:, 1] + ec @ E) - L.pooled(0, L.n, pool)
            if host:
                cost += self._wait(model, L, 0, L.n, F[:, 8], E, std, pool)
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
                done[key] = _Part(float(cc @ F[:, 0]), float(cc @ comm + ec @ E) - L.pooled(lo, hi, pool),
                                  float(cc @ F[:, 2]), float(cc @ F[:, -1]),
                                  tuple(float(cc @ F[:, 3 + k]) for k in range(4)), trans, std.zero >= 2)
            parts.append(done[key])
            sends.append(crossing)
        sched = pipeline.Schedule(std.schedule, std.chunks)
        chunks = share = None
        if sched.v > 1:  # each model chunk's activations (the stage's, chunk by chunk)
            chunks = [tuple(float(L.summary(a, b)[0] @ F[:, 6])
                            for a, b in pipeline.chunk_ranges(L.chain, lo, hi, sched.v)) for lo, hi in ranges]
            share = pipeline.chunk_share(counts, sched.v, pipeline.cut_as_framework(counts, sched.v, model.framework,
                                                                                    L.layers))
        if host:
            hosts = [self._wait(model, L, lo, hi, F[:, 8], E, std, pool) for lo, hi in ranges]
        else:
            hosts = None
        pipe = pipeline.assemble(L.g, model, self.p, pp, m, micro, sched, ranges, parts,
                                 crossing=sends, chunks=chunks, share=share, moments=self._moments, hosts=hosts,
                                 whole=self.model.cluster)
        return Estimate(pipe.step, pipe.peak_memory, (F.tobytes(), E.tobytes(), micro, pp, str(sched)),
                        pipe.step - pipe.sync)
