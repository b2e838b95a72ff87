"""The PaSE cost model: FLOP cost of every configuration of every operator,
and of every pair of configurations on every edge.

Formulas follow the PaSE paper (Elango, IPDPS 2021, section III) as the
original tool implements them, operator by operator; the README summarises
them, and the letters in the code are the formulas' symbols.  Every cost is
in FLOP; moving one 8-byte word costs ``W = 8000 * flops / bw`` FLOP
(``flops`` in TFLOPS per device, ``bw`` in GB/s).

Everything is vectorised over configurations: an operator's ``K``
configurations are an integer array ``(K, n)`` and its cost a vector ``(K,)``;
an edge's cost is a ``(K_src, K_tgt)`` matrix.  The same functions cost any
configuration whose splits divide the dimensions, inside the enumerated space
or not (baselines need that); they do not check divisibility themselves
(:func:`check_strategy` does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from config_space import enumerate_configs
from graph import Operator, Tensor, operators

__all__ = [
    "CostModel",
    "CostedGraph",
    "CostTablesTooLarge",
    "StrategyCost",
    "op_cost_parts",
    "op_costs",
    "tensor_configs",
    "edge_costs",
    "build_costs",
    "check_procs",
    "check_strategy",
    "evaluate",
]


EMBEDDING_SYNC = ("dense", "sparse", "best")


@dataclass(frozen=True)
class CostModel:
    """Hardware and modelling choices that turn work into FLOP.

    ``flops``: peak TFLOPS per device; ``bw``: peak interconnect GB/s.
    The defaults of the other fields are the original PaSE model; they only
    change how an Embedding is costed (see :func:`_embedding`):
    ``embedding_lookup`` costs its compute as a row gather and gradient
    scatter-add instead of a one-hot GEMM; ``embedding_sync`` exchanges its
    weight gradient by a ``"dense"`` all-reduce, a ``"sparse"`` push/pull of
    the rows touched (Parallax), or the cheaper of the two (``"best"``);
    ``distinct_rows`` is the number of distinct vocabulary rows a device's
    tokens touch per step (``None``: one per token).
    """

    flops: float = 10.0
    bw: float = 16.0
    embedding_lookup: bool = False
    embedding_sync: str = "dense"
    distinct_rows: int | None = None

    def __post_init__(self):
        for name in ("flops", "bw"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
                raise ValueError(f"--{name} must be a positive finite number, got {v!r}")
            object.__setattr__(self, name, float(v))
        if not 1e-9 <= self.word_cost <= 1e15:
            raise ValueError(
                f"--flops {self.flops:g} and --bw {self.bw:g} make one word cost {self.word_cost:.3g} FLOP; "
                "the model needs 1e-9 to 1e15 (flops in TFLOPS, bw in GB/s)"
            )
        if self.embedding_sync not in EMBEDDING_SYNC:
            raise ValueError(f"embedding_sync must be one of {EMBEDDING_SYNC}, got {self.embedding_sync!r}")
        u = self.distinct_rows
        if u is not None and (isinstance(u, bool) or not isinstance(u, int) or u < 1):
            raise ValueError(f"--distinct-rows must be an integer >= 1, got {u!r}")

    @property
    def word_cost(self) -> float:
        """``W``: FLOP equivalent of moving one 8-byte word."""
        return 8000.0 * self.flops / self.bw

    @property
    def original(self) -> bool:
        """True when this is the original PaSE model (the reference numbers)."""
        return not self.embedding_lookup and self.embedding_sync == "dense"


# -- shared formulas ---------------------------------------------------------


def _allreduce(words, q, W):
    """Ring all-reduce of ``words`` among ``q`` devices: ``W * w/q * 2(q-1)``."""
    return W * (words / q) * 2.0 * (q - 1.0)


def _need(src, tgt, ps, pt):
    """Elements a target device lacks ("area needed").

    ``src``, ``tgt``: per-device extents (..., r), broadcastable;
    ``ps``, ``pt``: device counts, broadcastable to the result.
    """
    r = src.shape[-1]
    overlap = np.minimum(src[..., 0], tgt[..., 0])
    volume = tgt[..., 0]
    for j in range(1, r):
        overlap = overlap * np.minimum(src[..., j], tgt[..., j])
        volume = volume * tgt[..., j]
    return np.maximum(volume - np.where(pt > ps, 0.0, overlap), 0.0)


def tensor_configs(t: Tensor, C: np.ndarray) -> np.ndarray:
    """How tensor ``t`` is split under operator configurations ``C`` (K, n):
    a float array (K, rank); axis ``j`` is split by ``prod(C[:, t.axes[j]])``."""
    out = np.ones((C.shape[0], len(t.axes)))
    for j, group in enumerate(t.axes):
        for i in group:
            out[:, j] *= C[:, i]
    return out


def _gemm(bb, mm, nn, kk, m, n, k, pw, W, weight_sync=None):
    """GEMM of per-device extents mm x kk by kk x nn, repeated bb times, whose
    M, N, K are split m, n, k ways.  Returns (compute, communication).
    ``weight_sync`` replaces the weight-gradient all-reduce ``AR(nn*kk, m)``."""
    comp = 3.0 * mm * nn * kk + 3.0 * pw * mm * nn  # fwd + 2 bwd GEMMs; pointwise
    sync = _allreduce(nn * kk, m, W) if weight_sync is None else weight_sync
    comm = _allreduce(mm * nn, k, W) + _allreduce(mm * kk, n, W) + sync
    return bb * comp, bb * comm


def _gemm_roles(op: Operator, D, C):
    """(bb, mm, nn, kk, m, n, k) of an operator's GEMM roles."""
    g = op.gemm

    def split(dims):
        return np.prod(C[:, list(dims)], axis=1) if dims else np.ones(C.shape[0])

    def size(dims):
        return float(np.prod([D[i] for i in dims])) if dims else 1.0

    m, n, k = split(g.m), split(g.n), split(g.k)
    bb = size(g.batch) / split(g.batch)
    return bb, size(g.m) / m, size(g.n) / n, size(g.k) / k, m, n, k


