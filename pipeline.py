"""Pipeline parallelism: stages, micro-batches and schedules, costed and
searched with each stage's own plan.

A pipeline of ``pp`` stages runs each stage on its own ``q = p / pp``
devices, consecutive in the device numbering (so a stage fills whole nodes
when ``q`` is a multiple of a node, and shares one otherwise).  The stages
split the search order into contiguous ranges: for a stacked model (its
repeated blocks, ``blocks.py``) the cuts fall between blocks, the first
stage taking what comes before the blocks (the embedding) and the last what
follows (the head and the loss).  The batch is split into ``m``
micro-batches; each stage runs every micro-batch with its own plan for its
operators on its ``q`` devices, found by the exact search (repeated blocks
searched once), within the device memory.

**Time** (Narayanan et al., SC'21; Zheng et al., "Alpa", OSDI'22, eq. 2).
With ``t_i`` stage ``i``'s time for one micro-batch (its operators' costs at
the micro-batch, and sending the boundary's activations forward and their
gradients back to the next stage, ``2 x`` the boundary tensor's share of a
device, on the link the two stages meet on: between nodes when they are on
different ones)::

    T = m * max_i t_i + (sum_i t_i - max_i t_i) / v + synchronisation

``v = 1`` (GPipe, 1F1B) is Alpa's ``sum_i t_i + (m - 1) max_i t_i``; the
interleaved schedule with ``v`` chunks per device divides the bubble by
``v`` and sends ``v`` times as much point to point (the last stage
``v - 1`` times, each chunk but its last on to the first stage's next), where the
micro-batches fill the stages (``m max_i t_i`` at least ``sum_i t_i``;
with fewer, each micro-batch still runs through every stage in turn:
``T`` is at least ``sum_i t_i + (m - 1) max_i t_i / v``).  The synchronisation is
the gradients' (the stages' own collectives of ``gradients``), once per
step: the slowest stage's, after the last micro-batch; on a real device it
overlaps that micro-batch's backward pass (two thirds of ``t_i``), and the
sends overlap computation (``t_i`` is then the larger of the two, not their
sum).  The *bubble fraction* is Narayanan et al.'s: idle time over ``m *
max t``, ``(pp - 1) / (v m)`` for equal stages and at least ``pp``
micro-batches (with fewer, ``(pp - m + (m - 1) / v) / m``).

**Memory** of stage ``i``: its weights, gradients and optimizer state (with
ZeRO over its own data-parallel replicas), the activations of the
micro-batches in flight, and the transient of its largest block: GPipe
keeps all ``m``; 1F1B ``min(pp - i, m)`` (stage ``i`` from 0); interleaved,
as Megatron-LM schedules it, ``2 (pp - i - 1) + (v - 1) pp + 1`` chunks
(at most ``m v``), each chunk's own: the moment in the schedule's order
(:func:`order`) when the chunks held add up to the most, each chunk's
activations counted for the micro-batches it holds then
(:meth:`Schedule.chunk_in_flight`).  So the last stage keeps its last
chunk's (the head's and the loss's) for one micro-batch, as 1F1B's last
stage does.  A stage's blocks split into its ``v`` chunks as evenly as
they divide, the later chunks (held for fewer micro-batches) taking one
more (:func:`chunk_ranges`: 15 blocks into 7 and 8), what precedes the
blocks in the first chunk and what follows them in the last.

**Search**: :mod:`pipeline_search`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from errors import InputError
from pipeline_layout import (balanced_ranges, block_layers, chunk_ranges, chunk_share, chunk_sizes, chunking_error,
                             counts_ends, cut_as_framework, partitions, sent_on, split_counts, stage_blocks,
                             stage_chunk_sizes, stage_ranges, unblocked_error)

__all__ = ["Schedule", "Stage", "Pipeline", "parse_schedule", "node_in_flight", "order", "evaluate", "SCHEDULES",
           # how the stages split the model (pipeline_layout), for the callers of this module
           "balanced_ranges", "block_layers", "chunk_ranges", "chunk_share", "chunk_sizes", "chunking_error",
           "counts_ends", "cut_as_framework", "partitions", "split_counts", "stage_blocks", "stage_chunk_sizes",
           "stage_ranges", "unblocked_error", "stage_sends", "with_sends"]

SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule: ``gpipe``, ``1f1b`` or ``interleaved`` with
    ``chunks`` model chunks per device."""

    name: str = "1f1b"
    chunks: int = 1

    def __post_init__(self):
        if self.name not in SCHEDULES:
            raise InputError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.name!r}")
        if self.name != "interleaved" and self.chunks != 1 or self.chunks < 1:
            raise InputError(f"{self.name} has one chunk per device, not {self.chunks}")

    def __str__(self) -> str:
        return f"interleaved:{self.chunks}" if self.name == "interleaved" else self.name

    @property
    def v(self) -> int:
        return self.chunks

    def in_flight(self, i: int, pp: int, m: int) -> float:
        """Micro-batches of stage ``i``'s activations kept at once (see
        the module docstring)."""
        if self.name == "gpipe":
            return float(m)
        if self.name == "1f1b":
            return float(min(pp - i, m))
        v = self.chunks
        return min(2 * (pp - i - 1) + (v - 1) * pp + 1, m * v) / v

    def chunk_in_flight(self, i: int, pp: int, m: int, weights=None, moments=None) -> tuple[float, ...]:
        """Micro-batches of each of stage ``i``'s ``v`` model chunks kept at
        its peak: the first moment, in the schedule's order (:func:`order`),
        when the chunks it holds, ``weights[j]`` each of chunk ``j`` (the
        bytes of a micro-batch's activations; default: alike), add up to
        the most.  Their sum over ``v`` is :meth:`in_flight`'s count when
        the weights are alike.  ``moments``: :meth:`forward_moments` of the
        same stage, when known."""
        w = tuple(weights) if weights is not None else (1.0,) * self.chunks
        best, at = -1.0, (0,) * self.chunks
        for held in moments if moments is not None else self.forward_moments(i, pp, m):
            total = math.fsum(h * x for h, x in zip(held, w))
            if total > best:
                best, at = total, held
        return tuple(float(h) for h in at)

    def forward_moments(self, i: int, pp: int, m: int) -> tuple[tuple[int, ...], ...]:
        """The micro-batches of each chunk stage ``i`` holds after each
        forward pass, in the schedule's order, each distinct one once (at
        its first moment): where :meth:`chunk_in_flight` looks for the
        peak."""
        return tuple(dict.fromkeys(held for forward, held in self._held(i, pp, m) if forward))

    def chunk_peaks(self, i: int, pp: int, m: int) -> tuple[float, ...]:
        """The most micro-batches of each of stage ``i``'s model chunks ever
        kept at once, in the schedule's order (:func:`order`): at least
        :meth:`chunk_in_flight`'s, whatever the chunks' weights (stage 1 of
        32 with 64 micro-batches: 64 and 32, where its peak holds 61 and
        32)."""
        most = [0] * self.chunks
        for _, held in self._held(i, pp, m):
            most = [max(a, b) for a, b in zip(most, held)]
        return tuple(float(x) for x in most)

    def _held(self, i: int, pp: int, m: int):
        """After each operation of stage ``i`` in the schedule's order
        (:func:`order`): whether it was a forward pass, and the micro-batches
        of each chunk then held."""
        held = [0] * self.chunks
        for kind, _, c in order(self.name, i, pp, _periodic(self, i, pp, m), self.chunks):
            held[c] += 1 if kind == "F" else -1
            yield kind == "F", tuple(held)

    def time(self, times, m: int, share: float | None = None) -> float:
        """The pipeline's time for ``m`` micro-batches whose stages take
        ``times`` each (without the synchronisation); ``share``: with model
        chunks of unequal blocks, the largest chunk's share of its stage
        (the fill and the drain wait on it), else ``1 / v``."""
        longest, total = max(times), math.fsum(times)
        share = 1.0 / self.chunks if share is None else share
        # fewer micro-batches than fill the stages: each still runs every stage in turn (one alone takes the sum)
        return max(m * longest + (total - longest) * share, total + (m - 1) * longest * share)

    def bubble(self, times, m: int, share: float | None = None) -> float:
        """Idle time over the busy time of the slowest stage."""
        longest = max(times)
        return (self.time(times, m, share) - m * longest) / (m * longest) if longest else 0.0


