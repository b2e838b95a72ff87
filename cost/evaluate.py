"""A strategy's evaluation and result: one configuration (and options) per
operator checked (:func:`check_strategy`), costed with the formulas the
tables are built from (:func:`evaluate`, any configuration that divides,
inside the search space or not), and turned into a :class:`result.Result`
(:func:`make_result`) with the model FLOP, the recomputed FLOP and the
words moved that the report shows.

On a real device a repeated block's overlapped collectives (its
weights' gathers, its gradients' reductions) run under the block's passes
as a whole, not each under its own operator's: a framework gathers a
layer's weights (an FSDP unit's) while the layer before it computes, and
its gradients' buckets fill over the backward pass.  The operators'
prices (:mod:`cost.time`) window each collective by its own operator's
pass; :func:`block_credits` gives back, block by block (the model's
repeating unit: a layer, or the few layers a pattern repeats, as
:func:`blocks.find_chains` finds them), what pooling them saves: ``sum_i
max(0, o g_i - t_i)`` less ``max(0, sum_i o g_i - sum_i t_i)``, forward
and backward apart (the backward's window with the forward pass re-run
under it), less a framework's contention on what more runs under the
passes.  The result (:func:`make_result`) carries it in its operators'
communication; the per-operator search does not see it (it is no
operator's own), and expert layers waiting on the host gain nothing from
it (:mod:`frameworks.host`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from cluster import Cluster
from config_space import Decision, in_space
from cost.memory import footprint, shared_weights
from cost.rules import (CostModel, contention_of, extents, float8_input, gather_share, gathered_in_fp8,
                        nvlink_windows, overlap_share, under_backward)
from cost.tables import StrategyCost, node_arrays, tp_room, with_options
from cost.edges import edge_costs
from cost.time import ring_kv
from errors import InputError
from graph import Operator, operators, parameter_count
from kinds.base import Comm, Work
from kinds import Extents
from result import Layer, Result

__all__ = ["check_strategy", "StrategyCost", "evaluate", "model_flops", "recomputed_flops", "make_result",
           "words_moved", "ring_words", "overlap_record", "pooled_saving", "block_credits", "RECORD"]

# -- strategies ----------------------------------------------------------------------

#: the rows of :func:`overlap_record`
RECORD = ("exposed", "forward gathers", "backward collectives", "forward gathers between nodes",
          "backward collectives between nodes", "forward pass", "backward pass", "forward inside a node",
          "backward inside a node", "overlapped")


def overlap_record(work, C, model: CostModel, op, parts=None) -> np.ndarray:
    """(10, K): at each configuration, what an operator's overlapped
    collectives leave exposed beyond their own operator's passes (the part
    of them that may overlap, ``max(0, o g - t)``, forward and backward;
    ``t`` with its blocking collectives inside a node where they cross
    nodes), the overlapping share of its weights' forward gathers and of
    what runs under its backward pass (the backward gathers, the gradients'
    reduction where each micro-batch pays it), inside a node or between
    nodes, its forward pass and backward pass (with the forward re-run
    under it), its blocking collectives inside a node, forward and
    backward (:func:`cost.rules.nvlink_parts`: collectives between nodes
    run under them, on other links), and what of its collectives runs
    under its own passes (``min(o g, t)``, what a framework's contention
    slows): :data:`RECORD`.  A pipeline stage kept whole over the step
    (:func:`cost.rules.keeps_stage_whole`) gathers once, under the first
    micro-batch's forward pass: the forward rows are a micro-batch's share
    (:func:`cost.rules.gather_share`) of that gather and that pass.  Zeros
    on the paper's model.  ``parts``: the record's
    :func:`cost.time._real_parts`, when the caller has them."""
    from cost.time import _real_parts

    K = len(C)
    if not model.cluster.realistic:
        return np.zeros((len(RECORD), K))
    t_fwd, t_bwd, _, gathers, sync, overlapped_bwd, _, _, nvlink = parts or _real_parts(work, C, model, op)
    o = overlap_share(model, work.sharded)
    under = overlapped_bwd if model.micro_batches is None else under_backward(work, model, gathers, sync)[0]
    fwd, bwd = o * np.asarray(gathers, dtype=float), o * np.asarray(under, dtype=float)
    share = gather_share(model)  # a stage kept whole: a micro-batch's share of the step's one gather and its window
    nv_fwd, nv_bwd = nvlink_windows(nvlink)
    t_fwd = np.asarray(t_fwd, dtype=float)
    exposed = share * np.maximum(fwd - t_fwd - nv_fwd, 0.0) + np.maximum(bwd - t_bwd - nv_bwd, 0.0)
    hidden = share * np.minimum(fwd, t_fwd) + np.minimum(bwd, t_bwd)
    cross = np.asarray(nvlink[2], dtype=bool)
    rows = (exposed, share * np.where(cross, 0.0, fwd), np.where(cross, 0.0, bwd), share * np.where(cross, fwd, 0.0),
            np.where(cross, bwd, 0.0), share * t_fwd, t_bwd + work.replays * t_fwd, share * nvlink[0], nvlink[1],
            hidden)
    return np.stack([np.broadcast_to(np.asarray(x, dtype=float), (K,)) for x in rows])


def pooled_saving(sums, contention: float = 0.0):
    """What a block saves pooling its overlapped collectives under its
    passes, from the sums over its operators of the :data:`RECORD` rows
    (``sums``: their numbers last, for one block or many): each operator's
    exposure less the block's, less the framework's ``contention`` (its
    computation slowed per second of collective under it) on what more
    runs under the passes.  In each pass the collectives inside a node
    run under the computation ``t``, and those between nodes under what
    of it they leave and under the blocking collectives inside a node
    (``n``): ``max(0, g_in - t) + max(0, g_x - max(0, t - g_in) - n)``."""
    exposed, f_in, b_in, f_x, b_x, t_fwd, t_bwd, n_fwd, n_bwd, under = np.moveaxis(
        np.asarray(sums, dtype=float), -1, 0)
    left_f, left_b = np.maximum(0.0, t_fwd - f_in), np.maximum(0.0, t_bwd - b_in)
    saved = (exposed - np.maximum(0.0, f_in - t_fwd) - np.maximum(0.0, f_x - left_f - n_fwd)
             - np.maximum(0.0, b_in - t_bwd) - np.maximum(0.0, b_x - left_b - n_bwd))
    if contention:
        pooled_under = (np.minimum(f_in, t_fwd) + np.minimum(f_x, left_f) + np.minimum(b_in, t_bwd)
                        + np.minimum(b_x, left_b))
        saved = saved - contention * (pooled_under - under)
    return np.where(exposed > 0.0, np.maximum(saved, 0.0), 0.0)


def block_credits(g, strategy, model: CostModel, ctx=None) -> tuple | None:
    """Each operator's share of what its block saves pooling its
    overlapped collectives (:func:`pooled_saving`; shared in proportion to
    what each operator's own leave exposed); ``None`` where nothing is
    saved (the paper's model, no repeated blocks, windows enough).
    ``ctx``: the operators' contexts in the whole model (a pipeline
    stage's), else the graph's own, as :func:`evaluate` costs them."""
    if not model.cluster.realistic or not model.pooled:
        return None
    from blocks import block_of, find_chains
    from options import OPTIONS, contexts

    ops = operators(g)
    if ctx is not None:  # a stage's operators, their blocks the whole model's
        groups = [c.block for c in ctx]
    else:
        chains = find_chains(g)
        groups = block_of(chains, len(ops))
        ctx = contexts(g, chains if _by_blocks(strategy, model) else ())
    if all(b is None for b in groups):
        return None
    records, seen = {}, {}
    for v, (op, d) in enumerate(zip(ops, strategy)):
        if groups[v] is None:
            continue
        key = (op, d, ctx[v].key)
        if key not in seen:
            C, work, _ = with_options(op, [d.config], model, ctx[v], {n: d.option(n) for n in OPTIONS})
            seen[key] = overlap_record(work, C, model, op)[:, 0]
        records.setdefault(groups[v], []).append((v, seen[key]))
    credit = [0.0] * len(ops)
    contention = contention_of(model)
    for members in records.values():
        rows = np.array([r for _, r in members])
        saved = float(pooled_saving([math.fsum(rows[:, k]) for k in range(len(RECORD))], contention))
        if saved > 0.0:
            total = math.fsum(rows[:, 0])
            for v, r in members:
                credit[v] = saved * r[0] / total
    return tuple(credit) if any(credit) else None


def check_strategy(g, strategy, p: int | None = None) -> list[Decision]:
    """One :class:`config_space.Decision` per node of ``g`` from
    ``strategy`` (decisions, or configurations: lists of splits in the
    order of each operator's ``dims``), each checked by
    :meth:`config_space.Decision.of` (with ``p``, the devices it uses too);
    :class:`errors.InputError` naming the first bad node."""
    ops = operators(g)
    strategy = list(strategy)
    if len(strategy) != len(ops):
        raise InputError(f"the strategy has {len(strategy)} configurations; {g.graph['name']} has {len(ops)} operators")
    out = []
    for v, (op, d) in enumerate(zip(ops, strategy)):
        where = f"node {v} ({op.name})"
        if isinstance(d, Decision):
            if d.dims != op.dims:
                raise InputError(f"{where}: decision {d!r} is for the letters {d.dims!r}, not {op.dims!r}")
            out.append(Decision.of(op, d.config, p, d.options, where))
        else:
            out.append(Decision.of(op, d, p, (), where))
    return out


def evaluate(g, strategy, model: CostModel = CostModel(), p: int | None = None, ctx=None) -> StrategyCost:
    """Cost of a strategy (one configuration per node id), which need not lie
    in any enumerated space, with the formulas the cost arrays are built from.
    Validates it first (see :func:`check_strategy`).  With ``p``, says which
    configurations the search space for ``p`` devices holds (else: none).
    ``ctx``: the operators' contexts when ``g`` is a part of a larger graph
    (a pipeline stage's operators keep their place among its blocks)."""
    from blocks import find_chains
    from options import OPTIONS, contexts

    strategy = check_strategy(g, strategy)
    ops = operators(g)
    comp, comm, weights, acts, parts, transient = [], [], [], [], [], []
    if ctx is None:
        ctx = contexts(g, find_chains(g) if _by_blocks(strategy, model) else ())
    seen = {}  # identical operators (up to names) with the same decision and context cost the same
    for v, (op, d) in enumerate(zip(ops, strategy)):
        key = (op, d, ctx[v].key)
        if key not in seen:
            given = {name: d.option(name) for name in OPTIONS}
            na = node_arrays(op, [d.config], model, ctx[v], given=given)
            seen[key] = (float(na.compute[0]), float(na.comm[0]), float(na.weights[0]), float(na.activations[0]),
                         tuple(float(x) for x in na.parts[:, 0]), float(na.transient[0]))
        for out, x in zip((comp, comm, weights, acts, parts, transient), seen[key]):
            out.append(x)
    edges = {}
    moved = {}
    for u, v, d in sorted(g.edges(data=True)):
        fp8 = float8_input(ops[v], d["inp"], ctx[v], model)
        key = (ops[u], d["out"], ops[v], d["inp"], strategy[u].config, strategy[v].config, fp8, ctx[v].key)
        if key not in moved:
            room = tp_room(ops[v], [strategy[v].config], model, ctx[v])
            m = edge_costs(ops[u], d["out"], ops[v], d["inp"], [strategy[u].config], [strategy[v].config], model,
                           fp8, room=room)
            moved[key] = float(m[0, 0])
        edges[(u, v)] = moved[key]
    cutoff = g.graph["cutoff"]
    inside = tuple(p is not None and in_space(op, d.config, p, cutoff) for op, d in zip(ops, strategy))
    return StrategyCost(strategy, tuple(comp), tuple(comm), edges, inside, tuple(weights), tuple(acts),
                        tuple(parts), tuple(transient), tuple(c.block for c in ctx))


def model_flops(g, model: CostModel) -> float:
    """FLOP of one training step of the whole model as model FLOP
    utilisation counts them (Narayanan et al., SC'21): two per multiply-add
    of every matrix product, forward and backward, recomputation not
    included, attention's whole score matrix; no elementwise work."""
    ops = operators(g)
    macs, seen = [], {}  # identical operators count the same
    for op in ops:
        if op not in seen:
            D, C = extents(op, [(1,) * len(op.space)])
            seen[op] = op.kind.model_macs(op, op.kind.work(op, D, C, model))
        macs.append(seen[op])
    return 2.0 * math.fsum(macs)


def recomputed_flops(g, strategy, model: CostModel) -> float:
    """FLOP of the forward passes a step runs again (activation
    recomputation), counted as :func:`model_flops` counts: a third of each
    recomputed operator's model FLOP per replay."""
    if not any(d.option("recompute") != "none" for d in strategy):
        return 0.0
    from blocks import find_chains
    from options import OPTIONS, contexts

    ops = operators(g)
    ctx = contexts(g, find_chains(g))
    out, seen = [], {}  # identical operators with the same options replay the same
    for v, (op, d) in enumerate(zip(ops, strategy)):
        key = (op, d.options, ctx[v].key)
        if key not in seen:
            ones = [(1,) * len(op.space)]
            C, work, _ = with_options(op, ones, model, ctx[v], {n: d.option(n) for n in OPTIONS})
            seen[key] = work.replays * 2.0 * op.kind.model_macs(op, work) / 3.0 if work.replays else 0.0
        if seen[key]:
            out.append(seen[key])
    return math.fsum(out)


def _by_blocks(strategy, model) -> bool:
    """Whether costing ``strategy`` depends on which repeated block each
    operator belongs to: execution options, or Float8 (the blocks' weighted
    products run in FP8, the output layer not)."""
    fw = model.framework
    return bool(any(d.options for d in strategy) or model.options or (fw is not None and fw.float8))


def make_result(g, sc, model, p: int, mode: str, ctx=None, **fields) -> Result:
    """A :class:`result.Result` for graph ``g`` from a :class:`StrategyCost`,
    its operators' communication less what pooling each block's
    overlapped collectives saves (:func:`block_credits`; ``ctx``: the
    operators' contexts in the whole model, for a pipeline stage's)."""
    shared = shared_weights(g)
    credits = block_credits(g, sc.strategy, model, ctx)
    if credits is not None:
        sc = replace(sc, comm=tuple(c - x for c, x in zip(sc.comm, credits)))
        fields.setdefault("pooled", math.fsum(credits))
        fields.setdefault("credits", credits)

    def saves(v, op, d):  # what the options save on what the operator keeps
        if not d.options:
            return 0.0
        _, C = extents(op, [d.config])
        default = footprint(op, C, model, shared.get(v, ()))
        return float(default.kept[0]) - math.fsum(sc.parts[v])

    layers = tuple(
        Layer(v, op.name, op.kind.name, op.space, d, sc.compute[v], sc.comm[v], sc.in_space[v],
              sc.weights[v], sc.activations[v], sc.parts[v], sc.transient[v], saves(v, op, d))
        for v, (op, d) in enumerate(zip(operators(g), sc.strategy)))
    edges = tuple((u, v, c) for (u, v), c in sorted(sc.edges.items()))
    params = tuple(g.graph.get("params", {}).items())
    source = tuple(g.graph.get("source", {}).items())
    defaults = tuple(g.graph.get("defaults", {}).items())
    if "host" not in fields:  # a single micro-batch: the expert blocks' wait on the host (frameworks.host)
        from frameworks.host import graph_wait

        fields["host"] = graph_wait(g, layers, edges, model, credits or ())
    if model.realistic and "model_flops" not in fields:
        fields["model_flops"] = model_flops(g, model)
        fields["recomputed_flops"] = recomputed_flops(g, sc.strategy, model)
    return Result(mode, g.graph["name"], params, p, model, layers, edges, parameters=parameter_count(g),
                  model_source=source, defaults=defaults, words=words_moved(g, sc, model),
                  transient=sc.peak_transient, **fields)


def _elements(c: Comm, C: Extents, net=None):
    """Elements one device sends or receives in one of the collectives
    ``c`` describes, on one ring: an all-reduce ``2 w (q - 1) / q``, an
    all-gather or a reduce-scatter ``w (q - 1) / q``, a send ``w``; a
    DeepEP all-to-all (``c.once``) what it sends inside its node and to
    other nodes on the cluster ``net``."""
    if c.pattern == "cheapest":
        return np.minimum(*[_elements(o, C, net) for o in c.options])
    q = C[c.letters]
    if c.pattern == "alltoall" and c.once and net is not None and net.two_level:
        inside, between = net.alltoall_words(c.words, C, c.letters, c.once)
        return np.where(q > 1, inside + between, 0.0)
    if c.pattern == "allreduce":
        return 2.0 * c.words * (q - 1.0) / q
    if c.pattern in ("allgather", "reducescatter", "alltoall"):
        return c.words * (q - 1.0) / q
    return np.where(q > 1, c.words, 0.0)


def ring_words(op: Operator, C: Extents, work: Work, model: CostModel) -> np.ndarray:
    """Elements a device receives per step passing ``op``'s keys and values
    (and their gradients) around its ring (K,): with ``kv`` those the
    kernels read (the whole sequence's, :func:`ring_heads` each head) and
    ``c`` devices, ``(c - 1) / c`` of ``kv`` in each forward pass (the
    recomputation's too) and again backward, and ``c`` times ``kv / c``
    gradients at ``ring_grad_bytes`` (counted in elements of the training
    precision); nothing where ``c = 1``."""
    c, kv, b, g = ring_kv(op, C, model)
    passes = 2.0 + np.asarray(work.replays, dtype=float)  # forward, its replays, backward
    return np.where(c > 1, passes * kv * (c - 1.0) / c + kv * g / b, 0.0)


def words_moved(g, sc, model) -> float:
    """Elements one device sends or receives per step under the strategy
    ``sc`` (a :class:`StrategyCost`): the collectives of every operator's
    work record (with its options) and every edge's re-distribution,
    whatever the links' speeds and latency."""
    c = model.cluster
    if not c.realistic and not c.two_level and not c.latency and c.link_eff == 1.0:
        return sc.comm_total / c.word  # every element costs W: the communication says it
    from blocks import find_chains
    from options import OPTIONS, contexts

    ops = operators(g)
    ctx = contexts(g, find_chains(g) if _by_blocks(sc.strategy, model) else ())
    moved, seen = [], {}  # identical operators (edges) with the same decisions move the same
    for v, (op, d) in enumerate(zip(ops, sc.strategy)):
        key = (op, d, ctx[v].key)
        if key not in seen:
            C, work, _ = with_options(op, [d.config], model, ctx[v], {n: d.option(n) for n in OPTIONS})
            fp8 = bool(work.fp8) and gathered_in_fp8(model, "weights")
            words = [np.sum(x.count * _elements(x, C, c)) / (c.word_bytes if fp8 and x.role == "weights" else 1.0)
                     for x in work.comms]  # a Float8 product's weights gathered at a byte per element
            if work.ring:  # ring attention passes its keys and values itself
                words.append(np.sum(ring_words(op, C, work, model)))
            seen[key] = [float(w) for w in words]
        moved.extend(seen[key])
    unit = CostModel(Cluster(1.0, 1000.0 * c.word_bytes, precision=c.precision))  # one element costs 1
    for u, v, e in sorted(g.edges(data=True)):
        fp8 = float8_input(ops[v], e["inp"], ctx[v], model)
        key = (ops[u], e["out"], ops[v], e["inp"], sc.strategy[u].config, sc.strategy[v].config, fp8)
        if key not in seen:
            m = edge_costs(ops[u], e["out"], ops[v], e["inp"], [sc.strategy[u].config], [sc.strategy[v].config],
                           unit, fp8, rules=model)
            seen[key] = float(m[0, 0])
        moved.append(seen[key])
    return math.fsum(moved)