def _halo(image: Tensor, C, r, s, W):
    """Ghost-cell exchange of an input image (b, c, h, w) split by its tensor
    configuration, for an (r, s) window."""
    Q = tensor_configs(image, C)  # (K, 4)
    t = np.asarray(image.shape, dtype=float) / Q  # (K, 4)
    th, tw = t[:, 2], t[:, 3]
    ghost = ((th + r * (Q[:, 2] > 1)) * (tw + s * (Q[:, 3] > 1)) - th * tw) * t[:, 0] * t[:, 1]
    return W * ghost


# -- operators ---------------------------------------------------------------


def _conv(op, D, C, e, model, W):
    comp, comm = _gemm(*_gemm_roles(op, D, C), op.pw, W)
    return comp, comm + _halo(op.inputs[0], C, D[4], D[5], W)


def _pooling(op, D, C, e, model, W):
    r, s = op.window
    return e, _halo(op.inputs[0], C, r, s, W)


def _gemm_op(op, D, C, e, model, W):
    return _gemm(*_gemm_roles(op, D, C), op.pw, W)


def _embedding(op, D, C, e, model, W):
    """Embedding ``(b, s, d, v)``, a GEMM with ``M = b*s`` (tokens), ``N = d``,
    ``K = v``; ``mm, nn, kk`` per device, split ``m, n, k`` ways.

    Original model: the one-hot GEMM.  ``model.embedding_lookup``: a gather
    of the rows the device's tokens need and a scatter-add of their
    gradients, ``2 * mm * nn``; the ids have no gradient, so the GEMM's
    input-gradient reduction ``AR(mm*kk, n)`` goes, while the reduction of
    partial rows over a split vocabulary ``AR(mm*nn, k)`` stays.

    Weight-gradient synchronisation among the ``m`` devices that split the
    tokens (and share a ``kk x nn`` shard of the table): the dense all-reduce
    ``AR(nn*kk, m)``, or a sparse push and pull of only the rows touched,
    ``W * 2 * u * nn`` with ``u = min(distinct rows, mm, kk)`` (zero when
    ``m = 1``), or the cheaper of the two, per ``model.embedding_sync``.
    """
    if model.original:
        return _gemm_op(op, D, C, e, model, W)
    bb, mm, nn, kk, m, n, k = _gemm_roles(op, D, C)
    dense = _allreduce(nn * kk, m, W)
    rows = mm if model.distinct_rows is None else np.minimum(mm, float(model.distinct_rows))
    sparse = np.where(m > 1, W * 2.0 * np.minimum(rows, kk) * nn, 0.0)
    sync = {"dense": dense, "sparse": sparse, "best": np.minimum(dense, sparse)}[model.embedding_sync]
    if model.embedding_lookup:
        return bb * 2.0 * mm * nn, bb * (_allreduce(mm * nn, k, W) + sync)
    return _gemm(bb, mm, nn, kk, m, n, k, op.pw, W, weight_sync=sync)


