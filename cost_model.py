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
from kinds.base import shard_bytes
from kinds.base import OVERLAPPED, Comm, Footprint, Work
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
AUTO = "auto"  # an option the search chooses
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

    ``options``: the execution options (``options/``) as ``(name, value)``
    pairs: a value every operator it applies to takes, or ``"auto"``: the
    search chooses per operator (or block).  Those not named stay at their
    default.

    On a cluster with a memory bandwidth (:attr:`cluster.Cluster.realistic`,
    a real device) the *realistic* time model applies (:func:`price`): vendor
    FLOP at the device's efficiencies, a roofline with the memory traffic,
    collectives at NCCL's bus bandwidth, gradient and weight collectives
    overlapped with computation.  Otherwise the PaSE paper's model.

    ``micro_batches``: the costs are those of a pipeline stage's operators
    for one of that many micro-batches (:func:`price`): what each
    micro-batch pays, and the gradients' synchronisation, paid once per
    step, shared among them.
    """

    cluster: Cluster = Cluster()
    embedding_lookup: bool = False
    embedding_sync: str = "dense"
    distinct_rows: int | None = None
    optimizer: str = "adam"
    options: tuple = ()
    micro_batches: int | None = None

    def __post_init__(self):
        if not isinstance(self.cluster, Cluster):
            raise TypeError(f"cluster must be a Cluster, got {self.cluster!r}")
        if self.embedding_sync not in EMBEDDING_SYNC:
            raise SettingError("embedding_sync", f"must be one of {', '.join(EMBEDDING_SYNC)}, "
                                                 f"got {shown(self.embedding_sync)}")
        if not isinstance(self.embedding_lookup, bool):
            raise SettingError("embedding_lookup", f"must be true or false, got {shown(self.embedding_lookup)}")
        m = self.micro_batches
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise SettingError("micro_batches", f"must be an integer >= 1, got {shown(m)}")
        u = self.distinct_rows
        if u is not None and (isinstance(u, bool) or not isinstance(u, int) or u < 1):
            raise SettingError("distinct_rows", f"must be an integer >= 1, got {shown(u)}")
        if self.optimizer not in OPTIMIZERS:
            raise SettingError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {shown(self.optimizer)}")
        from options import OPTIONS

        opts = dict(self.options)
        for name, value in opts.items():
            if name not in OPTIONS:
                raise SettingError(name, "is not an execution option")
            if value != AUTO and value not in OPTIONS[name].values:
                raise SettingError(name, f"must be one of {', '.join(map(str, OPTIONS[name].values))} or auto, "
                                         f"got {shown(value)}")
        object.__setattr__(self, "options", tuple(sorted((k, v) for k, v in opts.items()
                                                         if v != OPTIONS[k].default)))

    @property
    def realistic(self) -> bool:
        """Whether the realistic time model applies (a real device)."""
        return self.cluster.realistic

    def option(self, name: str):
        """An option's setting: a value, ``"auto"``, or its default."""
        from options import OPTIONS

        return dict(self.options).get(name, OPTIONS[name].default)

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
        if self.realistic:
            c = self.cluster
            return (f"realistic ({c.device or 'a measured device'}): vendor FLOP at {100 * c.matmul_eff:.0f}% of peak "
                    f"for matrix products, {100 * c.attention_eff:.0f}% for fused attention, memory-bound work at "
                    f"{100 * c.memory_eff:.0f}% of {c.mem_bw:g} GB/s (roofline); gradients and gathered weights "
                    "overlap computation")
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


def collective_cost(c: Comm, C: Extents, net: Cluster, latency_scale=None):
    """FLOP of one of the collectives ``c`` describes on the cluster ``net``
    (its latency times ``latency_scale`` when given)."""
    if c.pattern == "allreduce":
        return net.allreduce(c.words, C, c.letters, latency_scale)
    if c.pattern in ("allgather", "reducescatter"):  # a reduce-scatter moves what an all-gather does
        return net.allgather(c.words, C, c.letters, latency_scale)
    if c.pattern == "send":
        return net.send(c.words, C, c.letters, times=c.rounds)
    if c.pattern == "alltoall":
        return net.alltoall(c.words, C, c.letters)
    return np.minimum(*[collective_cost(o, C, net, latency_scale) for o in c.options])  # the cheapest


