"""The time of a piece of work on the cluster: an operator's work record
priced at each configuration (compute and communication), and the
re-distribution of a tensor on an edge.

Two models share these functions.  The PaSE paper's (the neutral setting):
compute in FLOP, each collective's words at the cluster's bandwidth as FLOP
(Elango, IPDPS 2021, section III).  The realistic model on a real device: a
roofline of vendor FLOP (in waves of output tiles) against the memory
traffic, collectives at NCCL's bus bandwidth, gradient and weight
collectives overlapped with computation (:func:`price`).  Everything is
vectorised over an operator's ``K`` configurations, ``(K,)`` per operator
and ``(K_src, K_tgt)`` per edge; nothing here checks divisibility
(:func:`cost.evaluate.check_strategy` does).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cluster import Cluster
from cost.rules import CostModel, extents
from graph import Operator
from kinds import Extents, need, shard, tensor_splits
from kinds.base import OVERLAPPED, Comm, Work

__all__ = ["op_work", "collective_cost", "wave_share", "traffic", "price", "price_stage", "op_cost_parts", "op_costs",
           "edge_costs", "TILE"]

def op_work(op: Operator, configs, model: CostModel) -> Work:
    """What ``op`` does in a step at each configuration (its kind's record)."""
    D, C = extents(op, configs)
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


def wave_share(rows, cols, batch, sms: int):
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
    backward, at the peak times ``eff``, in waves (:func:`wave_share`)
    when the record gives their shape and the cluster its multiprocessors:
    forward the ``M x N`` output, backward the input gradient ``M x K`` and
    the weight gradient ``K x N`` (half of the backward products each)."""
    fwd, bwd = 2.0 * work.macs / eff, 2.0 * work.backward_macs / eff
    if not work.shape or not net.sms:
        return fwd, bwd
    bb, mm, nn, kk = work.shape
    fwd = fwd / wave_share(mm, nn, bb, net.sms)
    bwd = bwd / 2.0 * (1.0 / wave_share(mm, kk, bb, net.sms) + 1.0 / wave_share(kk, nn, bb, net.sms))
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
    D, C = extents(op, configs)
    comp, comm = price(op.kind.work(op, D, C, model), C, model, op)
    K = len(C)
    return (np.broadcast_to(comp, (K,)).astype(float, copy=True),
            np.broadcast_to(comm, (K,)).astype(float, copy=True))


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
    C_src, C_tgt = extents(src, src_configs)[1], extents(tgt, tgt_configs)[1]
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