def _lstm(op, D, C, e, model, W):
    L, s, b, u = D[0], D[1], D[2], D[3]
    cl, cs, cb, cn, ck = (C[:, i] for i in range(5))
    comp, comm = _gemm(L / cl, s * b / (cs * cb), 4 * u / cn, 2 * u / ck, cs * cb, cn, ck, op.pw, W)
    cell_out = np.stack([b / cb, u / cn], axis=1)  # (K, 2) on cb*cn devices
    cell_in = np.stack([b / cb, u / ck], axis=1)  # (K, 2) on cb*ck devices
    return comp, comm + L * s * W * _need(cell_out, cell_in, cb * cn, cb * ck)


def _elementwise(op, D, C, e, model, W):
    return (1.0 + op.pw) * e, np.zeros_like(e)


def _norm(op, D, C, e, model, W):
    (a,) = op.axes
    ca = C[:, a]
    da = D[a] / ca
    used = np.prod(C, axis=1)
    comm = 4.0 * _allreduce(e / da, ca, W) + 4.0 * _allreduce(da, used / ca, W)
    return 16.0 * e, comm


def _reduce_mean(op, D, C, e, model, W):
    q = np.prod(C[:, list(op.axes)], axis=1)
    return np.zeros_like(e), _allreduce(e, q, W)


def _softmax(op, D, C, e, model, W):
    (a,) = op.axes
    ca = C[:, a]
    e1 = e / (D[a] / ca)  # e'
    comm = 2.0 * _allreduce(e1, ca, W) + _allreduce(e1 * D[a], ca, W)
    return 4.0 * e + e * D[a], comm


def _softmax_xent(op, D, C, e, model, W):
    c_last = C[:, -1]
    bs = e / (D[-1] / c_last)
    return 4.0 * e + 2.0 * bs, np.where(c_last > 1, W * 2.0 * bs, 0.0)


def _free(op, D, C, e, model, W):
    return np.zeros_like(e), np.zeros_like(e)


_FORMULAS = {
    "Conv": _conv,
    "Pooling": _pooling,
    "FC": _gemm_op,
    "Einsum": _gemm_op,
    "Embedding": _embedding,
    "LSTM": _lstm,
    "Elementwise": _elementwise,
    "Norm": _norm,
    "ReduceMean": _reduce_mean,
    "Softmax": _softmax,
    "SoftmaxCrossEntropy": _softmax_xent,
    "Concat": _free,
    "Stack": _free,
    "Unstack": _free,
    "Ravel": _free,
    "Unravel": _free,
}


