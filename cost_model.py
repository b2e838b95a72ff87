"""The PaSE cost model: FLOP cost of every configuration of every operator,
and of every pair of configurations on every edge.

Each operator kind defines its own formula (``kinds/``, after the PaSE paper,
Elango, IPDPS 2021, section III); this module runs them over all
configurations at once and adds the re-distribution of tensors on edges.  A
:class:`CostModel` is the machine (a :class:`cluster.Cluster`) plus the
modelling rules; the defaults are the original tool's, whose numbers the
tests check.  Everything is vectorised: an operator's ``K`` configurations
are an integer array ``(K, n)`` and its cost a vector ``(K,)``; an edge's
cost is a ``(K_src, K_tgt)`` matrix.

The same functions cost any configuration whose splits divide the
dimensions, inside the enumerated space or not (baselines need that); they
do not check divisibility themselves (:func:`check_strategy` does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from cluster import Cluster
from config_space import Decision, configurations, count_configurations, in_space
from errors import InputError, SettingError, shown
from graph import Operator, operators, parameter_count
from kinds import Extents, need, shard, tensor_splits
from kinds.base import Comm, Work
from result import Layer, Result, total

__all__ = [
    "CostModel",
    "CostedGraph",
    "CostTablesTooLarge",
    "CostEstimate",
    "estimate_costs",
    "StrategyCost",
    "op_cost_parts",
    "op_costs",
    "op_memory",
    "edge_costs",
    "OPTIMIZERS",
    "build_costs",
    "check_procs",
    "check_strategy",
    "evaluate",
    "MAX_PROCS",
    "make_result",
    "words_moved",
]

EMBEDDING_SYNC = ("dense", "sparse", "best")
MAX_PROCS = 10**6
#: extra copies of the weights an optimizer keeps (momentum; Adam's two moments)
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adam": 2}


@dataclass(frozen=True)
class CostModel:
    """The machine and the modelling rules that turn work into FLOP.

    The rules' defaults are the original PaSE model; they only change how an
    Embedding is costed (see :class:`kinds.gemm.Embedding`):
    ``embedding_lookup`` costs its compute as a row gather and gradient
    scatter-add instead of a one-hot GEMM; ``embedding_sync`` exchanges its
    weight gradient by a ``"dense"`` all-reduce, a ``"sparse"`` push/pull of
    the rows touched (Parallax), or the cheaper of the two (``"best"``);
    ``distinct_rows`` is the number of distinct vocabulary rows a device's
    tokens touch per step (``None``: one per token).

    ``optimizer`` (``sgd``, ``momentum``, ``adam``) sets the optimizer state
    of the memory model (:meth:`memory_bytes`); it changes no cost.
    """

    cluster: Cluster = Cluster()
    embedding_lookup: bool = False
    embedding_sync: str = "dense"
    distinct_rows: int | None = None
    optimizer: str = "adam"

    def __post_init__(self):
        if not isinstance(self.cluster, Cluster):
            raise TypeError(f"cluster must be a Cluster, got {self.cluster!r}")
        if self.embedding_sync not in EMBEDDING_SYNC:
            raise SettingError("embedding_sync", f"must be one of {', '.join(EMBEDDING_SYNC)}, "
                                                 f"got {shown(self.embedding_sync)}")
        if not isinstance(self.embedding_lookup, bool):
            raise SettingError("embedding_lookup", f"must be true or false, got {shown(self.embedding_lookup)}")
        u = self.distinct_rows
        if u is not None and (isinstance(u, bool) or not isinstance(u, int) or u < 1):
            raise SettingError("distinct_rows", f"must be an integer >= 1, got {shown(u)}")
        if self.optimizer not in OPTIMIZERS:
            raise SettingError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {shown(self.optimizer)}")

    def parameter_bytes(self) -> tuple[float, float, float]:
        """Bytes per weight element of (weights, gradients, optimizer state).

        In the precision's own type, weights and gradients take its bytes each
        and every optimizer copy as much (the original's 8-byte word: 8, 8,
        8 per copy).  In bf16 or fp16, the mixed-precision layout: 2-byte
        weights and gradients, and a 4-byte master copy of the weights plus
        4 bytes per optimizer copy (Adam: 2 + 2 + 12 = 16 bytes).
        """
        b = self.cluster.word_bytes
        copies = OPTIMIZERS[self.optimizer]
        if self.cluster.precision in ("bf16", "fp16"):
            return float(b), float(b), 4.0 + 4.0 * copies
        return float(b), float(b), float(b * copies)

    def memory_bytes(self, weights, activations) -> tuple:
        """(weights, gradients, optimizer state, activations) bytes of the
        given weight and activation element counts (arrays broadcast)."""
        wb, gb, ob = self.parameter_bytes()
        return weights * wb, weights * gb, weights * ob, activations * float(self.cluster.word_bytes)

    @property
    def original(self) -> bool:
        """True when the rules are the original PaSE model's."""
        return not self.embedding_lookup and self.embedding_sync == "dense"

    def describe(self) -> str:
        """The rules in force, in a few words, for the report's header."""
        if self.original:
            return "original PaSE (embedding = one-hot GEMM, dense gradients)"
        compute = "row lookup" if self.embedding_lookup else "one-hot GEMM"
        sync = {"dense": "dense all-reduce", "sparse": "sparse push/pull",
                "best": "cheaper of dense/sparse"}[self.embedding_sync]
        rows = "" if self.distinct_rows is None else f", {self.distinct_rows} distinct rows"
        return f"embedding = {compute}, gradient = {sync}{rows}"