def _in_grad_precision(c: Comm, net: Cluster) -> Comm:
    """A gradients' collective with its words counted in the precision the
    gradients are reduced in (as elements of the training precision)."""
    r = net.grad_bytes / net.word_bytes
    if c.role != "gradients" or r == 1.0:
        return c
    return replace(c, words=None if c.words is None else np.asarray(c.words) * r,
                   options=tuple(_in_grad_precision(o, net) for o in c.options))


def _exposed(overlapped, window, share: float):
    """What a collective of ``overlapped`` FLOP-equivalents leaves exposed
    when the share ``share`` of it may run under ``window`` of computation."""
    if share == 1.0:
        return np.maximum(overlapped - window, 0.0)
    return (1.0 - share) * overlapped + np.maximum(share * overlapped - window, 0.0)


TILE = 128  # the output tile of a matrix product, a side (elements)


def _wave_share(rows, cols, batch, sms: int):
    """The share of its multiprocessors' time a matrix product of ``batch``
    outputs of ``rows x cols`` keeps busy: its ``TILE x TILE`` output tiles
    run one per multiprocessor in waves, partial tiles and a last partial
    wave costing whole ones (NVIDIA's "Matrix Multiplication Background"
    guide: tile and wave quantization).  1 for a product of whole waves."""
    r, c = np.maximum(rows, 1.0), np.maximum(cols, 1.0)
    tiles = batch * np.ceil(r / TILE) * np.ceil(c / TILE)
    waves = np.ceil(tiles / sms)
    return (r * c * batch) / (waves * sms * TILE * TILE)


def _gemm_times(work: Work, net: Cluster, eff: float):
    """FLOP-equivalents of a work record's matrix products, forward and
    backward, at the peak times ``eff``, in waves (:func:`_wave_share`)
    when the record gives their shape and the cluster its multiprocessors:
    forward the ``M x N`` output, backward the input gradient ``M x K`` and
    the weight gradient ``K x N`` (half of the backward products each)."""
    fwd, bwd = 2.0 * work.macs / eff, 2.0 * work.backward_macs / eff
    if not work.shape or not net.sms:
        return fwd, bwd
    bb, mm, nn, kk = work.shape
    fwd = fwd / _wave_share(mm, nn, bb, net.sms)
    bwd = bwd / 2.0 * (1.0 / _wave_share(mm, kk, bb, net.sms) + 1.0 / _wave_share(kk, nn, bb, net.sms))
    return fwd, bwd


def traffic(op: Operator, C: Extents, work: Work):
    """Elements the forward and the backward pass of ``op`` read and write
    in the device's memory, per configuration (K,) each: the record's when
    it says, else what the tensors say: forward, every input (weights too)
    and output; backward, the gradient of every output, the tensors kept for
    it, and the gradient of every input (a weight's gradient too)."""
    if work.moved is not None:
        return work.moved, work.moved_back
    K = len(C)
    ins = [shard(t, C) for t in op.inputs]
    outs = sum((shard(t, C) for t in op.outputs), np.zeros(K))
    fwd = sum(ins, np.zeros(K)) + outs
    grads = sum((x for x, t in zip(ins, op.inputs) if t.role != "data"), np.zeros(K))
    kept = sum((shard(t, C) for t in op.kind.saved(op)), np.zeros(K))
    return fwd, outs + kept + grads


def _pass_times(op, C: Extents, work: Work, net: Cluster, eff: float, per_byte: float):
    """FLOP-equivalents of ``op``'s forward and backward pass on a real
    device: the roofline of its matrix products (in waves) and its memory
    traffic, and an activation's pass of its own over the product's output
    (read and written forward; the gradient, the input and the result
    backward)."""
    fwd_moved, bwd_moved = traffic(op, C, work)
    b = float(net.word_bytes)
    gemm_fwd, gemm_bwd = _gemm_times(work, net, eff)
    t_fwd = np.maximum(gemm_fwd, fwd_moved * b * per_byte)  # (K,) FLOP-equivalents
    t_bwd = np.maximum(gemm_bwd, bwd_moved * b * per_byte)  # (K,)
    if np.any(work.epilogue):
        t_fwd = t_fwd + 2.0 * work.epilogue * b * per_byte
        t_bwd = t_bwd + 3.0 * work.epilogue * b * per_byte
    return t_fwd, t_bwd