def op_cost_parts(op: Operator, configs, model: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """(compute, communication) FLOP of ``op`` at each configuration (K,)."""
    C = np.asarray(configs, dtype=float).reshape(-1, len(op.space))  # (K, n)
    D = np.asarray(op.space, dtype=float)  # (n,)
    e = np.prod(D / C, axis=1)  # (K,) per-device volume
    comp, comm = _FORMULAS[op.kind](op, D, C, e, model, model.word_cost)
    return np.broadcast_to(comp, e.shape).astype(float), np.broadcast_to(comm, e.shape).astype(float)


def op_costs(op: Operator, configs, model: CostModel) -> np.ndarray:
    """Total FLOP of ``op`` at each configuration: a vector (K,)."""
    comp, comm = op_cost_parts(op, configs, model)
    return comp + comm


def edge_costs(src: Operator, out: int, tgt: Operator, inp: int, src_configs, tgt_configs,
               model: CostModel) -> np.ndarray:
    """Re-distribution cost (K_src, K_tgt) of the tensor ``src.outputs[out]``
    read as ``tgt.inputs[inp]``, forward and backward."""
    t_src, t_tgt = src.outputs[out], tgt.inputs[inp]
    T = np.asarray(t_src.shape, dtype=float)
    S = tensor_configs(t_src, np.asarray(src_configs, dtype=float).reshape(-1, len(src.space)))
    Q = tensor_configs(t_tgt, np.asarray(tgt_configs, dtype=float).reshape(-1, len(tgt.space)))
    ps, pt = np.prod(S, axis=1), np.prod(Q, axis=1)  # (K_src,), (K_tgt,)
    need = _need((T / S)[:, None, :], (T / Q)[None, :, :], ps[:, None], pt[None, :])
    return model.word_cost * 2.0 * need  # (K_src, K_tgt)


# -- whole graphs ------------------------------------------------------------


MAX_PROCS = 10**6


def check_procs(p) -> int:
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 1 <= p <= MAX_PROCS:
        raise ValueError(f"the number of devices p must be an integer from 1 to {MAX_PROCS:,}, got {p!r}")
    return int(p)


@dataclass
class CostedGraph:
    """Every configuration and cost of a graph for ``p`` devices.

    ``configs[v]``: int array (K_v, n_v); ``node_costs[v]``: (K_v,);
    ``edge_costs[(u, v)]``: (K_u, K_v) for each graph edge ``u -> v``.
    Identical operators and edges share (read-only) arrays.
    """

    graph: object
    p: int
    model: CostModel
    configs: list[np.ndarray]
    node_costs: list[np.ndarray]
    edge_costs: dict[tuple[int, int], np.ndarray] = field(repr=False)

    @property
    def n(self) -> int:
        return len(self.configs)

    def position(self, v: int, cfg) -> int | None:
        """Where configuration ``cfg`` of node ``v`` is in ``configs[v]``, or
        ``None`` when the search space does not hold it."""
        hits = np.nonzero((self.configs[v] == np.asarray(cfg)).all(axis=1))[0]
        return int(hits[0]) if len(hits) else None

    def outside(self, strategy) -> int | None:
        """The first node whose configuration lies outside the space, if any."""
        return next((v for v, cfg in enumerate(strategy) if self.position(v, cfg) is None), None)

    def index_of(self, strategy) -> list[int]:
        """Position of each node's configuration in ``configs`` (ValueError
        when one lies outside the enumerated space)."""
        index = [self.position(v, cfg) for v, cfg in enumerate(strategy)]
        if None in index:
            v = index.index(None)
            raise ValueError(f"node {v}: configuration {tuple(strategy[v])} is not in the search space")
        return index

    def cost_at(self, index) -> float:
        """Total cost of the strategy picking ``configs[v][index[v]]``."""
        total = math.fsum(float(self.node_costs[v][i]) for v, i in enumerate(index))
        return total + math.fsum(float(m[index[u], index[v]]) for (u, v), m in self.edge_costs.items())


class CostTablesTooLarge(MemoryError):
    """The edge cost matrices would not fit the memory limit."""


def build_costs(g, p: int, model: CostModel = CostModel(), memory_limit: int | None = None) -> CostedGraph:
    """Enumerate and cost every configuration and edge of ``g`` for ``p`` devices.

    With ``memory_limit`` (bytes), raise :class:`CostTablesTooLarge` before
    computing any edge matrix when they would not fit.
    """
    p = check_procs(p)
    cutoff = g.graph["cutoff"]
    ops = operators(g)
    configs, costs, seen = [], [], {}
    for op in ops:
        if op not in seen:  # identical layers share their arrays
            C = enumerate_configs(op.space, p, cutoff, op.never_split, op.contiguous_only)
            c = op_costs(op, C, model)
            C.flags.writeable = c.flags.writeable = False
            seen[op] = (C, c)
        configs.append(seen[op][0])
        costs.append(seen[op][1])
    graph_edges = sorted(g.edges(data=True))
    keys = {(u, v): (ops[u], d["out"], ops[v], d["inp"]) for u, v, d in graph_edges}
    if memory_limit is not None:
        pairs = {k: len(configs[u]) * len(configs[v]) for (u, v), k in keys.items()}
        need = 8 * (sum(pairs.values()) + 4 * max(pairs.values(), default=0))
        if need > memory_limit:
            raise CostTablesTooLarge(
                f"the edge cost matrices for p = {p} need {need / 1e9:.3g} GB but the limit is "
                f"{memory_limit / 1e9:.3g} GB (up to {max(len(c) for c in configs)} configurations "
                "per operator); use a smaller p or raise --mem-limit"
            )
    edges, seen_e = {}, {}
    for u, v, d in graph_edges:
        key = keys[(u, v)]
        if key not in seen_e:
            m = edge_costs(ops[u], d["out"], ops[v], d["inp"], configs[u], configs[v], model)
            m.flags.writeable = False
            seen_e[key] = m
        edges[(u, v)] = seen_e[key]
    return CostedGraph(g, p, model, configs, costs, edges)


# -- strategies --------------------------------------------------------------


def check_strategy(g, strategy) -> list[tuple[int, ...]]:
    """Validate one configuration per node: right count, right length,
    positive integer splits that divide the dimensions.  Returns it as
    tuples; raises ``ValueError`` naming the first bad node."""
    ops = operators(g)
    strategy = list(strategy)
    if len(strategy) != len(ops):
        raise ValueError(f"the strategy has {len(strategy)} configurations; {g.graph['name']} has {len(ops)} operators")
    out = []
    for v, (op, cfg) in enumerate(zip(ops, strategy)):
        where = f"node {v} ({op.name})"
        try:
            cfg = tuple(cfg)
        except TypeError:
            raise ValueError(f"{where}: configuration {cfg!r} is not a list of integers") from None
        if len(cfg) != len(op.space):
            raise ValueError(
                f"{where}: configuration {cfg} has {len(cfg)} entries; its space {op.space} has {len(op.space)}"
            )
        if not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 1 for c in cfg):
            raise ValueError(f"{where}: configuration {cfg} must hold integers >= 1")
        if any(d % c for d, c in zip(op.space, cfg)):
            raise ValueError(f"{where}: configuration {cfg} does not divide its space {op.space}")
        out.append(tuple(int(c) for c in cfg))
    return out