# -- operators and edges ---------------------------------------------------------


def _extents(op: Operator, configs) -> tuple[Extents, Extents]:
    C = np.asarray(configs, dtype=float).reshape(-1, len(op.space))  # (K, n)
    return Extents(op.dims, np.asarray(op.space, dtype=float)), Extents(op.dims, C)


def op_work(op: Operator, configs, model: CostModel) -> Work:
    """What ``op`` does in a step at each configuration (its kind's record)."""
    D, C = _extents(op, configs)
    return op.kind.work(op, D, C, model)


def collective_cost(c: Comm, C: Extents, net: Cluster):
    """FLOP of one of the collectives ``c`` describes on the cluster ``net``."""
    if c.pattern == "allreduce":
        return net.allreduce(c.words, C, c.letters)
    if c.pattern == "send":
        return net.send(c.words, C, c.letters, times=c.rounds)
    return np.minimum(*[collective_cost(o, C, net) for o in c.options])  # the cheapest


def price(work: Work, C: Extents, model: CostModel):
    """(compute, communication) FLOP of a work record on the model's
    cluster: the record's compute, and each collective's cost times its
    count, added in the record's order."""
    comm = None
    for c in work.comms:
        x = collective_cost(c, C, model.cluster)
        if c.count != 1:
            x = c.count * x
        comm = x if comm is None else comm + x
    return work.compute, np.zeros(len(C)) if comm is None else comm


