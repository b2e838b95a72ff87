"""The cost tables the search reads: every configuration of every operator
(with the execution options it is given, and a table per option the search
chooses), its cost and memory, and every edge's re-distribution matrix, as
plain numpy arrays (:class:`CostedGraph`); and their memory estimated
before anything is built (:func:`estimate_costs`); a strategy's figures
read from them (:class:`StrategyCost`, which :func:`cost.evaluate.evaluate`
also returns).  Identical operators and edges share their (read-only)
arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from config_space import Decision, configurations, count_configurations
from cost.memory import footprint
from cost.rules import AUTO, CostModel, check_procs, extents, float8_input
from cost.edges import edge_costs
from cost.time import TP_ROLES, as_run, collective_cost, pass_times, price, tp_overlapped
from errors import InputError
from graph import Operator, operators
from result import total

__all__ = ["OptionTable", "NodeArrays", "with_options", "node_arrays", "CostedGraph", "CostTablesTooLarge",
           "CostEstimate", "estimate_costs", "build_costs", "with_edges", "StrategyCost", "tp_room"]

# -- operators with their execution options -------------------------------------------


@dataclass(frozen=True)
class OptionTable:
    """A searched execution option of one operator: its ``values`` and,
    for each configuration and value (``(K, n)`` arrays), what it adds to
    the operator's ``compute`` and ``comm``, to each of its memory ``parts``
    (bytes: weights, gradients, optimizer state, activations; ``(4, K,
    n)``) and its ``transient`` (bytes)."""

    name: str
    values: tuple
    compute: np.ndarray
    comm: np.ndarray
    parts: np.ndarray
    transient: np.ndarray

    @property
    def cost(self) -> np.ndarray:
        """What each value adds to the cost (K, n)."""
        return self.compute + self.comm

    @property
    def kept(self) -> np.ndarray:
        """What each value adds to the memory kept for the step (K, n)."""
        return self.parts.sum(axis=0)

    def kept_with(self, in_flight: float) -> np.ndarray:
        """The same with the activations of ``in_flight`` micro-batches."""
        return self.parts[0] + self.parts[1] + self.parts[2] + in_flight * self.parts[3]


@dataclass(frozen=True)
class NodeArrays:
    """One operator's figures for each configuration (K,): its cost
    (``compute``, ``comm``), the elements of its ``weights`` and kept
    ``activations``, its memory ``parts`` (4, K) in bytes and ``transient``
    bytes, all at the options it is given, and a table per option the
    search chooses."""

    configs: np.ndarray
    compute: np.ndarray
    comm: np.ndarray
    weights: np.ndarray
    activations: np.ndarray
    parts: np.ndarray
    transient: np.ndarray
    tables: tuple = ()

    @property
    def memory(self) -> np.ndarray:
        """Bytes kept for the step (K,)."""
        return self.parts[0] + self.parts[1] + self.parts[2] + self.parts[3]


def with_options(op: Operator, configs, model: CostModel, context, given=None):
    """``(C, work, footprint)`` of ``op`` at ``configs`` with the options
    ``given`` (name -> value; the model's fixed ones when ``None``) that
    apply to it."""
    from options import OPTIONS

    given = {k: v for k, v in model.options if v != AUTO} if given is None else given
    D, C = extents(op, configs)
    work = op.kind.work(op, D, C, model)
    fp = footprint(op, C, model, tuple(sorted(context.shared)), context.block is not None)
    if model.framework is not None:  # what the framework adds as it runs the operator
        work = as_run(op, C, work, context, model)
    for name, value in given.items():
        opt = OPTIONS[name]
        if value != opt.default and opt.applies(op, context):
            work = opt.work(value, op, C, work, context, model)
            fp = opt.memory(value, op, C, fp, context, model)
    return C, work, fp


def tp_room(op: Operator, configs, model: CostModel, context) -> tuple | None:
    """``(forward, backward)`` FLOP-equivalents of a matrix product, at each
    of its configurations, under which an all-gather of its input can still
    run when the run overlaps tensor parallelism (``--tp-overlap``): its
    forward product and its weight gradient's (half the backward pass; the
    input gradient's hides the input gathered again), less its own
    collectives' time there; ``None`` where nothing overlaps."""
    fw = model.framework
    if (fw is None or not fw.tp_overlap or not model.cluster.realistic or context is None
            or op.kind.name not in ("Einsum", "FC")):
        return None
    C, work, _ = with_options(op, configs, model, context, {})
    if not tp_overlapped(work, model):
        return None
    t_fwd, t_bwd, _ = pass_times(work, C, model, op)
    own = {role: 0.0 for role in TP_ROLES}
    for c in work.comms:
        if c.role in own:
            own[c.role] = own[c.role] + c.count * collective_cost(c, C, model.cluster)
    K = len(C)
    return (np.broadcast_to(np.maximum(t_fwd - own["partial sums"], 0.0), (K,)),
            np.broadcast_to(np.maximum(t_bwd / 2.0 - own["input gradients"], 0.0), (K,)))


def node_arrays(op: Operator, configs, model: CostModel, context=None, given=None, searched=()) -> NodeArrays:
    """``op``'s :class:`NodeArrays` at ``configs``: with the options
    ``given`` (name -> value; the model's fixed ones when ``None``) applied,
    and a table for each option named in ``searched`` that applies to it.
    Options that do not apply to the operator change nothing."""
    from options import OPTIONS, Context

    context = context or Context()
    C, work, fp = with_options(op, configs, model, context, given)
    comp, comm = price(work, C, model, op)
    K = len(C)
    comp = np.broadcast_to(comp, (K,)).astype(float, copy=True)
    comm = np.broadcast_to(comm, (K,)).astype(float, copy=True)
    parts = np.stack([np.broadcast_to(x, (K,)) for x in fp.parts]).astype(float)  # (4, K)
    transient = np.broadcast_to(fp.transient, (K,)).astype(float, copy=True)
    tables = []
    for name in searched:
        opt = OPTIONS[name]
        if not opt.applies(op, context):
            continue
        cols = []
        for value in opt.values:
            w2 = opt.work(value, op, C, work, context, model)
            f2 = opt.memory(value, op, C, fp, context, model)
            c2, m2 = price(w2, C, model, op) if w2 is not work else (comp, comm)
            cols.append((np.broadcast_to(c2, (K,)) - comp, np.broadcast_to(m2, (K,)) - comm,
                         np.stack([np.broadcast_to(x, (K,)) for x in f2.parts]) - parts,
                         np.broadcast_to(f2.transient, (K,)) - transient))
        tables.append(OptionTable(name, opt.values, np.stack([c[0] for c in cols], axis=1),
                                  np.stack([c[1] for c in cols], axis=1), np.stack([c[2] for c in cols], axis=2),
                                  np.stack([c[3] for c in cols], axis=1)))
    elements = [np.broadcast_to(x, (K,)).astype(float, copy=True) for x in
                (parts[0] / model.parameter_bytes()[0], parts[3] / float(model.cluster.word_bytes))]
    return NodeArrays(np.asarray(configs), comp, comm, elements[0], elements[1], parts, transient, tuple(tables))


@dataclass
class CostedGraph:
    """Every configuration and cost of a graph for ``p`` devices: the arrays
    the search reads, and the per-layer figures of its result.

    ``configs[v]``: int array (K_v, n_v); ``compute[v]``, ``comm[v]`` and
    their sum ``node_costs[v]``: (K_v,); ``weights[v]`` and
    ``activations[v]``: per-device elements (K_v,) of the memory model,
    ``parts[v]`` their bytes by part (4, K_v) and ``memory[v]`` their sum,
    ``transient[v]`` the bytes held only while the operator runs (all at the
    execution options the model fixes); ``tables[v]``: an
    :class:`OptionTable` per option the search chooses for the operator;
    ``contexts[v]``: its place among the repeated ``chains``;
    ``edge_costs[(u, v)]``: (K_u, K_v) for each graph edge ``u -> v``.
    Identical operators and edges share (read-only) arrays.
    """

    graph: object
    p: int
    model: CostModel
    configs: list[np.ndarray]
    compute: list[np.ndarray] = field(repr=False)
    comm: list[np.ndarray] = field(repr=False)
    node_costs: list[np.ndarray] = field(repr=False)
    edge_costs: dict[tuple[int, int], np.ndarray] = field(repr=False)
    weights: list[np.ndarray] = field(repr=False, default_factory=list)
    activations: list[np.ndarray] = field(repr=False, default_factory=list)
    memory: list[np.ndarray] = field(repr=False, default_factory=list)
    parts: list[np.ndarray] = field(repr=False, default_factory=list)
    transient: list[np.ndarray] = field(repr=False, default_factory=list)
    tables: list[tuple] = field(repr=False, default_factory=list)
    contexts: list = field(repr=False, default_factory=list)
    chains: tuple = ()

    @property
    def least_memory(self) -> float:
        """The smallest per-device memory (bytes) of any strategy: memory is a
        sum over operators, so each takes its smallest (with the most
        memory-saving value of each searched option)."""
        least = []
        for v, m in enumerate(self.memory):
            extra = sum((t.kept.min(axis=1) for t in self.tables[v]), np.zeros(len(m))) if self.tables else 0.0
            least.append(float((m + extra).min()))
        return math.fsum(least)

    @property
    def least_cost(self) -> float:
        """A lower bound of any strategy's cost, the edges' left out (a
        re-distribution costs nothing or more): each operator at its
        cheapest configuration, with each searched option's cheapest value
        there (an option may lower the cost: ZeRO's reduce-scatter of the
        gradients moves half an all-reduce's bytes)."""
        return math.fsum(self.least_costs())

    def least_costs(self) -> list[float]:
        """Each operator's part of :attr:`least_cost`: a range of them sums
        to a lower bound of what the range costs."""
        least, seen = [], {}
        for v, c in enumerate(self.node_costs):
            ts = self.tables[v] if self.tables else ()
            key = (id(c), *map(id, ts))  # identical layers share their arrays: each distinct one once
            if key not in seen:
                seen[key] = float((c + sum((t.cost.min(axis=1) for t in ts), np.zeros(len(c)))).min()) if ts \
                    else float(c.min())
            least.append(seen[key])
        return least

    @property
    def n(self) -> int:
        return len(self.configs)

    @property
    def searched(self) -> bool:
        """Whether the search chooses execution options too."""
        return any(self.tables)

    @property
    def nbytes(self) -> int:
        """Memory of the arrays, each shared array counted once."""
        arrays = [*self.configs, *self.compute, *self.comm, *self.node_costs, *self.weights, *self.activations,
                  *self.memory, *self.parts, *self.transient, *self.edge_costs.values()]
        arrays += [a for ts in self.tables for t in ts for a in (t.compute, t.comm, t.parts, t.transient)]
        return sum({id(a): a.nbytes for a in arrays}.values())

    def position(self, v: int, cfg) -> int | None:
        """Where configuration ``cfg`` of node ``v`` is in ``configs[v]``, or
        ``None`` when the search space does not hold it."""
        cfg = cfg.config if isinstance(cfg, Decision) else cfg
        hits = np.nonzero((self.configs[v] == np.asarray(cfg)).all(axis=1))[0]
        return int(hits[0]) if len(hits) else None

    def index_of(self, strategy) -> list[int]:
        """Position of each node's configuration in ``configs`` (ValueError
        when one lies outside the enumerated space)."""
        index = [self.position(v, cfg) for v, cfg in enumerate(strategy)]
        if None in index:
            v = index.index(None)
            raise InputError(f"node {v}: configuration {strategy[v]!r} is not in the search space")
        return index

    def cost_at(self, index, choices=None) -> float:
        """Total cost of the strategy picking ``configs[v][index[v]]`` (and
        the values ``choices[v]`` of its searched options)."""
        return self.figures(index, choices).total

    def decisions(self, index, choices=None) -> list[Decision]:
        """The decision of each node at positions ``index`` of the arrays,
        with the options the model fixes and the searched ones' values
        ``choices[v]`` (name -> position among the option's values)."""
        from options import OPTIONS

        ops = operators(self.graph)
        fixed = {k: v for k, v in self.model.options if v != AUTO}
        out = []
        for v, i in enumerate(index):
            ctx = self.contexts[v] if self.contexts else None
            opts = {k: val for k, val in fixed.items() if ctx is not None and OPTIONS[k].applies(ops[v], ctx)}
            for t in self.tables[v] if self.tables else ():
                opts[t.name] = t.values[(choices or {}).get(v, {}).get(t.name, 0)]
            out.append(Decision(ops[v].dims, self.configs[v][i]).with_options(**opts))
        return out

    def figures(self, index, choices=None) -> StrategyCost:
        """The strategy picking ``configs[v][index[v]]`` (and the values
        ``choices[v]`` of the searched options), read from the arrays."""
        strategy = self.decisions(index, choices)
        comp, comm, weights, acts, parts, transient = [], [], [], [], [], []
        bytes_per = (self.model.parameter_bytes()[0], float(self.model.cluster.word_bytes))
        for v, i in enumerate(index):
            c, m, pt, tr = self.compute[v][i], self.comm[v][i], self.parts[v][:, i].copy(), self.transient[v][i]
            for t in self.tables[v] if self.tables else ():
                j = (choices or {}).get(v, {}).get(t.name, 0)
                c, m, pt, tr = c + t.compute[i, j], m + t.comm[i, j], pt + t.parts[:, i, j], tr + t.transient[i, j]
            comp.append(float(c))
            comm.append(float(m))
            parts.append(tuple(float(x) for x in pt))
            transient.append(float(tr))
            weights.append(float(pt[0] / bytes_per[0]))
            acts.append(float(pt[3] / bytes_per[1]))
        edges = {(u, v): float(m[index[u], index[v]]) for (u, v), m in sorted(self.edge_costs.items())}
        return StrategyCost(strategy, tuple(comp), tuple(comm), edges, (True,) * len(index), tuple(weights),
                            tuple(acts), tuple(parts), tuple(transient), self._blocks())

    def _blocks(self) -> tuple:
        return tuple(ctx.block for ctx in self.contexts) if self.contexts else ()

    def memory_with(self, in_flight) -> list:
        """Each operator's memory (K,) with the activations of ``in_flight``
        micro-batches kept (a pipeline stage's): one number, or one per
        operator."""
        if isinstance(in_flight, tuple):
            return [m if f == 1 else p[0] + p[1] + p[2] + f * p[3]
                    for m, p, f in zip(self.memory, self.parts, in_flight)]
        if in_flight == 1:
            return self.memory
        return [p[0] + p[1] + p[2] + in_flight * p[3] for p in self.parts]

    def restrict(self, nodes) -> "CostedGraph":
        """The costs of the operators ``nodes`` (ascending ids) alone, as a
        graph of their own numbered from 0: what a pipeline stage holds.
        Edges to operators outside are dropped (a stage receives those
        tensors from another stage)."""
        from blocks import find_chains

        nodes = list(nodes)
        new = {v: i for i, v in enumerate(nodes)}
        g = self.graph
        sub = g.subgraph(nodes).copy()
        import networkx as nx

        sub = nx.relabel_nodes(sub, new)
        for v in sub.nodes:
            reads = sub.nodes[v].get("reads", ())
            sub.nodes[v]["reads"] = tuple(new.get(u) if u is not None else None for u in reads)
        sub.graph["shared"] = [(new[v], i) for v, i in g.graph.get("shared", ()) if v in new]

        def pick(lst):
            return [lst[v] for v in nodes] if lst else []

        edges = {(new[u], new[v]): m for (u, v), m in self.edge_costs.items() if u in new and v in new}
        return CostedGraph(sub, self.p, self.model, pick(self.configs), pick(self.compute), pick(self.comm),
                           pick(self.node_costs), edges, pick(self.weights), pick(self.activations),
                           pick(self.memory), pick(self.parts), pick(self.transient), pick(self.tables),
                           pick(self.contexts), find_chains(sub))


@dataclass(frozen=True)
class StrategyCost:
    """The cost of one strategy, broken down.

    ``strategy[v]``: operator ``v``'s :class:`config_space.Decision`;
    ``compute[v]``, ``comm[v]``: its own FLOP; ``edges[(u, v)]``:
    re-distribution FLOP of each edge; ``in_space[v]``: whether the search
    space holds ``strategy[v]``; ``weights[v]``, ``activations[v]``: the
    per-device elements of the memory model; ``parts[v]``: its bytes by
    part (weights, gradients, optimizer state, activations) and
    ``transient[v]`` the bytes it holds only while it runs; ``blocks[v]``:
    the repeated block holding the operator (``None``: none).
    """

    strategy: list
    compute: tuple[float, ...]
    comm: tuple[float, ...]
    edges: dict
    in_space: tuple[bool, ...]
    weights: tuple[float, ...]
    activations: tuple[float, ...]
    parts: tuple = ()
    transient: tuple = ()
    blocks: tuple = ()

    @property
    def peak_transient(self) -> float:
        """The most a device holds on top of what it keeps: the largest sum
        of transients over a block (an operator outside blocks alone)."""
        sums = {}
        for v, t in enumerate(self.transient):
            b = self.blocks[v] if self.blocks and self.blocks[v] is not None else ("op", v)
            sums[b] = sums.get(b, 0.0) + t
        return max(sums.values(), default=0.0)

    @property
    def total(self) -> float:
        return total(self.compute, self.comm, self.edges.values())

    @property
    def compute_total(self) -> float:
        return math.fsum(self.compute)

    @property
    def comm_total(self) -> float:
        """Communication inside operators and on edges (summed by itself: the
        total less the compute would lose it when compute dwarfs it)."""
        return math.fsum([*self.comm, *self.edges.values()])


class CostTablesTooLarge(MemoryError):
    """The cost arrays would not fit the memory limit."""


@dataclass(frozen=True)
class CostEstimate:
    """Memory of a graph's cost arrays for ``p`` devices, worked out from
    the configuration counts before anything is enumerated.

    ``held``: the arrays once built (configurations, operator costs, edge
    matrices; identical layers share theirs); ``peak``: ``held`` plus the
    most that building one of them needs on top (an edge matrix takes a few
    temporaries of its own size); ``largest_K``, ``largest_edge``: the
    largest configuration count and edge matrix (entries).
    """

    held: int
    peak: int
    largest_K: int
    largest_edge: int


_EDGE_TEMPORARIES = 4  # (K_src, K_tgt) temporaries while an edge matrix is computed
_OP_TEMPORARIES = 64  # (K,) temporaries while an operator's configurations are enumerated and costed


def _structure(g, model: CostModel, ctx) -> tuple:
    """What :func:`estimate_costs` reads of ``g`` whatever ``p``: its
    distinct operators, the extra arrays of each (operator, context) pair
    (its searched options' values), and the distinct edges' pairs of
    operators."""
    from options import OPTIONS

    ops = operators(g)
    searched = [OPTIONS[name] for name, value in model.options if value == AUTO]
    keyed = (lambda c: c.key) if model.options else (lambda c: c.shared)
    ids: dict = {}  # identical operators share an id, as they share their arrays (and their edges' matrices)
    op_id = [ids.setdefault(op, len(ids)) for op in ops]
    # per configuration: its splits, compute, communication and cost, weights, activations, memory, its four
    # parts and its transient; per searched option and value, seven more (cost, communication, parts, transient);
    # an operator in another context (a weight another holds, a place in a block) has arrays of its own
    arrays = {(op_id[v], keyed(ctx[v])): sum(7 * len(o.values) for o in searched if o.applies(ops[v], ctx[v]))
              for v in range(len(ops))}
    pairs = {(op_id[u], d["out"], op_id[v], d["inp"]): (op_id[u], op_id[v]) for u, v, d in g.edges(data=True)}
    return list(ids), tuple(arrays.items()), tuple(pairs.values())


def estimate_costs(g, p: int, model: CostModel = CostModel(), chains=None, known: dict | None = None) -> CostEstimate:
    """The memory :func:`build_costs` will use for ``g``, ``p`` and the
    model's searched options (``chains``: ``g``'s, when found already;
    ``known``: what :func:`build_costs` keeps of ``g`` between calls)."""
    from blocks import find_chains
    from options import contexts

    p = check_procs(p)
    cutoff = g.graph["cutoff"]
    known = {} if known is None else known
    key = ("structure", model.options)
    if key not in known:
        if not model.options:
            ctx = contexts(g, ())
        elif "contexts" in known:
            ctx = known["contexts"]
        else:
            ctx = contexts(g, find_chains(g) if chains is None else chains)
        known[key] = _structure(g, model, ctx)
    distinct, arrays, pairs = known[key]
    counts = [count_configurations(op, p, cutoff) for op in distinct]
    held = sum(8 * counts[i] * (len(distinct[i].space) + 11 + extra) for (i, _), extra in arrays)
    sizes = [counts[a] * counts[b] for a, b in pairs]
    held += 8 * sum(sizes)
    largest_K = max(counts, default=0)
    largest_edge = max(sizes, default=0)
    op_work = max((k * (len(op.space) + _OP_TEMPORARIES) for op, k in zip(distinct, counts)), default=0)
    return CostEstimate(held, held + 8 * max(_EDGE_TEMPORARIES * largest_edge, op_work), largest_K, largest_edge)


def build_costs(g, p: int, model: CostModel = CostModel(), memory_limit: int | None = None,
                progress=None, edges: bool = True, chains=None, known: dict | None = None) -> CostedGraph:
    """Enumerate and cost every configuration and edge of ``g`` for ``p`` devices.

    With ``memory_limit`` (bytes), raise :class:`CostTablesTooLarge` before
    enumerating anything when :func:`estimate_costs` exceeds it.  ``progress(done,
    total)`` is called as the edge matrices are built.  Without ``edges``,
    the operators' arrays only (:func:`with_edges` adds the edges later).
    ``chains``: ``g``'s, when found already; ``known``: a dict kept
    between calls for the same graph and chains, where what depends on
    them alone is kept (the operators' contexts, their distinct operators).
    """
    from blocks import find_chains
    from options import contexts

    p = check_procs(p)
    chains = find_chains(g) if chains is None else chains
    known = {} if known is None else known
    if "contexts" not in known:
        known["contexts"] = contexts(g, chains)
    ctx = known["contexts"]
    if memory_limit is not None:
        from report import fmt_bytes

        est = estimate_costs(g, p, model, chains, known)
        if est.peak > memory_limit:
            raise CostTablesTooLarge(
                f"the cost arrays over {p:,} devices need {fmt_bytes(est.peak)} but the limit is "
                f"{fmt_bytes(memory_limit)} (up to {est.largest_K} configurations per operator, "
                f"edge matrices of up to {est.largest_edge:.3g} entries); use a smaller p or raise the memory limit"
            )
    cutoff = g.graph["cutoff"]
    ops = operators(g)
    searched = tuple(name for name, value in model.options if value == AUTO)
    lists = {k: [] for k in ("configs", "compute", "comm", "node_costs", "weights", "activations", "memory", "parts",
                             "transient", "tables")}
    seen = {}
    for v, op in enumerate(ops):
        key = (op, ctx[v].key if model.options else ctx[v].shared)
        if key not in seen:  # identical layers share their arrays
            C = configurations(op, p, cutoff)
            na = node_arrays(op, C, model, ctx[v], searched=searched)
            arrays = {"configs": C, "compute": na.compute, "comm": na.comm, "node_costs": na.compute + na.comm,
                      "weights": na.weights, "activations": na.activations, "memory": na.memory, "parts": na.parts,
                      "transient": na.transient}
            for arr in arrays.values():
                arr.flags.writeable = False
            for t in na.tables:
                for arr in (t.compute, t.comm, t.parts, t.transient):
                    arr.flags.writeable = False
            seen[key] = {**arrays, "tables": na.tables}
        for k, lst in lists.items():
            lst.append(seen[key][k])
    costed = CostedGraph(g, p, model, lists["configs"], lists["compute"], lists["comm"], lists["node_costs"], {},
                         lists["weights"], lists["activations"], lists["memory"], lists["parts"], lists["transient"],
                         lists["tables"], ctx, chains)
    return with_edges(costed, progress) if edges else costed


def with_edges(costed: CostedGraph, progress=None) -> CostedGraph:
    """``costed`` with every edge's re-distribution matrix (edges between
    identical operators share one)."""
    g, model, configs = costed.graph, costed.model, costed.configs
    ops = operators(g)
    graph_edges = sorted(g.edges(data=True))
    edges, seen_e = {}, {}
    ctx = costed.contexts or [None] * len(ops)
    rooms = {}  # the targets' room under overlapped tensor parallelism, per distinct operator
    by_context = bool(model.framework is not None and model.framework.tp_overlap)  # the room depends on it
    for step, (u, v, d) in enumerate(graph_edges):
        fp8 = float8_input(ops[v], d["inp"], ctx[v], model)
        key = (ops[u], d["out"], ops[v], d["inp"], fp8, ctx[v].key if by_context and ctx[v] is not None else None)
        if key not in seen_e:
            at = (ops[v], key[-1])
            if at not in rooms:
                rooms[at] = tp_room(ops[v], configs[v], model, ctx[v])
            m = edge_costs(ops[u], d["out"], ops[v], d["inp"], configs[u], configs[v], model, fp8, room=rooms[at])
            m.flags.writeable = False
            seen_e[key] = m
        edges[(u, v)] = seen_e[key]
        if progress is not None:
            progress(step + 1, len(graph_edges))
    return replace(costed, edge_costs=edges)