@dataclass(frozen=True)
class StrategyCost:
    """The cost of one strategy, broken down.

    ``compute[v]``, ``comm[v]``: operator ``v``'s own FLOP; ``edges[(u, v)]``:
    re-distribution FLOP of each edge; ``total`` is their sum.
    """

    total: float
    compute: tuple[float, ...]
    comm: tuple[float, ...]
    edges: dict

    @property
    def compute_total(self) -> float:
        return math.fsum(self.compute)

    @property
    def comm_total(self) -> float:
        return self.total - self.compute_total


def evaluate(g, strategy, model: CostModel = CostModel()) -> StrategyCost:
    """Cost of a strategy (one configuration per node id), which need not lie
    in any enumerated space.  Validates it first (see :func:`check_strategy`)."""
    strategy = check_strategy(g, strategy)
    ops = operators(g)
    comp, comm = [], []
    for op, cfg in zip(ops, strategy):
        a, b = op_cost_parts(op, [cfg], model)
        comp.append(float(a[0]))
        comm.append(float(b[0]))
    edges = {}
    for u, v, d in sorted(g.edges(data=True)):
        m = edge_costs(ops[u], d["out"], ops[v], d["inp"], [strategy[u]], [strategy[v]], model)
        edges[(u, v)] = float(m[0, 0])
    total = math.fsum(comp) + math.fsum(comm) + math.fsum(edges.values())
    return StrategyCost(total, tuple(comp), tuple(comm), edges)