def _periodic(schedule: Schedule, i: int, pp: int, m: int) -> int:
    """As many micro-batches as stage ``i`` needs to hold what ``m`` make
    it hold: past its warm-up, :func:`order` repeats itself every ``pp``
    micro-batches (each chunk of each in turn), so the same warm-up, a few
    of those turns and the same last, partial group show every count it
    ever holds; ``m`` itself where that is not fewer (a batch of millions
    of micro-batches is not listed one by one)."""
    if schedule.name == "gpipe":
        return m
    v = schedule.chunks
    warm = (pp - i - 1) * (2 if v > 1 else 1) + (v - 1) * pp  # forward chunks before the first backward
    enough = pp * (-(-warm // (pp * v)) + 4)
    return m if m <= enough + pp else enough + (m - enough) % pp


def order(name: str, i: int, pp: int, m: int, v: int = 1) -> list[tuple[str, int, int]]:
    """The operations of stage ``i`` of ``pp`` in the order schedule
    ``name`` runs them: ``(kind, micro-batch, chunk)``, kind ``F``
    (forward) or ``B`` (backward).  GPipe: every forward pass, then every
    backward pass; 1F1B (Megatron-LM's): ``pp - i - 1`` forward passes to
    warm up, then one forward and one backward in turn, then the backward
    passes left; interleaved (Megatron-LM's): ``2 (pp - i - 1) + (v - 1)
    pp`` forward chunks to warm up, micro-batches taken ``pp`` at a time,
    each chunk in turn (the backward passes from the last chunk)."""
    if name == "gpipe":
        return [("F", k, 0) for k in range(m)] + [("B", k, 0) for k in range(m)]
    forward, backward = [], []
    for first in range(0, m, pp):  # micro-batches pp at a time, each chunk in turn (v = 1: one at a time)
        group = range(first, min(first + pp, m))
        forward += [("F", k, c) for c in range(v) for k in group]
        backward += [("B", k, c) for c in reversed(range(v)) for k in group]
    warm = min((pp - i - 1) * (2 if v > 1 else 1) + (v - 1) * pp, m * v)
    ops = forward[:warm]
    for f, b in zip(forward[warm:], backward):
        ops += [f, b]
    return ops + backward[len(forward) - warm:]


def parse_schedule(text: str) -> Schedule:
    """``gpipe``, ``1f1b``, ``interleaved`` (2 chunks) or ``interleaved:V``."""
    name, colon, chunks = str(text).strip().lower().partition(":")
    if name not in SCHEDULES or (colon and name != "interleaved") or (colon and not chunks):
        raise InputError(f"schedule must be gpipe, 1f1b, interleaved or interleaved:V, got {text!r}")
    if chunks and (not (chunks.isascii() and chunks.isdigit()) or not 2 <= int(chunks) <= 64):
        raise InputError(f"interleaved:V needs V from 2 to 64 chunks, got {chunks!r}")
    return Schedule(name, int(chunks) if chunks else (2 if name == "interleaved" else 1))


@dataclass(frozen=True)
class Stage:
    """One stage: ``nodes`` its operators (node ids of the graph at the
    micro-batch), on ``devices`` devices from ``first``; ``time`` per
    micro-batch (FLOP at the device's peak, the sends included), ``sends``
    the elements one device sends forward per micro-batch and model chunk
    (as many come back as gradients; an interleaved last stage's, its
    chunks' average: all but its last send on to the first stage), ``p2p``
    what they cost per micro-batch, ``sync`` the gradients' synchronisation per step,
    ``memory`` its peak per device (bytes), ``in_flight`` the micro-batches
    of activations it keeps, and its ``result`` (a :class:`result.Result`
    for one micro-batch of its operators)."""

    index: int
    nodes: tuple
    devices: int
    first: int
    time: float
    compute: float
    sends: float
    p2p: float
    sync: float
    memory: float
    in_flight: float
    result: object
    host: float = 0.0  # of ``time``: the expert layers' wait on the host (frameworks.host)


@dataclass(frozen=True)
class Pipeline:
    """A pipelined plan: ``pp`` stages, ``m`` micro-batches of ``micro``
    samples, its schedule, its stages, and the step's cost (FLOP at the
    device's peak): the pipeline's time and the synchronisation."""

    pp: int
    m: int
    micro: int
    schedule: Schedule
    stages: tuple
    step: float
    sync: float
    bubble: float
    bound: str = ""  # how exact the search is, in words
    replicas: int = 1  # data-parallel replicas sharing each micro-batch (a standard configuration's dp), as reported

    @property
    def peak_memory(self) -> float:
        return max(s.memory for s in self.stages)

    @property
    def peak_stage(self) -> Stage:
        return max(self.stages, key=lambda s: s.memory)


def node_in_flight(schedule: Schedule, i: int, pp: int, m: int, chain=None, lo: int = 0, hi: int = 0):
    """Micro-batches of activations stage ``i`` keeps of its operators
    ``[lo, hi)``, as the search bounds a stage's memory by them: one
    number (:meth:`Schedule.in_flight`), or with the interleaved schedule's
    chunks (of ``chain``'s blocks) one per operator, its chunk's own most
    (:meth:`Schedule.chunk_peaks`), so that the search sees which chunk
    keeps an operator's activations longest (on stage 1 of 32 with 64
    micro-batches, 64 of its first chunk and 32 of its second) and bounds
    what the costed pipeline counts (:func:`assemble`), whatever its plan
    keeps in each chunk."""
    if schedule.v == 1 or chain is None:
        return schedule.in_flight(i, pp, m)
    out: list = []
    for c, (a, b) in zip(schedule.chunk_peaks(i, pp, m), chunk_ranges(chain, lo, hi, schedule.v)):
        out += [c] * (b - a)
    return tuple(out)


def stage_cost_model(model, q: int, pp: int, m: int):
    """The cost model of one of ``pp`` stages of ``q`` devices, each
    micro-batch one of ``m``: its cluster (:func:`stage_cluster`), the
    gradients' synchronisation paid once per step.  One stage of one
    micro-batch is the plan itself: costed as a plan without stages (its
    gradients overlapping each operator's backward pass), so that the
    same decisions cost the same either way."""
    staged = pp > 1 or m > 1
    return replace(model, cluster=stage_cluster(model.cluster, q), micro_batches=m if staged else None,
                   pipelined=pp > 1)


def stage_cluster(cluster, q: int):
    """The cluster of one stage of ``q`` devices: whole nodes when it fills
    them, else one node."""
    G = cluster.gpus_per_node
    return replace(cluster, gpus_per_node=G if G is not None and q > G else None)


def stage_sends(cluster, whole, q: int, pp: int, i: int, schedule: Schedule, own: float, first: float) -> tuple:
    """What stage ``i`` of ``pp`` (``q`` devices each) sends on per
    micro-batch: ``(elements one device sends, their cost)`` (FLOP, the
    activations forward and their gradients back, on the link the stages
    meet on: ``cluster`` the stage's, ``whole`` the cluster all share);
    ``own`` the elements the stage sends on, ``first`` the first stage's
    (which the last stage's chunks but the last send on to under the
    interleaved schedule)."""
    if i < pp - 1:
        sends, apart = own / q, _between_nodes(whole or cluster, q, i)
    elif schedule.v > 1 and pp > 1:  # each chunk but the last sends on to the first stage's next chunk
        sends, apart = first / q * (schedule.v - 1) / schedule.v, _wraps_between_nodes(whole or cluster, q, pp)
    else:
        return 0.0, 0.0
    return sends, 2.0 * schedule.v * sends * (cluster.inter_word if apart else cluster.word)


def with_sends(busy: float, p2p: float, realistic: bool) -> float:
    """A stage's time per micro-batch from its work (``busy``) and what it
    sends on (``p2p``): on a real device the sends overlap the
    computation (the larger of the two), in the paper's model they follow
    it (their sum)."""
    return max(busy, p2p) if realistic else busy + p2p


def _between_nodes(cluster, q: int, i: int) -> bool:
    """Whether stage ``i`` and stage ``i + 1`` (``q`` devices each, device
    ``j`` sending to ``j + q``) meet on the network between nodes: where
    some pair lies on two nodes, a node's first device among stage ``i``'s
    second to stage ``i + 1``'s last."""
    G = cluster.gpus_per_node
    if G is None:
        return False
    return q >= G or (i * q) // G != ((i + 2) * q - 1) // G


def _wraps_between_nodes(cluster, q: int, pp: int) -> bool:
    """Whether the last of ``pp`` stages sends to the first (an interleaved
    schedule's next chunk) over the network between nodes: where the
    stages' devices fill more than a node."""
    G = cluster.gpus_per_node
    return G is not None and pp * q > G


def assemble(g, model, p: int, pp: int, m: int, micro: int, schedule: Schedule, ranges, results,
             bound: str = "", crossing=None, chunks=None, share=None, moments=None, hosts=None,
             whole=None) -> Pipeline:
    """The :class:`Pipeline` of stages over ``ranges`` whose plans cost
    ``results`` (a :class:`result.Result` per stage, with its ``sync``),
    ``model`` the stages' (:func:`stage_cluster`) and ``whole`` the
    cluster all the stages share (where the stages meet: between nodes or
    inside one; ``model``'s without it);
    ``crossing``: the elements each stage sends on, when known;
    ``chunks``: with more than one model chunk per device, the bytes of a
    micro-batch's activations of each stage's chunks (``v`` per stage), its
    peak counted chunk by chunk (:meth:`Schedule.chunk_in_flight`); without
    them, ``v`` equal chunks; ``share``: the largest chunk's share of its
    stage where chunks hold unequal blocks (:func:`chunk_share`); ``moments``:
    a dict kept by the caller across calls, of each stage's
    :meth:`Schedule.forward_moments` (filled here); ``hosts``: each stage's
    wait on the host per micro-batch (:func:`frameworks.host.wait`)."""
    q = p // pp
    cluster = model.cluster
    stages, times = [], []
    if crossing is None:
        sent = sent_on(g)
        crossing = [sent(lo, hi) for lo, hi in ranges]
    for i, ((lo, hi), r) in enumerate(zip(ranges, results)):
        own = crossing[i] if i < pp - 1 else 0.0
        first = crossing[0] if i == pp - 1 and schedule.v > 1 else 0.0
        sends, p2p = stage_sends(cluster, whole, q, pp, i, schedule, own, first)
        host = hosts[i] if hosts else 0.0
        busy = r.compute + r.communication - r.sync / m + host  # the synchronisation is the step's
        t = with_sends(busy, p2p, cluster.realistic)
        f = schedule.in_flight(i, pp, m)
        if chunks is not None and schedule.v > 1:  # each chunk's activations for the micro-batches it holds
            acts = chunks[i]
            key = (schedule, i, pp, m)
            if moments is not None and key not in moments:
                moments[key] = schedule.forward_moments(i, pp, m)
            held = schedule.chunk_in_flight(i, pp, m, acts, None if moments is None else moments[key])
            kept = math.fsum(c * a for c, a in zip(held, acts))
            f = kept / r.memory[3] if r.memory[3] > 0 else f
            memory = math.fsum(r.memory[:3]) + kept + r.transient
        else:
            memory = math.fsum(r.memory[:3]) + f * r.memory[3] + r.transient
        stages.append(Stage(i, tuple(range(lo, hi)), q, i * q, t, busy, sends, p2p, r.sync, memory, f, r, host))
        times.append(t)
    run = schedule.time(times, m, share)
    if cluster.realistic and pp == 1:  # accumulation: under the last micro-batch's backward pass as without it
        sync = stages[0].result.sync_exposed
    elif cluster.realistic:  # the gradients overlap the last micro-batch's backward pass (their overlapped share)
        from cost.rules import overlap_share  # a framework's own share where a stage shards its gradients

        shares = [overlap_share(model, s.result.sharded_gradients) for s in stages]
        sync = max((1.0 - o) * s.sync + max(o * s.sync - 2.0 * s.time / 3.0, 0.0) for s, o in zip(stages, shares))
    else:
        sync = max(s.sync for s in stages)
    return Pipeline(pp, m, micro, schedule, tuple(stages), run + sync, sync, schedule.bubble(times, m, share), bound)


def stage_result(sub, decisions, model, q: int, ctx=None):
    """The :class:`result.Result` of one stage's plan (the graph ``sub`` of
    its operators, their ``decisions``) for one micro-batch, with ``sync``
    its gradients' synchronisation per step (the result's communication
    holds what a micro-batch pays only).  ``ctx``: the operators' contexts
    in the whole model (a stage of one block still recomputes as a block);
    default: the stage's own."""
    from cost_model import evaluate, make_result

    sc = evaluate(sub, decisions, model, q, ctx=ctx)
    # without micro-batches (one stage, one micro-batch) the gradients are in the operators' own costs
    sync, exposed = stage_sync(sub, decisions, model, q, ctx) if model.micro_batches is not None else (0.0, 0.0)
    r = make_result(sub, sc, model, q, "evaluate", ctx=ctx, host=0.0)  # the stage's wait: stage_waits
    return replace(r, sync=sync, sync_exposed=exposed)


def stage_sync(sub, decisions, model, q: int, ctx=None) -> tuple[float, float]:
    """The gradients' synchronisation of a stage's operators, per step, and
    what it leaves exposed under the last micro-batch's backward pass,
    operator by operator (:func:`cost.time.last_sync_exposed`)."""
    from blocks import find_chains
    from cost.time import _real_parts, last_sync_exposed
    from cost_model import price_stage, with_options
    from graph import operators
    from options import OPTIONS, contexts

    if ctx is None:
        ctx = contexts(sub, find_chains(sub))
    out, seen = [], {}  # identical operators with the same decision and context synchronise the same
    whole = replace(model, micro_batches=None)
    for v, (op, d) in enumerate(zip(operators(sub), decisions)):
        key = (op, d, ctx[v].key)
        if key not in seen:
            C, work, _ = with_options(op, [d.config], model, ctx[v], {n: d.option(n) for n in OPTIONS})
            parts = _real_parts(work, C, whole, op) if whole.cluster.realistic else None  # read by both
            sync = float(price_stage(work, C, whole, op, parts=parts)[2][0])
            # exposed under the last micro-batch: read where there is one stage alone (accumulation)
            exposed = 0.0 if model.pipelined else float(last_sync_exposed(work, C, whole, op, parts=parts)[0])
            seen[key] = (sync, exposed)
        out.append(seen[key])
    return math.fsum(x for x, _ in out), math.fsum(y for _, y in out)


def evaluate(g, model, p: int, pp: int, m: int, micro: int, schedule: Schedule, ranges, decisions,
             bound: str = "") -> Pipeline:
    """The pipeline of the given stage ``ranges`` and per-operator
    ``decisions`` (for the micro-batch graph ``g``), costed."""
    from blocks import find_chains
    from frameworks.host import stage_waits
    from options import contexts

    q = p // pp
    stage_model = stage_cost_model(model, q, pp, m)
    chains = find_chains(g)
    ctx = contexts(g, chains)  # each operator's place among the whole model's blocks
    results, done = [], {}  # stages alike with the same decisions cost the same
    for i, (lo, hi) in enumerate(ranges):
        ops = tuple((op.kind, op.space) for op in (g.nodes[v]["op"] for v in range(lo, hi)))
        key = (i == 0, i == pp - 1, ops, tuple(decisions[lo:hi]), tuple(c.key for c in ctx[lo:hi]))
        if key not in done:
            done[key] = stage_result(_subgraph(g, lo, hi), decisions[lo:hi], stage_model, q, ctx[lo:hi])
        results.append(done[key])
    chunks = share = None
    if schedule.v > 1 and chains:  # each model chunk's activations (the stages cut between the longest chain's blocks)
        chain = max(chains, key=lambda c: c.count * c.size)
        chunks = []
        for (lo, hi), r in zip(ranges, results):
            acts = [layer.memory[3] for layer in r.layers]
            chunks.append(tuple(math.fsum(acts[a - lo:b - lo]) for a, b in chunk_ranges(chain, lo, hi, schedule.v)))
        counts = [b - a for a, b in (stage_blocks(chain, lo, hi) for lo, hi in ranges)]
        share = chunk_share(counts, schedule.v, cut_as_framework(counts, schedule.v, model.framework,
                                                                block_layers(g, chain)))
    hosts = stage_waits(g, ctx, ranges, results, stage_model)  # expert layers waiting on the host
    return assemble(g, stage_model, p, pp, m, micro, schedule, ranges, results, bound, chunks=chunks, share=share,
                    hosts=hosts, whole=model.cluster)


def _subgraph(g, lo: int, hi: int):
    """The operators ``[lo, hi)`` of ``g`` as a graph of their own."""
    import networkx as nx

    nodes = list(range(lo, hi))
    sub = nx.relabel_nodes(g.subgraph(nodes).copy(), {v: v - lo for v in nodes})
    for v in sub.nodes:
        reads = sub.nodes[v].get("reads", ())
        sub.nodes[v]["reads"] = tuple(u - lo if u is not None and lo <= u < hi else None for u in reads)
    sub.graph["shared"] = [(v - lo, i) for v, i in g.graph.get("shared", ()) if lo <= v < hi]
    return sub


def as_result(g, pipe: Pipeline, model, p: int, batch: int, mode: str, **fields):
    """The :class:`result.Result` of a pipelined plan: every stage's layers
    (their costs for one micro-batch, on their stage's devices), the
    edges inside stages, and the pipeline."""
    from cost_model import model_flops, recomputed_flops
    from graph import parameter_count
    from result import Result

    layers, edges, words = [], [], 0.0
    for s in pipe.stages:
        lo = s.nodes[0]
        r = s.result
        layers += [replace(layer, id=layer.id + lo, name=g.nodes[layer.id + lo]["op"].name) for layer in r.layers]
        edges += [(u + lo, v + lo, c) for u, v, c in r.edges]
        words += r.words * pipe.m + 2.0 * pipe.schedule.v * s.sends * pipe.m
    first, slow = pipe.stages[0].result, max(pipe.stages, key=lambda s: s.time)  # slow: the critical path
    params = tuple((k, batch if k == "batch" else v) for k, v in first.params)
    fields.setdefault("pooled", math.fsum(s.result.pooled for s in pipe.stages))  # per micro-batch, every stage
    if model.realistic:  # the model's FLOP for the whole batch
        fields.setdefault("model_flops", model_flops(g, model) * pipe.m)
        fields.setdefault("recomputed_flops", recomputed_flops(g, [x.decision for x in layers], model) * pipe.m)
    return Result(mode, g.graph["name"], params, p, model, tuple(layers), tuple(edges),
                  parameters=first.parameters if len(pipe.stages) == 1 else parameter_count(g),
                  model_source=first.model_source, defaults=first.defaults, words=words,
                  transient=pipe.peak_stage.result.transient, pipeline=pipe, host=pipe.m * slow.host, **fields)