def op_cost_parts(op: Operator, configs, model: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """(compute, communication) FLOP of ``op`` at each configuration (K,)."""
    D, C = _extents(op, configs)
    comp, comm = price(op.kind.work(op, D, C, model), C, model)
    K = len(C)
    return (np.broadcast_to(comp, (K,)).astype(float, copy=True),
            np.broadcast_to(comm, (K,)).astype(float, copy=True))


def op_memory(op: Operator, configs, shared=()) -> tuple[np.ndarray, np.ndarray]:
    """Per-device elements of ``op``'s (weights, kept activations) at each
    configuration (K,): its kind's memory formula, less the weights at the
    input positions ``shared`` (a tensor another operator holds, e.g. tied
    embeddings: held once)."""
    _, C = _extents(op, configs)
    w, a = op.kind.memory(op, C)
    for i in shared:
        w = w - shard(op.inputs[i], C)
    K = len(C)
    return (np.broadcast_to(w, (K,)).astype(float, copy=True),
            np.broadcast_to(a, (K,)).astype(float, copy=True))


def op_costs(op: Operator, configs, model: CostModel) -> np.ndarray:
    """Total FLOP of ``op`` at each configuration: a vector (K,)."""
    comp, comm = op_cost_parts(op, configs, model)
    return comp + comm


def edge_costs(src: Operator, out: int, tgt: Operator, inp: int, src_configs, tgt_configs,
               model: CostModel) -> np.ndarray:
    """Re-distribution cost (K_src, K_tgt) of the tensor ``src.outputs[out]``
    read as ``tgt.inputs[inp]``, forward and backward:
    ``2 W need(T/S, T/Q, P(S), P(Q))``.

    The cost depends on a configuration only through the tensor's split, and
    many configurations split it alike: it is worked out once per pair of
    distinct splits, then spread to the configurations (the same numbers)."""
    t_src, t_tgt = src.outputs[out], tgt.inputs[inp]
    T = np.asarray(t_src.shape, dtype=float)
    C_src, C_tgt = _extents(src, src_configs)[1], _extents(tgt, tgt_configs)[1]
    S = tensor_splits(t_src, C_src)  # (K_src, r)
    Q = tensor_splits(t_tgt, C_tgt)  # (K_tgt, r)
    net = model.cluster
    if net.two_level:  # with the nodes over which each axis's pieces spread
        S = np.concatenate([S, net.tensor_nodes(t_src, C_src)], axis=1)  # (K_src, 2r)
        Q = np.concatenate([Q, net.tensor_nodes(t_tgt, C_tgt)], axis=1)  # (K_tgt, 2r)
    spread = len(S) * len(Q) >= _SPREAD
    if spread:
        (S, s_of), (Q, q_of) = _distinct_rows(S), _distinct_rows(Q)  # (r_src, .), (K_src,); (r_tgt, .), (K_tgt,)
    r = len(T)
    ps, pt = np.prod(S[:, :r], axis=1), np.prod(Q[:, :r], axis=1)  # (r_src,), (r_tgt,)
    words = need((T / S[:, :r])[:, None, :], (T / Q[:, :r])[None, :, :], ps[:, None], pt[None, :])  # (r_src, r_tgt)
    if not net.two_level:
        cost = net.redistribute(2.0 * words, times=2)
    else:  # the same "area needed" between nodes: the words a target node lacks, shared by its devices
        NS, NQ = S[:, r:], Q[:, r:]
        node_need = need((T / NS)[:, None, :], (T / NQ)[None, :, :], np.prod(NS, axis=1)[:, None],
                         np.prod(NQ, axis=1)[None, :])  # (r_src, r_tgt)
        share = np.prod(NQ, axis=1) / pt  # (r_tgt,) a device's part of its node's block
        cost = net.redistribute(2.0 * words, 2.0 * np.minimum(node_need * share[None, :], words), times=2)
    return np.take(np.take(cost, s_of, axis=0), q_of, axis=1) if spread else cost  # (K_src, K_tgt)


_SPREAD = 1 << 16  # edge matrices at least this large are worked out per distinct split


def _distinct_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``a`` and, for each row, which one it is."""
    if a.shape[1] == 0:
        return a[:1], np.zeros(len(a), dtype=np.intp)
    rows, of = np.unique(a, axis=0, return_inverse=True)
    return rows, of.reshape(-1)


# -- whole graphs ------------------------------------------------------------------


def _shared(g) -> dict[int, tuple[int, ...]]:
    """Per node, the input positions whose weight another operator holds."""
    out = {}
    for v, i in g.graph.get("shared", ()):
        out.setdefault(v, ())
        out[v] += (i,)
    return out


def check_procs(p) -> int:
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 1 <= p <= MAX_PROCS:
        raise SettingError("p", f"must be an integer from 1 to {MAX_PROCS:,}, got {shown(p)}")
    return int(p)


@dataclass
class CostedGraph:
    """Every configuration and cost of a graph for ``p`` devices: the arrays
    the search reads, and the per-layer figures of its result.

    ``configs[v]``: int array (K_v, n_v); ``compute[v]``, ``comm[v]`` and
    their sum ``node_costs[v]``: (K_v,); ``weights[v]`` and
    ``activations[v]``: per-device elements (K_v,) of the memory model, and
    ``memory[v]`` their bytes; ``edge_costs[(u, v)]``: (K_u, K_v) for each
    graph edge ``u -> v``.  Identical operators and edges share (read-only)
    arrays.
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

    @property
    def least_memory(self) -> float:
        """The smallest per-device memory (bytes) of any strategy: memory is a
        sum over operators, so each takes its smallest."""
        return math.fsum(float(m.min()) for m in self.memory)

    @property
    def n(self) -> int:
        return len(self.configs)

    @property
    def nbytes(self) -> int:
        """Memory of the arrays, each shared array counted once."""
        arrays = [*self.configs, *self.compute, *self.comm, *self.node_costs, *self.weights, *self.activations,
                  *self.memory, *self.edge_costs.values()]
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

    def cost_at(self, index) -> float:
        """Total cost of the strategy picking ``configs[v][index[v]]``."""
        return self.figures(index).total

    def decisions(self, index) -> list[Decision]:
        """The decision of each node at positions ``index`` of the arrays."""
        ops = operators(self.graph)
        return [Decision(ops[v].dims, self.configs[v][i]) for v, i in enumerate(index)]

    def figures(self, index) -> "StrategyCost":
        """The strategy picking ``configs[v][index[v]]``, read from the arrays."""
        strategy = self.decisions(index)
        comp = tuple(float(self.compute[v][i]) for v, i in enumerate(index))
        comm = tuple(float(self.comm[v][i]) for v, i in enumerate(index))
        edges = {(u, v): float(m[index[u], index[v]]) for (u, v), m in sorted(self.edge_costs.items())}
        weights = tuple(float(self.weights[v][i]) for v, i in enumerate(index))
        acts = tuple(float(self.activations[v][i]) for v, i in enumerate(index))
        return StrategyCost(strategy, comp, comm, edges, (True,) * len(index), weights, acts)


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


def estimate_costs(g, p: int) -> CostEstimate:
    """The memory :func:`build_costs` will use for ``g`` and ``p``."""
    p = check_procs(p)
    cutoff = g.graph["cutoff"]
    ops = operators(g)
    shared = _shared(g)
    ids: dict = {}  # identical operators share an id, as they share their arrays (and their edges' matrices)
    op_id = [ids.setdefault(op, len(ids)) for op in ops]
    distinct = list(ids)
    counts = [count_configurations(op, p, cutoff) for op in distinct]
    # per configuration: its splits, compute, communication and cost, weights, activations and memory; an
    # operator that shares a weight with another has arrays of its own (its memory differs)
    arrays = {(op_id[v], shared.get(v, ())) for v in range(len(ops))}
    held = sum(8 * counts[i] * (len(distinct[i].space) + 6) for i, _ in arrays)
    pairs = {(op_id[u], d["out"], op_id[v], d["inp"]): counts[op_id[u]] * counts[op_id[v]]
             for u, v, d in g.edges(data=True)}
    held += 8 * sum(pairs.values())
    largest_K = max(counts, default=0)
    largest_edge = max(pairs.values(), default=0)
    op_work = max((k * (len(op.space) + _OP_TEMPORARIES) for op, k in zip(distinct, counts)), default=0)
    return CostEstimate(held, held + 8 * max(_EDGE_TEMPORARIES * largest_edge, op_work), largest_K, largest_edge)


def build_costs(g, p: int, model: CostModel = CostModel(), memory_limit: int | None = None,
                progress=None) -> CostedGraph:
    """Enumerate and cost every configuration and edge of ``g`` for ``p`` devices.

    With ``memory_limit`` (bytes), raise :class:`CostTablesTooLarge` before
    enumerating anything when :func:`estimate_costs` exceeds it.  ``progress(done,
    total)`` is called as the edge matrices are built.
    """
    p = check_procs(p)
    if memory_limit is not None:
        est = estimate_costs(g, p)
        if est.peak > memory_limit:
            raise CostTablesTooLarge(
                f"the cost arrays for p = {p} need {est.peak / 1e9:.3g} GB but the limit is "
                f"{memory_limit / 1e9:.3g} GB (up to {est.largest_K} configurations per operator, "
                f"edge matrices of up to {est.largest_edge:.3g} entries); use a smaller p or raise the memory limit"
            )
    cutoff = g.graph["cutoff"]
    ops = operators(g)
    shared = _shared(g)
    configs, comp, comm, costs, weights, acts, memory, seen = [], [], [], [], [], [], [], {}
    for v, op in enumerate(ops):
        key = (op, shared.get(v, ()))
        if key not in seen:  # identical layers share their arrays
            C = configurations(op, p, cutoff)
            a, b = op_cost_parts(op, C, model)
            w, x = op_memory(op, C, key[1])
            arrays = (C, a, b, a + b, w, x, sum(model.memory_bytes(w, x)))
            for arr in arrays:
                arr.flags.writeable = False
            seen[key] = arrays
        for lst, arr in zip((configs, comp, comm, costs, weights, acts, memory), seen[key]):
            lst.append(arr)
    graph_edges = sorted(g.edges(data=True))
    keys = {(u, v): (ops[u], d["out"], ops[v], d["inp"]) for u, v, d in graph_edges}
    edges, seen_e = {}, {}
    for step, (u, v, d) in enumerate(graph_edges):
        key = keys[(u, v)]
        if key not in seen_e:
            m = edge_costs(ops[u], d["out"], ops[v], d["inp"], configs[u], configs[v], model)
            m.flags.writeable = False
            seen_e[key] = m
        edges[(u, v)] = seen_e[key]
        if progress is not None:
            progress(step + 1, len(graph_edges))
    return CostedGraph(g, p, model, configs, comp, comm, costs, edges, weights, acts, memory)


# -- strategies ----------------------------------------------------------------------


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


@dataclass(frozen=True)
class StrategyCost:
    """The cost of one strategy, broken down.

    ``strategy[v]``: operator ``v``'s :class:`config_space.Decision`;
    ``compute[v]``, ``comm[v]``: its own FLOP; ``edges[(u, v)]``:
    re-distribution FLOP of each edge; ``in_space[v]``: whether the search
    space holds ``strategy[v]``; ``weights[v]``, ``activations[v]``: the
    per-device elements of the memory model.
    """

    strategy: list
    compute: tuple[float, ...]
    comm: tuple[float, ...]
    edges: dict
    in_space: tuple[bool, ...]
    weights: tuple[float, ...]
    activations: tuple[float, ...]

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


def evaluate(g, strategy, model: CostModel = CostModel(), p: int | None = None) -> StrategyCost:
    """Cost of a strategy (one configuration per node id), which need not lie
    in any enumerated space, with the formulas the cost arrays are built from.
    Validates it first (see :func:`check_strategy`).  With ``p``, says which
    configurations the search space for ``p`` devices holds (else: none)."""
    strategy = check_strategy(g, strategy)
    ops = operators(g)
    comp, comm, weights, acts = [], [], [], []
    shared = _shared(g)
    for v, (op, d) in enumerate(zip(ops, strategy)):
        a, b = op_cost_parts(op, [d.config], model)
        w, x = op_memory(op, [d.config], shared.get(v, ()))
        comp.append(float(a[0]))
        comm.append(float(b[0]))
        weights.append(float(w[0]))
        acts.append(float(x[0]))
    edges = {}
    for u, v, d in sorted(g.edges(data=True)):
        m = edge_costs(ops[u], d["out"], ops[v], d["inp"], [strategy[u].config], [strategy[v].config], model)
        edges[(u, v)] = float(m[0, 0])
    cutoff = g.graph["cutoff"]
    inside = tuple(p is not None and in_space(op, d.config, p, cutoff) for op, d in zip(ops, strategy))
    return StrategyCost(strategy, tuple(comp), tuple(comm), edges, inside, tuple(weights), tuple(acts))


def make_result(g, sc, model, p: int, mode: str, **fields) -> Result:
    """A :class:`result.Result` for graph ``g`` from a :class:`StrategyCost`."""
    layers = tuple(
        Layer(v, op.name, op.kind.name, op.space, d, sc.compute[v], sc.comm[v], sc.in_space[v],
              sc.weights[v], sc.activations[v], tuple(float(x) for x in model.memory_bytes(sc.weights[v],
                                                                                        sc.activations[v])))
        for v, (op, d) in enumerate(zip(operators(g), sc.strategy)))
    edges = tuple((u, v, c) for (u, v), c in sorted(sc.edges.items()))
    params = tuple(g.graph.get("params", {}).items())
    source = tuple(g.graph.get("source", {}).items())
    defaults = tuple(g.graph.get("defaults", {}).items())
    return Result(mode, g.graph["name"], params, p, model, layers, edges, parameters=parameter_count(g),
                  model_source=source, defaults=defaults, words=words_moved(g, sc, model), **fields)


def words_moved(g, sc, model) -> float:
    """Elements one device moves per step under the strategy ``sc`` (a
    :class:`StrategyCost`) costs: its communication costed at one
    FLOP per element, no latency, one network (the same rules otherwise)."""
    c = model.cluster
    if not c.two_level and not c.latency:  # every element costs W: the communication says it
        return sc.comm_total / c.word
    unit = replace(model, cluster=Cluster(1.0, 1000.0 * c.word_bytes, precision=c.precision))
    return evaluate(g, sc.strategy, unit).comm_total