def price(work: Work, C: Extents, model: CostModel, op: Operator | None = None):
    """(compute, communication) FLOP of a work record on the model's
    cluster, for each configuration.

    The paper's model: the record's compute (plus its forward part per
    replay), and each collective's cost times its count, added in the
    record's order.

    The realistic model (a real device; ``op`` gives the memory traffic),
    in FLOP at the device's peak (a time ``t`` is ``t * flops``):

        t_pass  = max(2 macs / (peak * eff * waves), bytes / (memory bandwidth * memory_eff))   # roofline
                  + an activation's own pass over a product's output (its bytes)
        compute = t_forward * (1 + replays) + t_backward
        comm    = blocking collectives (partial sums, input gradients, statistics, halo, exchange)
                + exposed(gradients + gathered weights (backward half), t_backward)   # overlapped
                + exposed(gathered weights (forward half), t_forward)
        exposed(x, t) = (1 - o) x + max(0, o x - t)

    with ``o`` the cluster's ``overlap`` (1: all of it may overlap); the
    gradients' words count in the precision they are reduced in
    (``grad_precision``).

    ``eff`` is the matrix products' or the fused attention's efficiency;
    vendor FLOP count a multiply-add as two.  Gradient collectives go in
    buckets: each pays its share (its bytes over the bucket's) of one
    collective's latency.  The overlap window of an operator's collectives
    is its own pass: in a stack of equal layers, the layer before it.
    """
    net = model.cluster
    if model.micro_batches is not None:
        compute, comm, sync = price_stage(work, C, model, op)
        return compute, comm + sync / float(model.micro_batches)
    if not net.realistic:
        comm = None
        for c in work.comms:
            x = collective_cost(c, C, net)
            if c.count != 1:
                x = c.count * x
            comm = x if comm is None else comm + x
        compute = work.compute if not work.replays else work.compute + work.replays * work.forward
        return compute, np.zeros(len(C)) if comm is None else comm
    t_fwd, t_bwd, blocking, gathers, sync, overlapped_bwd = _real_parts(work, C, net, op)
    exposed = _exposed(overlapped_bwd, t_bwd, net.overlap) + _exposed(gathers, t_fwd, net.overlap)
    K = len(C)
    compute = np.broadcast_to(t_fwd * (1.0 + work.replays) + t_bwd, (K,))
    return compute, np.broadcast_to(blocking + exposed, (K,))


def _real_parts(work: Work, C: Extents, net: Cluster, op: Operator):
    """What :func:`price` and :func:`price_stage` read of a work record on
    a real device: the forward and backward pass times, the blocking
    collectives, half the weights' gathers (one pass's), the gradients'
    collectives, and what overlaps the backward pass (its half of the
    gathers and the gradients, added in the record's order)."""
    peak = net.flops * 1e12  # FLOP/s
    eff = net.attention_eff if work.kernel == "attention" else net.matmul_eff
    per_byte = peak / (net.mem_bw * 1e9 * net.memory_eff)  # FLOP-equivalents of one byte moved
    t_fwd, t_bwd = _pass_times(op, C, work, net, eff, per_byte)
    b = float(net.word_bytes)
    blocking = gathers = sync = overlapped_bwd = 0.0
    bucket = net.bucket_mb * 1e6
    for c in work.comms:
        if c.role in OVERLAPPED:
            c = _in_grad_precision(c, net)
            scale = np.asarray(c.words if c.words is not None else 0.0) * b / bucket  # a bucket's share of latency
            x = c.count * collective_cost(c, C, net, scale)
            if c.role == "weights":  # gathered twice: before the forward and before the backward pass
                gathers = gathers + x / 2.0
                overlapped_bwd = overlapped_bwd + x / 2.0
            else:
                sync = sync + x
                overlapped_bwd = overlapped_bwd + x
        else:
            blocking = blocking + c.count * collective_cost(c, C, net)
    return t_fwd, t_bwd, blocking, gathers, sync, overlapped_bwd


