"""The time of a piece of work on the cluster: an operator's work record
priced at each configuration (compute and communication); the
re-distribution of a tensor on an edge is :mod:`cost.edges`'s.

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
from cost.rules import (CostModel, contention_of, every_micro_batch, extents, gather_share, gathered_in_fp8,
                        inside_node, keeps_stage_whole, nvlink_parts, nvlink_windows, overlap_share, regathered,
                        under_backward)
from graph import Operator
from kinds import Extents, shard
from kinds.base import OVERLAPPED, Comm, Work

__all__ = ["op_work", "collective_cost", "wave_share", "traffic", "price", "price_stage", "op_cost_parts", "op_costs",
           "TILE", "as_run", "ring_parts", "ring_kv", "ring_heads", "pass_times",
           "tp_overlapped", "TP_ROLES", "copies", "overlap_pieces", "pipelined"]

def op_work(op: Operator, configs, model: CostModel) -> Work:
    """What ``op`` does in a step at each configuration (its kind's record)."""
    D, C = extents(op, configs)
    return op.kind.work(op, D, C, model)


def as_run(op: Operator, C: Extents, work: Work, context, model: CostModel) -> Work:
    """``op``'s work record as the model's framework runs it
    (:mod:`frameworks`):

    * eager kernels (:func:`frameworks.eager.passes`): the bytes each
      element-wise operation moves beyond a fused pass, and the kernels it
      launches; none when compiled or fused;
    * the loss (a softmax cross-entropy) moves ``loss_moved`` bytes per
      logit (an fp32 loss of its own, eager, or compiled with the model)
      instead of its fused pass;
    * an input kept as this device's shard under sequence parallelism
      (:func:`cost.rules.regathered`) is all-gathered again for the
      backward pass (role ``inputs``: overlapped with it);
    * Float8: a weighted matrix product of a repeated block (not the output
      layer) runs in FP8, and casts its input and weights, forward, and its
      output's gradient and weights, backward, each read twice (the scale,
      then the cast) and written at a byte per element, with the
      transposed copies the weight gradient's product reads;
    * the weights the device updates at the optimizer step (``updated``):
      those it holds, a weight another operator holds (tied) counted there.
    """
    fw = model.framework
    b = float(model.cluster.word_bytes)
    extra, extra_back, kernels = 0.0, 0.0, (0.0, 0.0)
    if fw.eager:
        from frameworks.eager import passes

        extra, extra_back, kernels = passes(op, C, work, model.cluster.word_bytes)
    if op.kind.name == "SoftmaxCrossEntropy":
        logits = shard(op.inputs[0], C)
        fused_fwd, fused_bwd = 2.0 * b, 3.0 * b  # the fused pass: logits in and out; forward and backward
        forward, backward = fw.loss_moved
        extra = (forward - fused_fwd) * logits
        extra_back = (backward - fused_bwd) * logits
    comms = work.comms
    for i, letters in regathered(op, C, model):
        comms = comms + (Comm("inputs", "allgather", shard(op.inputs[i], C), letters),)
    weights = [t for i, t in enumerate(op.inputs) if t.role == "weight" and i not in context.shared]
    fp8 = bool(fw.float8 and np.any(work.macs) and work.kernel == "matmul" and weights and context.block is not None)
    if fp8:
        x = sum((shard(t, C) for t in op.inputs if t.role != "weight"), 0.0)
        w = sum((shard(t, C) for t in op.inputs if t.role == "weight"), 0.0)
        y = shard(op.outputs[0], C)
        extra = extra + 5.0 * (x + w)
        extra_back = extra_back + 5.0 * (y + w) + 2.0 * (x + y)
    updated = sum((shard(t, C) for t in weights), 0.0) if weights else 0.0
    return replace(work, extra=extra, extra_back=extra_back, kernels=kernels, fp8=fp8, comms=comms,
                   updated=updated if work.updated is None else work.updated)


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
        return net.alltoall(c.words, C, c.letters, once=c.once)
    return np.minimum(*[collective_cost(o, C, net, latency_scale) for o in c.options])  # the cheapest


def _in_grad_precision(c: Comm, net: Cluster) -> Comm:
    """A gradients' collective with its words counted in the precision the
    gradients are reduced in (as elements of the training precision)."""
    r = net.grad_bytes / net.word_bytes
    if c.role != "gradients" or r == 1.0:
        return c
    return replace(c, words=None if c.words is None else np.asarray(c.words) * r,
                   options=tuple(_in_grad_precision(o, net) for o in c.options))


def _exposed(overlapped, window, share: float, nvlink=0.0):
    """What a collective of ``overlapped`` FLOP-equivalents leaves exposed
    when the share ``share`` of it may run under ``window`` of computation
    (and, a collective between nodes, under ``nvlink`` of collectives
    inside one node that block the computation: it uses other links)."""
    if share == 1.0:
        return np.maximum(overlapped - window - nvlink, 0.0)
    return (1.0 - share) * overlapped + np.maximum(share * overlapped - window - nvlink, 0.0)


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


def _pass_times(op, C: Extents, work: Work, net: Cluster, eff: float, per_byte: float, launch: float = 0.0):
    """FLOP-equivalents of ``op``'s forward and backward pass on a real
    device: the roofline of its matrix products (in waves) and its memory
    traffic, and an activation's pass of its own over the product's output
    (read and written forward; the gradient, the input and the result
    backward); as a framework runs it, the bytes it moves beyond those
    passes and ``launch`` per kernel it launches (:func:`as_run`)."""
    fwd_moved, bwd_moved = traffic(op, C, work)
    b = float(net.word_bytes)
    gemm_fwd, gemm_bwd = _gemm_times(work, net, eff)
    t_fwd = np.maximum(gemm_fwd, fwd_moved * b * per_byte)  # (K,) FLOP-equivalents
    t_bwd = np.maximum(gemm_bwd, bwd_moved * b * per_byte)  # (K,)
    if np.any(work.epilogue):
        t_fwd = t_fwd + 2.0 * work.epilogue * b * per_byte
        t_bwd = t_bwd + 3.0 * work.epilogue * b * per_byte
    if np.any(work.extra) or np.any(work.extra_back):
        t_fwd = t_fwd + work.extra * per_byte
        t_bwd = t_bwd + work.extra_back * per_byte
    if launch and any(work.kernels):
        t_fwd = t_fwd + work.kernels[0] * launch
        t_bwd = t_bwd + work.kernels[1] * launch
    return t_fwd, t_bwd


def price(work: Work, C: Extents, model: CostModel, op: Operator | None = None, parts=None):
    """(compute, communication) FLOP of a work record on the model's
    cluster, for each configuration (``parts``: its :func:`_real_parts`).

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
        compute, comm, sync = price_stage(work, C, model, op, parts=parts)
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
    t_fwd, t_bwd, blocking, gathers, sync, overlapped_bwd, inputs, step, nvlink = parts or _real_parts(
        work, C, model, op)
    o = overlap_share(model, work.sharded)
    nv_fwd, nv_bwd = nvlink_windows(nvlink)
    exposed = _exposed(overlapped_bwd, t_bwd, o, nv_bwd) + _exposed(gathers, t_fwd, o, nv_fwd)
    if inputs is not None:  # inputs gathered again, under the backward pass
        exposed = exposed + _exposed(inputs, t_bwd, 1.0)
    exposed = exposed + _contention(model, o, overlapped_bwd, t_bwd) + _contention(model, o, gathers, t_fwd)
    K = len(C)
    compute = t_fwd * (1.0 + work.replays) + t_bwd
    if step is not None:  # one micro-batch: the step's work and the micro-batch's copies
        compute = compute + step[0] + step[1]
    return np.broadcast_to(compute, (K,)), np.broadcast_to(blocking + exposed, (K,))


def _contention(model: CostModel, share: float, overlapped, window):
    """The computation a framework's collectives slow down while they run under it: ``contention``
    times the part of them that overlaps (their ``share`` that may)."""
    c = contention_of(model)
    return c * np.minimum(share * overlapped, window) if c else 0.0


def pass_times(work: Work, C: Extents, model: CostModel, op: Operator):
    """The forward and backward pass times of a work record on a real
    device (FLOP-equivalents), with the framework's overhead, and the
    FLOP-equivalents of a byte moved.  The matrix units run at the
    device's ``power`` share of their peak; FP8 products (Float8) at its
    FP8 peak."""
    net = model.cluster
    fw = model.framework
    peak = net.flops * 1e12  # FLOP/s
    eff = net.attention_eff if work.kernel == "attention" else net.matmul_eff
    if net.power != 1.0:
        eff = eff * net.power
    if work.fp8 and net.fp8_flops:
        eff = eff * net.fp8_flops / net.flops
    per_byte = peak / (net.mem_bw * 1e9 * net.memory_eff)  # FLOP-equivalents of one byte moved
    launch = fw.launch_us * 1e-6 * peak if fw is not None and fw.eager else 0.0
    t_fwd, t_bwd = _pass_times(op, C, work, net, eff, per_byte, launch)
    if fw is not None and fw.overhead:
        t_fwd, t_bwd = t_fwd * (1.0 + fw.overhead), t_bwd * (1.0 + fw.overhead)
    return t_fwd, t_bwd, per_byte


def _real_parts(work: Work, C: Extents, model: CostModel, op: Operator):
    """What :func:`price` and :func:`price_stage` read of a work record on
    a real device: the forward and backward pass times, the blocking
    collectives, half the weights' gathers (one pass's), the gradients'
    collectives, what overlaps the backward pass (its half of the gathers
    and the gradients, added in the record's order), the inputs gathered
    again for it (``None``: none; a framework's own asynchronous
    collective, overlapped whatever the cluster's ``overlap``), ``step``
    what a framework's run adds beyond the passes (``None`` without one),
    ``(once a step, each micro-batch)``: its optimizer step over the
    weights the device updates, and the copies of its gathered weights out
    of the collectives' buffers (``gather_bytes`` per parameter and gather)
    and of their gradients into them (``reduce_bytes`` per reduction),
    made as often as the framework gathers and reduces them (:func:`copies`);
    and ``nvlink``, its blocking collectives inside one node and whether its
    overlapped ones cross nodes (:func:`cost.rules.nvlink_parts`).

    A matrix product's own tensor-parallel collectives run piece by piece
    under it where the run overlaps them (``--tp-overlap``,
    :func:`pipelined`)."""
    net = model.cluster
    fw = model.framework
    t_fwd, t_bwd, per_byte = pass_times(work, C, model, op)
    b = float(net.word_bytes)
    blocking = gathers = sync = overlapped_bwd = inside = 0.0
    if work.ring:  # ring attention: its merges and gradients' passes, and what its exchanges leave exposed
        more_fwd, more_bwd, exposed_fwd, exposed_bwd = ring_parts(op, C, work, model, t_fwd, t_bwd, per_byte)
        t_fwd, t_bwd = t_fwd + more_fwd, t_bwd + more_bwd
        blocking = exposed_fwd * (1.0 + work.replays) + exposed_bwd
    fp8_gathers = bool(work.fp8) and gathered_in_fp8(model, "weights")  # at a byte per element, cast before
    inputs = None
    bucket = net.bucket_mb * 1e6
    gathered = casts_saved = copies_saved = 0.0
    tp = tp_overlapped(work, model)
    piped = False  # (K,) where the input gradient's reduction runs under the weight gradient's product
    for c in work.comms:
        if tp and c.role in TP_ROLES:  # a product's own tensor-parallel collective, pipelined under it: the
            # partial sums under the forward product, the input gradient's reduction under the weight gradient's
            window = t_fwd if c.role == "partial sums" else t_bwd / 2.0
            pieces = overlap_pieces(C, c.letters, net)
            x = pipelined(c.count * collective_cost(c, C, net), window, pieces)
            blocking, inside = blocking + x, inside + inside_node(x, c, C, net)
            if c.role == "input gradients":
                piped = piped | (np.asarray(pieces) > 1)
        elif c.role in OVERLAPPED:
            c = _in_grad_precision(c, net)
            if fp8_gathers and c.role == "weights":
                held = np.asarray(c.words)
                c = replace(c, words=held / b)
                # the weights cast where they are held (their shard) rather than where gathered, in each pass
                # (5 bytes per element: Float8 in as_run), and each gather's copy out of the collective's
                # buffer moved at a byte per element rather than b
                casts_saved = casts_saved + 5.0 * held * (1.0 - 1.0 / C[c.letters])
                copies_saved = copies_saved + fw.gather_bytes * (1.0 - 1.0 / b) * held
            scale = np.asarray(c.words if c.words is not None else 0.0) * b / bucket  # a bucket's share of latency
            x = c.count * collective_cost(c, C, net, scale if c.role != "inputs" else None)
            if c.role == "weights":  # gathered twice: before the forward and before the backward pass
                gathers = gathers + x / 2.0
                overlapped_bwd = overlapped_bwd + x / 2.0
                gathered = gathered + np.asarray(c.words) * (b if fp8_gathers else 1.0)
            elif c.role == "inputs":  # gathered again for the backward pass, under it (the framework's own
                inputs = x if inputs is None else inputs + x  # asynchronous collective, whatever the overlap)
            else:
                sync = sync + x
                overlapped_bwd = overlapped_bwd + x
        else:
            x = c.count * collective_cost(c, C, net)
            blocking, inside = blocking + x, inside + inside_node(x, c, C, net)
    if tp and inputs is not None:  # the input gathered again under the input gradient's product alone where the
        # weight gradient's hides its reduction, else under the whole backward pass
        blocking = blocking + np.maximum(inputs - np.where(piped, t_bwd / 2.0, t_bwd), 0.0)
        inputs = None
    step = None
    if fw is not None:
        per_gather = fw.gather_bytes * np.asarray(gathered) - copies_saved
        step = copies(work, model, fw.optimizer_bytes * np.asarray(work.updated if work.updated is not None else 0.0),
                      per_gather, fw.reduce_bytes * np.asarray(gathered), per_byte)
    if fp8_gathers:
        saved = casts_saved * per_byte * (1.0 + fw.overhead)
        t_fwd, t_bwd = t_fwd - saved, t_bwd - saved
    nvlink = nvlink_parts(work, C, net, t_fwd, t_bwd, inside)
    return t_fwd, t_bwd, blocking, gathers, sync, overlapped_bwd, inputs, step, nvlink


def copies(work: Work, model: CostModel, optimizer, per_gather, per_reduce, per_byte) -> tuple:
    """``(once a step, each micro-batch)`` FLOP-equivalents of what a
    framework's step adds to ``work`` beyond its passes: the optimizer
    step over its updated weights (``optimizer`` bytes, once), and the
    copies of its gathered weights (``per_gather`` bytes a gather) and of
    their gradients (``per_reduce`` bytes a reduction).  Each micro-batch
    gathers its weights before the forward and again before the backward
    pass, and reduces its gradients where the framework reduces them after
    every micro-batch (:func:`cost.rules.every_micro_batch`; else once a
    step); a pipeline stage kept whole over the step
    (:func:`cost.rules.keeps_stage_whole`) gathers once, before its first
    forward pass, and reduces once.  One micro-batch: the same as before
    micro-batches were told apart (two gathers, one reduction)."""
    if keeps_stage_whole(model):
        return (optimizer + per_gather + per_reduce) * per_byte, 0.0
    if every_micro_batch(work, model):
        return optimizer * per_byte, (2.0 * per_gather + per_reduce) * per_byte
    return (optimizer + per_reduce) * per_byte, 2.0 * per_gather * per_byte


#: the collectives of a matrix product that overlapped tensor parallelism runs piece by piece under it
TP_ROLES = ("partial sums", "input gradients")


def tp_overlapped(work: Work, model: CostModel) -> bool:
    """Whether ``work`` is a matrix product whose tensor-parallel collectives
    the run overlaps with it (``--tp-overlap``), under sequence parallelism:
    its all-reduces stand for the all-gathers and reduce-scatters split."""
    fw = model.framework
    return bool(fw is not None and fw.tp_overlap and fw.sp and model.cluster.realistic and work.kernel == "matmul"
                and np.any(work.macs))


def overlap_pieces(C: Extents, letters: str, net: Cluster):
    """The pieces an overlapped tensor-parallel collective over ``letters``
    runs in: its group's size in a node, one (no overlap) where the group
    spans nodes (Transformer Engine's userbuffers join a node's devices)."""
    return np.where(np.asarray(net.across(C, letters)) > 1, 1.0, C[letters])


def pipelined(comm, window, pieces):
    """What a collective of ``comm`` leaves exposed run in ``pieces`` under
    a matrix product of ``window`` (FLOP-equivalents), each piece's beside
    the next piece's product (Megatron-LM's ``--tp-comm-overlap``,
    torchtitan's asynchronous tensor parallelism): one piece's collective,
    or what the collective takes beyond the other pieces' products."""
    q = np.maximum(np.asarray(pieces, dtype=float), 1.0)
    return np.maximum(comm / q, comm - np.maximum(window, 0.0) * (q - 1.0) / q)


def ring_parts(op: Operator, C: Extents, work: Work, model: CostModel, t_fwd, t_bwd, per_byte: float):
    """What ring attention adds to an attention operator whose query
    positions (``work.ring``) are split over ``c`` devices, as the model's
    framework runs it (its ``ring``; PyTorch's
    ``torch.distributed.tensor.experimental`` ring attention, as torchtitan
    runs it): ``(forward, backward, exposed forward, exposed backward)``
    FLOP-equivalents, (K,) each, nothing where ``c = 1``; ``per_byte`` the
    FLOP-equivalents of a byte moved in the device's memory.

    The operator's ``c`` steps each run one attention kernel over ``1 / c``
    of its score elements (the causal work balanced: each device holds two
    of ``2 c`` chunks), ``t_fwd / c`` and ``t_bwd / c`` each.  The keys and
    values (``kv`` elements the whole sequence's of the device's heads,
    ``kv / c`` its own):

    * ``allgather``: all-gathered once under the first step's kernel,
      forward and again backward;
    * ``p2p``: sent to the next device under each of the ``c - 1`` steps
      that need them, forward and backward.

    Their gradients travel step by step at ``ring_grad_bytes`` per element
    (the next step's kernel covers each but the last, which returns them
    home).  Exposed: whatever a transfer takes beyond the kernel under it.
    The bytes it moves beyond the kernels (eager PyTorch): forward, each
    step's output merged into the running one in fp32 (:data:`MERGE_BYTES`
    per element, after the first), the first step's output to fp32 and the
    result back, the keys and values packed for sending; backward, the
    fp32 (``g`` bytes) gradients zeroed, each step's added in (``2 g + b``
    per element of the queries, the keys and values), the keys' and
    values' packed for sending (``2 g``), and the results back to the
    training precision.  The keys and values are packed into one buffer at
    every step but the last, forward and backward, whichever way they
    travel (the all-gather sends only the first)."""
    from kinds.attention import MERGE_BYTES

    net, fw = model.cluster, model.framework
    c, kv, b, g = ring_kv(op, C, model)
    split = c > 1
    mine = kv / c
    q, out = shard(op.inputs[0], C), shard(op.outputs[0], C)
    kernel_fwd, kernel_bwd = t_fwd / c, t_bwd / c

    def send(words):
        return collective_cost(Comm("exchange", "send", words, work.ring), C, net)

    grads = send(mine * g / b)
    if fw.ring == "allgather":
        gather = collective_cost(Comm("exchange", "allgather", kv, work.ring), C, net)
        exposed_fwd = np.maximum(gather - kernel_fwd, 0.0)
        exposed_bwd = np.maximum(gather - kernel_bwd, 0.0) + (c - 1.0) * np.maximum(grads - kernel_bwd, 0.0)
    else:
        kvs = send(mine)
        exposed_fwd = (c - 1.0) * np.maximum(kvs - kernel_fwd, 0.0)
        exposed_bwd = (c - 1.0) * np.maximum(kvs + grads - kernel_bwd, 0.0)
    packed = (c - 1.0) * 2.0 * b * mine  # read and written at each step but the last
    exposed_bwd = exposed_bwd + grads  # the last step's gradients, home after the last kernel
    back = (g + b) * (q + mine) if g != b else 0.0
    fwd = (c - 1.0) * MERGE_BYTES * out + 2.0 * (b + 4.0) * out + packed
    bwd = g * (q + mine) + c * ((2.0 * g + b) * (q + mine) + 2.0 * g * mine) + back + packed
    zero = np.zeros(len(C))
    return (np.where(split, fwd * per_byte, zero), np.where(split, bwd * per_byte, zero),
            np.where(split, exposed_fwd, zero), np.where(split, exposed_bwd, zero))


def ring_kv(op: Operator, C: Extents, model: CostModel) -> tuple:
    """What every part of ring attention reads of ``op`` (an attention
    operator run as ring attention, its query positions split over ``c``
    devices): ``(c, kv, b, g)``, (K,) arrays ``c`` and ``kv`` (the keys' and
    values' elements its kernels read, the whole sequence's, each head as
    many times as :func:`ring_heads` says), the training precision's bytes
    ``b`` and the gradients' ``g`` (the framework's ``ring_grad_bytes``, else
    ``b``)."""
    fw = model.framework
    b = float(model.cluster.word_bytes)
    c = C[op.dims[-3]]
    kv = (shard(op.inputs[1], C) + shard(op.inputs[2], C)) * ring_heads(op, C, fw)
    return c, kv, b, float(fw.ring_grad_bytes or b)


def ring_heads(op: Operator, C: Extents, fw) -> np.ndarray:
    """How many times a ring passes each key and value head of ``op`` (K,):
    once, or, where the framework repeats them for every query head of
    their group before the kernel (its ``repeat_kv``), the device's query
    heads per key head."""
    k = op.inputs[1]
    group = np.ones(len(C))
    if fw is not None and fw.repeat_kv:
        for j, a in enumerate(k.axes[:-2]):
            if not a:  # one key/value head for this axis's query heads: repeated for the device's share of them
                group = group * op.space[j] / C[op.dims[j]]
    return group


def last_sync_exposed(work: Work, C: Extents, model: CostModel, op: Operator, parts=None):
    """What the gradients' reduction a stage leaves for the step's end
    (:func:`price_stage`'s synchronisation) leaves exposed when it runs
    under the last micro-batch's backward pass as a plan without
    micro-batches runs it (:func:`price`): each operator's own backward
    pass its window, shared with what already runs under it.  (K,); 0 on
    the paper's model (the synchronisation paid whole)."""
    K = len(C)
    if not model.cluster.realistic:
        return np.zeros(K)
    t_fwd, t_bwd, blocking, gathers, sync, _, inputs, step, nvlink = parts or _real_parts(work, C, model, op)
    o = overlap_share(model, work.sharded)
    under_bwd, sync = under_backward(work, model, gathers, sync)
    nv_bwd = nvlink_windows(nvlink)[1]
    both = under_bwd + sync
    with_sync = _exposed(both, t_bwd, o, nv_bwd) + _contention(model, o, both, t_bwd)
    without = _exposed(under_bwd, t_bwd, o, nv_bwd) + _contention(model, o, under_bwd, t_bwd)
    return np.broadcast_to(with_sync - without, (K,)).astype(float)


def price_stage(work: Work, C: Extents, model: CostModel, op: Operator, once: bool = True, parts=None):
    """(compute, communication, synchronisation) of a work record in a
    pipeline stage: what one micro-batch pays (:func:`price`'s, without the
    gradients' collectives but where :func:`cost.rules.under_backward` runs them
    under its backward pass, its weights' gathers :func:`cost.rules.gather_share`
    of them; with ``once``, its share of the optimizer step), and the gradients'
    collectives paid once per step (on a real device their whole time: the
    step's end overlaps them, ``pipeline.py``)."""
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
    t_fwd, t_bwd, blocking, gathers, sync, _, inputs, step, nvlink = parts or _real_parts(work, C, model, op)
    o = overlap_share(model, work.sharded)
    under_bwd, sync = under_backward(work, model, gathers, sync)
    share, (nv_fwd, nv_bwd) = gather_share(model), nvlink_windows(nvlink)
    exposed = _exposed(under_bwd, t_bwd, o, nv_bwd) + share * _exposed(gathers, t_fwd, o, nv_fwd)
    if inputs is not None:  # inputs gathered again, under the backward pass
        exposed = exposed + _exposed(inputs, t_bwd, 1.0)
    exposed = exposed + _contention(model, o, under_bwd, t_bwd) + share * _contention(model, o, gathers, t_fwd)
    compute = t_fwd * (1.0 + work.replays) + t_bwd
    if step is not None:  # the micro-batch's copies, and with ``once`` its share of the step's work
        compute = compute + step[1] + (step[0] / float(model.micro_batches or 1) if once else 0.0)
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