def price_stage(work: Work, C: Extents, model: CostModel, op: Operator):
    """(compute, communication, synchronisation) of a work record in a
    pipeline stage: the compute and communication one micro-batch pays
    (:func:`price`'s, the gradients' collectives left out; on a real device
    the gathered weights still overlapped with their pass), and the
    gradients' collectives, paid once per step (on a real device their
    whole time: the step's end overlaps them, see ``pipeline.py``)."""
    net = model.cluster
    K = len(C)
    if not net.realistic:
        comm = sync = np.zeros(K)
        for c in work.comms:
            x = c.count * collective_cost(c, C, net)
            if c.role == "gradients":
                sync = sync + x
            else:
                comm = comm + x
        compute = work.compute if not work.replays else work.compute + work.replays * work.forward
        return np.broadcast_to(compute, (K,)), np.broadcast_to(comm, (K,)), np.broadcast_to(sync, (K,))
    t_fwd, t_bwd, blocking, gathers, sync, _ = _real_parts(work, C, net, op)
    exposed = _exposed(gathers, t_bwd, net.overlap) + _exposed(gathers, t_fwd, net.overlap)
    compute = t_fwd * (1.0 + work.replays) + t_bwd
    return (np.broadcast_to(compute, (K,)), np.broadcast_to(blocking + exposed, (K,)),
            np.broadcast_to(sync, (K,)))


def op_cost_parts(op: Operator, configs, model: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """(compute, communication) FLOP of ``op`` at each configuration (K,)."""
    D, C = _extents(op, configs)
    comp, comm = price(op.kind.work(op, D, C, model), C, model, op)
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


def footprint(op: Operator, C: Extents, model: CostModel, shared=()) -> Footprint:
    """The bytes ``op`` holds at each configuration with its options at
    their default: its kind's weights and kept activations
    (:func:`op_memory`'s elements) at the precision's bytes."""
    w, a = op.kind.memory(op, C)
    for i in shared:
        w = w - shard(op.inputs[i], C)
    K = len(C)
    w = np.broadcast_to(w, (K,)).astype(float, copy=True)
    a = np.broadcast_to(a, (K,)).astype(float, copy=True)
    wb, gb, ob, ab = model.memory_bytes(w, a)
    kept = op.kind.saved(op)
    if any(t.bytes for t in kept):  # a tensor of its own bytes per element (a dropout's mask)
        b = model.cluster.word_bytes
        ab = np.broadcast_to(sum((shard_bytes(t, C, b) for t in kept), np.zeros(K)), (K,)).astype(float)
    return Footprint(wb, gb, ob, ab, np.zeros(K))


def _with_options(op: Operator, configs, model: CostModel, context, given=None):
    """``(C, work, footprint)`` of ``op`` at ``configs`` with the options
    ``given`` (name -> value; the model's fixed ones when ``None``) that
    apply to it."""
    from options import OPTIONS

    given = {k: v for k, v in model.options if v != AUTO} if given is None else given
    D, C = _extents(op, configs)
    work = op.kind.work(op, D, C, model)
    fp = footprint(op, C, model, tuple(sorted(context.shared)))
    for name, value in given.items():
        opt = OPTIONS[name]
        if value != opt.default and opt.applies(op, context):
            work = opt.work(value, op, C, work, context, model)
            fp = opt.memory(value, op, C, fp, context, model)
    return C, work, fp


def node_arrays(op: Operator, configs, model: CostModel, context=None, given=None, searched=()) -> NodeArrays:
    """``op``'s :class:`NodeArrays` at ``configs``: with the options
    ``given`` (name -> value; the model's fixed ones when ``None``) applied,
    and a table for each option named in ``searched`` that applies to it.
    Options that do not apply to the operator change nothing."""
    from options import OPTIONS, Context

    context = context or Context()
    C, work, fp = _with_options(op, configs, model, context, given)
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

    def figures(self, index, choices=None) -> "StrategyCost":
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

    def memory_with(self, in_flight: float) -> list:
        """Each operator's memory (K,) with the activations of ``in_flight``
        micro-batches kept (a pipeline stage's)."""
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


def estimate_costs(g, p: int, model: CostModel = CostModel()) -> CostEstimate:
    """The memory :func:`build_costs` will use for ``g``, ``p`` and the
    model's searched options."""
    from blocks import find_chains
    from options import OPTIONS, contexts

    p = check_procs(p)
    cutoff = g.graph["cutoff"]
    ops = operators(g)
    ctx = contexts(g, find_chains(g) if model.options else ())
    searched = [OPTIONS[name] for name, value in model.options if value == AUTO]
    keyed = (lambda c: c.key) if model.options else (lambda c: c.shared)
    ids: dict = {}  # identical operators share an id, as they share their arrays (and their edges' matrices)
    op_id = [ids.setdefault(op, len(ids)) for op in ops]
    distinct = list(ids)
    counts = [count_configurations(op, p, cutoff) for op in distinct]
    # per configuration: its splits, compute, communication and cost, weights, activations, memory, its four
    # parts and its transient; per searched option and value, seven more (cost, communication, parts, transient);
    # an operator in another context (a weight another holds, a place in a block) has arrays of its own
    arrays = {(op_id[v], keyed(ctx[v])): sum(7 * len(o.values) for o in searched if o.applies(ops[v], ctx[v]))
              for v in range(len(ops))}
    held = sum(8 * counts[i] * (len(distinct[i].space) + 11 + extra) for (i, _), extra in arrays.items())
    pairs = {(op_id[u], d["out"], op_id[v], d["inp"]): counts[op_id[u]] * counts[op_id[v]]
             for u, v, d in g.edges(data=True)}
    held += 8 * sum(pairs.values())
    largest_K = max(counts, default=0)
    largest_edge = max(pairs.values(), default=0)
    op_work = max((k * (len(op.space) + _OP_TEMPORARIES) for op, k in zip(distinct, counts)), default=0)
    return CostEstimate(held, held + 8 * max(_EDGE_TEMPORARIES * largest_edge, op_work), largest_K, largest_edge)


def build_costs(g, p: int, model: CostModel = CostModel(), memory_limit: int | None = None,
                progress=None, edges: bool = True) -> CostedGraph:
    """Enumerate and cost every configuration and edge of ``g`` for ``p`` devices.

    With ``memory_limit`` (bytes), raise :class:`CostTablesTooLarge` before
    enumerating anything when :func:`estimate_costs` exceeds it.  ``progress(done,
    total)`` is called as the edge matrices are built.  Without ``edges``,
    the operators' arrays only (:func:`with_edges` adds the edges later).
    """
    from blocks import find_chains
    from options import contexts

    p = check_procs(p)
    if memory_limit is not None:
        est = estimate_costs(g, p, model)
        if est.peak > memory_limit:
            raise CostTablesTooLarge(
                f"the cost arrays for p = {p} need {est.peak / 1e9:.3g} GB but the limit is "
                f"{memory_limit / 1e9:.3g} GB (up to {est.largest_K} configurations per operator, "
                f"edge matrices of up to {est.largest_edge:.3g} entries); use a smaller p or raise the memory limit"
            )
    cutoff = g.graph["cutoff"]
    ops = operators(g)
    chains = find_chains(g)
    ctx = contexts(g, chains)
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
    for step, (u, v, d) in enumerate(graph_edges):
        key = (ops[u], d["out"], ops[v], d["inp"])
        if key not in seen_e:
            m = edge_costs(ops[u], d["out"], ops[v], d["inp"], configs[u], configs[v], model)
            m.flags.writeable = False
            seen_e[key] = m
        edges[(u, v)] = seen_e[key]
        if progress is not None:
            progress(step + 1, len(graph_edges))
    return replace(costed, edge_costs=edges)


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


def evaluate(g, strategy, model: CostModel = CostModel(), p: int | None = None) -> StrategyCost:
    """Cost of a strategy (one configuration per node id), which need not lie
    in any enumerated space, with the formulas the cost arrays are built from.
    Validates it first (see :func:`check_strategy`).  With ``p``, says which
    configurations the search space for ``p`` devices holds (else: none)."""
    from blocks import find_chains
    from options import OPTIONS, contexts

    strategy = check_strategy(g, strategy)
    ops = operators(g)
    comp, comm, weights, acts, parts, transient = [], [], [], [], [], []
    uses_options = any(d.options for d in strategy) or model.options
    chains = find_chains(g) if uses_options else ()
    ctx = contexts(g, chains)
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
        key = (ops[u], d["out"], ops[v], d["inp"], strategy[u].config, strategy[v].config)
        if key not in moved:
            m = edge_costs(ops[u], d["out"], ops[v], d["inp"], [strategy[u].config], [strategy[v].config], model)
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
            D, C = _extents(op, [(1,) * len(op.space)])
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
            C, work, _ = _with_options(op, ones, model, ctx[v], {n: d.option(n) for n in OPTIONS})
            seen[key] = work.replays * 2.0 * op.kind.model_macs(op, work) / 3.0 if work.replays else 0.0
        if seen[key]:
            out.append(seen[key])
    return math.fsum(out)


def make_result(g, sc, model, p: int, mode: str, **fields) -> Result:
    """A :class:`result.Result` for graph ``g`` from a :class:`StrategyCost`."""
    shared = _shared(g)

    def saves(v, op, d):  # what the options save on what the operator keeps
        if not d.options:
            return 0.0
        _, C = _extents(op, [d.config])
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
    if model.realistic and "model_flops" not in fields:
        fields["model_flops"] = model_flops(g, model)
        fields["recomputed_flops"] = recomputed_flops(g, sc.strategy, model)
    return Result(mode, g.graph["name"], params, p, model, layers, edges, parameters=parameter_count(g),
                  model_source=source, defaults=defaults, words=words_moved(g, sc, model),
                  transient=sc.peak_transient, **fields)


def _elements(c: Comm, C: Extents):
    """Elements one device sends or receives in one of the collectives
    ``c`` describes, on one ring: an all-reduce ``2 w (q - 1) / q``, an
    all-gather or a reduce-scatter ``w (q - 1) / q``, a send ``w``."""
    if c.pattern == "cheapest":
        return np.minimum(*[_elements(o, C) for o in c.options])
    q = C[c.letters]
    if c.pattern == "allreduce":
        return 2.0 * c.words * (q - 1.0) / q
    if c.pattern in ("allgather", "reducescatter", "alltoall"):
        return c.words * (q - 1.0) / q
    return np.where(q > 1, c.words, 0.0)


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
    uses_options = any(d.options for d in sc.strategy)
    ctx = contexts(g, find_chains(g) if uses_options else ())
    moved, seen = [], {}  # identical operators (edges) with the same decisions move the same
    for v, (op, d) in enumerate(zip(ops, sc.strategy)):
        key = (op, d, ctx[v].key)
        if key not in seen:
            C, work, _ = _with_options(op, [d.config], model, ctx[v], {n: d.option(n) for n in OPTIONS})
            seen[key] = [float((x.count * _elements(x, C))[0]) if np.ndim(x.count * _elements(x, C)) else
                         float(x.count * _elements(x, C)) for x in work.comms]
        moved.extend(seen[key])
    unit = CostModel(Cluster(1.0, 1000.0 * c.word_bytes, precision=c.precision))  # one element costs 1
    for u, v, e in sorted(g.edges(data=True)):
        key = (ops[u], e["out"], ops[v], e["inp"], sc.strategy[u].config, sc.strategy[v].config)
        if key not in seen:
            m = edge_costs(ops[u], e["out"], ops[v], e["inp"], [sc.strategy[u].config], [sc.strategy[v].config],
                           unit)
            seen[key] = float(m[0, 0])
        moved.append(seen[key])
    return math.fsum(moved)
