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
``v`` and sends ``v`` times as much point to point.  The synchronisation is
the gradients' (the stages' own collectives of ``gradients``), once per
step: the slowest stage's, after the last micro-batch; on a real device it
overlaps that micro-batch's backward pass (two thirds of ``t_i``), and the
sends overlap computation (``t_i`` is then the larger of the two, not their
sum).  The *bubble fraction* is Narayanan et al.'s: idle time over ``m *
max t``, ``(pp - 1) / (v m)`` for equal stages.

**Memory** of stage ``i``: its weights, gradients and optimizer state (with
ZeRO over its own data-parallel replicas), the activations of the
micro-batches in flight, and the transient of its largest block: GPipe
keeps all ``m``; 1F1B ``min(pp - i, m)`` (stage ``i`` from 0); interleaved,
as Megatron-LM schedules it, ``2 (pp - i - 1) + (v - 1) pp + 1`` chunks of
``1 / v`` of the stage (at most ``m v``).

**Search** (:func:`search`): over ``pp`` (the divisors of ``p`` up to the
number of blocks whose blocks share out evenly enough, ``N / (pp
ceil(N / pp)) >= 0.85``), the micro-batch size (for each ``pp``, about each
power of two from an eighth of a stage's devices to all of them, dividing
the batch, with at least ``pp`` micro-batches, tried from the smallest up
while the ranking improves), the schedule (1F1B, and interleaved with 2
chunks when every stage holds an even number of blocks; GPipe runs as fast
as 1F1B with more memory, so only when asked), and the cuts (blocks shared
evenly, the first and the last stage taking up to two fewer or one more:
Alpa's stage DP restricted to partitions of identical blocks).  Every
setting is ranked by its stages' unconstrained optima: for a stacked model
each stage length's optimum comes from one short chain (three blocks'
matrices, :func:`search.chain.stage_costs`); settings with a stage that
cannot fit (each operator at its least memory) are dropped, and so are
those whose operators at their cheapest already cost more than the
ranking's best few.  The best few (``SEARCHED``) are then searched within
the memory: each kind of stage (the first, the middle ones of a length,
the last) once, by the exact search with its Lagrangian bound, for the
most micro-batches in flight among the stages of that kind (its plan
serves them all).  So each stage's plan is exact (or within its stated
bound) for its cut, micro-batch and schedule; the choice of ``pp``,
micro-batch, schedule and cuts is over the candidates above, bounded, not
exhaustive.  A graph without repeated blocks is cut once per ``pp`` (up to
8 stages) where the running sum of its operators' least costs reaches each
stage's share, every stage searched on its own.  Zero-bubble schedules
(ZB-H1) are not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from errors import InputError

__all__ = ["Schedule", "Stage", "Pipeline", "parse_schedule", "stage_ranges", "evaluate", "search", "SCHEDULES"]

SCHEDULES = ("gpipe", "1f1b", "interleaved")
SEARCHED = 4  # pipeline settings searched within the memory, the best ranked first
ABANDON = 1.02  # a candidate whose stage's bound times m passes the best step by this much is dropped
DAG_STAGES = 8  # the most stages the search tries on a graph without repeated blocks
BALANCE = 0.85  # the least share of its busiest stage's time the blocks keep busy (N / (pp ceil(N / pp)))


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

    def time(self, times, m: int) -> float:
        """The pipeline's time for ``m`` micro-batches whose stages take
        ``times`` each (without the synchronisation)."""
        longest = max(times)
        return m * longest + (math.fsum(times) - longest) / self.chunks

    def bubble(self, times, m: int) -> float:
        """Idle time over the busy time of the slowest stage."""
        longest = max(times)
        return (self.time(times, m) - m * longest) / (m * longest) if longest else 0.0


def parse_schedule(text: str) -> Schedule:
    """``gpipe``, ``1f1b``, ``interleaved`` (2 chunks) or ``interleaved:V``."""
    name, _, chunks = str(text).strip().lower().partition(":")
    if name not in SCHEDULES or (chunks and name != "interleaved"):
        raise InputError(f"schedule must be gpipe, 1f1b, interleaved or interleaved:V, got {text!r}")
    if chunks and (not chunks.isdigit() or not 2 <= int(chunks) <= 64):
        raise InputError(f"interleaved:V needs V from 2 to 64 chunks, got {chunks!r}")
    return Schedule(name, int(chunks) if chunks else (2 if name == "interleaved" else 1))


@dataclass(frozen=True)
class Stage:
    """One stage: ``nodes`` its operators (node ids of the graph at the
    micro-batch), on ``devices`` devices from ``first``; ``time`` per
    micro-batch (FLOP at the device's peak, the sends included), ``sends``
    the elements one device sends forward per micro-batch (as many come
    back as gradients), ``sync`` the gradients' synchronisation per step,
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

    @property
    def peak_memory(self) -> float:
        return max(s.memory for s in self.stages)

    @property
    def peak_stage(self) -> Stage:
        return max(self.stages, key=lambda s: s.memory)


def stage_ranges(n_nodes: int, chain, counts) -> list[tuple[int, int]]:
    """The node ranges ``[lo, hi)`` of stages holding ``counts`` blocks of
    ``chain`` each: what precedes the blocks goes to the first stage, what
    follows to the last."""
    out, lo, k = [], 0, 0
    for i, c in enumerate(counts):
        k += c
        hi = n_nodes if i == len(counts) - 1 else chain.start + k * chain.size
        out.append((lo, hi))
        lo = hi
    return out


def _even(N: int, pp: int) -> list[int]:
    return [N // pp + (1 if i < N % pp else 0) for i in range(pp)]


def partitions(N: int, pp: int) -> list[tuple[int, ...]]:
    """Block counts per stage: even shares, the first and the last stage
    taking up to two fewer or one more."""
    out = {tuple(_even(N, pp))}
    if pp == 1:
        return [(N,)]
    base = N // pp
    for d0 in range(-2, 2):
        for d1 in range(-2, 2):
            first, last = base + d0, base + d1
            rest = N - first - last
            if first < 0 or last < 0 or rest < 0 or (pp > 2 and rest < pp - 2) or (pp == 2 and rest != 0):
                continue
            out.add((first,) + tuple(_even(rest, pp - 2)) + (last,) if pp > 2 else (first, last))
    return sorted(out)


def stage_cluster(cluster, q: int):
    """The cluster of one stage of ``q`` devices: whole nodes when it fills
    them, else one node."""
    G = cluster.gpus_per_node
    return replace(cluster, gpus_per_node=G if G is not None and q > G else None)


def _crossing(g, lo: int, hi: int) -> float:
    """Elements of the tensors the stage ``[lo, hi)`` sends to later stages."""
    seen, total = set(), 0
    for u, v, d in g.edges(data=True):
        if lo <= u < hi and v >= hi and (u, d["out"]) not in seen:
            seen.add((u, d["out"]))
            total += g.nodes[u]["op"].outputs[d["out"]].size
    return float(total)


def _between_nodes(cluster, q: int, i: int) -> bool:
    """Whether stage ``i`` and stage ``i + 1`` (``q`` devices each) meet on
    the network between nodes."""
    G = cluster.gpus_per_node
    if G is None:
        return False
    return (i * q) // G != ((i + 1) * q) // G or q >= G


def assemble(g, model, p: int, pp: int, m: int, micro: int, schedule: Schedule, ranges, results,
             bound: str = "") -> Pipeline:
    """The :class:`Pipeline` of stages over ``ranges`` whose plans cost
    ``results`` (a :class:`result.Result` per stage, with its ``sync``)."""
    q = p // pp
    cluster = model.cluster
    stages, times = [], []
    for i, ((lo, hi), r) in enumerate(zip(ranges, results)):
        sends = _crossing(g, lo, hi) / q if i < pp - 1 else 0.0
        word = cluster.inter_word if _between_nodes(cluster, q, i) else cluster.word
        p2p = 2.0 * schedule.v * sends * word  # activations forward, their gradients back
        busy = r.compute + r.communication - r.sync / m  # the synchronisation is the step's, not a micro-batch's
        t = max(busy, p2p) if cluster.realistic else busy + p2p
        f = schedule.in_flight(i, pp, m)
        memory = math.fsum(r.memory[:3]) + f * r.memory[3] + r.transient
        stages.append(Stage(i, tuple(range(lo, hi)), q, i * q, t, busy, sends, p2p, r.sync, memory, f, r))
        times.append(t)
    run = schedule.time(times, m)
    if cluster.realistic:  # the gradients overlap the last micro-batch's backward pass (their overlapped share)
        o = cluster.overlap
        sync = max((1.0 - o) * s.sync + max(o * s.sync - 2.0 * s.time / 3.0, 0.0) for s in stages)
    else:
        sync = max(s.sync for s in stages)
    return Pipeline(pp, m, micro, schedule, tuple(stages), run + sync, sync, schedule.bubble(times, m), bound)


def stage_result(sub, decisions, model, q: int):
    """The :class:`result.Result` of one stage's plan (the graph ``sub`` of
    its operators, their ``decisions``) for one micro-batch, with ``sync``
    its gradients' synchronisation per step (the result's communication
    holds what a micro-batch pays only)."""
    from cost_model import evaluate, make_result

    sc = evaluate(sub, decisions, model, q)
    sync = stage_sync(sub, decisions, model, q)
    r = make_result(sub, sc, model, q, "evaluate")
    return replace(r, sync=sync)


def stage_sync(sub, decisions, model, q: int) -> float:
    """The gradients' synchronisation of a stage's operators, per step."""
    from blocks import find_chains
    from cost_model import price_stage, with_options
    from graph import operators
    from options import OPTIONS, contexts

    ctx = contexts(sub, find_chains(sub))
    out, seen = [], {}  # identical operators with the same decision and context synchronise the same
    whole = replace(model, micro_batches=None)
    for v, (op, d) in enumerate(zip(operators(sub), decisions)):
        key = (op, d, ctx[v].key)
        if key not in seen:
            C, work, _ = with_options(op, [d.config], model, ctx[v], {n: d.option(n) for n in OPTIONS})
            seen[key] = float(price_stage(work, C, whole, op)[2][0])
        out.append(seen[key])
    return math.fsum(out)


def evaluate(g, model, p: int, pp: int, m: int, micro: int, schedule: Schedule, ranges, decisions,
             bound: str = "") -> Pipeline:
    """The pipeline of the given stage ``ranges`` and per-operator
    ``decisions`` (for the micro-batch graph ``g``), costed."""
    q = p // pp
    stage_model = replace(model, cluster=stage_cluster(model.cluster, q), micro_batches=m)
    results, done = [], {}  # stages alike with the same decisions cost the same
    for i, (lo, hi) in enumerate(ranges):
        ops = tuple((op.kind, op.space) for op in (g.nodes[v]["op"] for v in range(lo, hi)))
        key = (i == 0, i == pp - 1, ops, tuple(decisions[lo:hi]))
        if key not in done:
            done[key] = stage_result(_subgraph(g, lo, hi), decisions[lo:hi], stage_model, q)
        results.append(done[key])
    return assemble(g, stage_model, p, pp, m, micro, schedule, ranges, results, bound)


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


def micro_candidates(batch: int, p: int, pp: int) -> list[int]:
    """The micro-batch sizes (samples, over all the data-parallel groups of
    a stage) the search tries for ``pp`` stages: divisors of ``batch``
    leaving at least ``pp`` micro-batches, about each power of two from an
    eighth of a stage's devices to all of them (a stage's devices taking
    from 8 down to 1 sample each, the rest of the split along other
    dimensions), the largest divisor at or below each."""
    q = p // pp
    divisors = [d for d in range(1, batch // pp + 1) if batch % d == 0]
    if not divisors:
        return []
    out = set()
    t = max(1, q // 8)
    while t <= q:
        below = [d for d in divisors if d <= t]
        out.add(below[-1] if below else divisors[0])
        t *= 2
    return sorted(out)


class _Slower(Exception):
    """A candidate the search drops: one stage shows it slower than the best."""


def _kind(i: int, pp: int, count: int, lo: int, hi: int, chain) -> tuple:
    """Stages alike in what they hold: the first, a middle one of
    ``count`` blocks, the last (one stage: the whole graph); without
    repeated blocks, each stage its own."""
    if chain is None:
        return (lo, hi)
    return ("first" if i == 0 else "last" if i == pp - 1 else "middle", count, pp == 1)


def _cuts(g, chain, costed, pp: int) -> list:
    """The cuts the search tries: ``(counts, ranges)`` pairs, ``counts``
    the blocks of each stage (:func:`partitions`), else (no repeated
    blocks) one cut of the operator order balancing the operators' least
    costs (``counts`` then the operators per stage)."""
    n = g.number_of_nodes()
    if chain is not None:
        return [(counts, stage_ranges(n, chain, counts)) for counts in partitions(chain.count, pp) if min(counts) >= 1]
    ranges = balanced_ranges([float(c.min()) for c in costed.node_costs], pp)
    return [(tuple(hi - lo for lo, hi in ranges), ranges)]


def balanced_ranges(weights, pp: int) -> list[tuple[int, int]]:
    """``pp`` contiguous non-empty ranges of the items whose ``weights``
    (in order) sum as evenly as the cuts allow: each cut where the running
    sum first reaches its share of the total."""
    n = len(weights)
    if pp > n:
        raise InputError(f"{pp} stages need at least {pp} operators; the graph has {n}")
    total = math.fsum(weights)
    cuts, acc, k = [], 0.0, 1
    for v, w in enumerate(weights):
        acc += w
        while k < pp and acc >= total * k / pp and len(cuts) < pp - 1:
            cuts.append(v + 1)
            k += 1
    bounds = [0]
    for j in range(pp - 1):  # every stage non-empty, each cut after the one before and room for the rest
        c = cuts[j] if j < len(cuts) else n - (pp - 1 - j)
        bounds.append(min(max(c, bounds[-1] + 1), n - (pp - 1 - j)))
    bounds.append(n)
    return [(bounds[j], bounds[j + 1]) for j in range(pp)]


def search(build, model, p: int, batch: int, *, pp_values=None, micro_values=None, schedules=None,
           memory_limit=None, threads=None, progress=None) -> Pipeline:
    """The fastest pipeline found (see the module docstring).  ``build(b)``
    makes the graph at a micro-batch of ``b`` samples; ``model`` the cost
    model (its cluster's capacity bounds every stage)."""
    from blocks import find_chains
    from cost_model import build_costs, with_edges
    from dp_search import DoesNotFit, problem_of, search as plain_search, search_within, stage_costs

    capacity = model.cluster.capacity
    g1 = build(micro_values[0] if micro_values else 1)
    chains = find_chains(g1)
    chain = max(chains, key=lambda c: c.count * c.size) if chains else None
    N = chain.count if chain is not None else g1.number_of_nodes()
    most = N if chain is not None else min(N, DAG_STAGES)
    pps = pp_values or [d for d in range(1, min(most, p) + 1) if p % d == 0 and N / (d * -(-N // d)) >= BALANCE]
    ranked = []
    costs: dict = {}
    graphs: dict = {}
    pairs = [(pp, micro) for pp in sorted(pps, reverse=True) if p % pp == 0  # small stages first: quick to cost
             for micro in (micro_values or micro_candidates(batch, p, pp)) if batch // micro >= pp]
    bar = progress("ranking pipelines", "settings") if progress is not None else None
    best_of: dict = {}  # pp -> (micro, its best estimate)
    for n_done, (pp, micro) in enumerate(pairs):
        if bar is not None:
            bar(n_done, len(pairs))
        last = best_of.get(pp)
        if last is not None and last[0] != micro and last[1] is None:
            continue  # a larger micro-batch for this pp after one that ranked worse than the one before it
        q, m = p // pp, batch // micro
        if micro not in graphs:
            graphs[micro] = build(micro)
        g = graphs[micro]
        stage_model = replace(model, cluster=stage_cluster(model.cluster, q), micro_batches=m)
        costed = build_costs(g, q, stage_model, memory_limit=memory_limit, edges=False)
        if len(ranked) >= SEARCHED:  # a bound: every stage's operators at their cheapest, edges free
            floor = m * math.fsum(float(c.min()) for c in costed.node_costs) / pp
            if floor >= sorted(r[0] for r in ranked)[SEARCHED - 1]:
                continue
        costed = with_edges(costed)
        costs[(micro, pp)] = (g, costed, stage_model)
        table = stage_costs(costed, threads=threads, memory_limit=memory_limit) if chain is not None else None
        memo: dict = {}
        least: dict = {}  # in flight -> each operator's least memory (a lower bound of a stage's)

        def stage_cost(lo, hi, i, c):
            if table is not None:
                first, middle, last, whole = table
                return whole if pp == 1 else (first if i == 0 else last if i == pp - 1 else middle)[c - 1]
            key = _kind(i, pp, c, lo, hi, chain)
            if key not in memo:
                memo[key] = plain_search(costed.restrict(range(lo, hi)), threads=threads).cost
            return memo[key]

        def too_big(ranges, sched):
            if capacity is None:
                return False
            for i, (lo, hi) in enumerate(ranges):
                f = sched.in_flight(i, pp, m)
                if f not in least:
                    least[f] = problem_of(costed, f).least_by_operator()
                if math.fsum(least[f][lo:hi]) > capacity:
                    return True
            return False

        scheds = [Schedule("1f1b")] if schedules is None else list(schedules)
        if schedules is None and chain is not None and all(c % 2 == 0 for c in _even(N, pp)) and pp > 1:
            scheds = scheds + [Schedule("interleaved", 2)]
        for counts, ranges in _cuts(g, chain, costed, pp):
            times = [stage_cost(lo, hi, i, c) for i, ((lo, hi), c) in enumerate(zip(ranges, counts))]
            for sched in scheds:
                if sched.name == "interleaved" and any(c % sched.chunks for c in counts):
                    continue
                if too_big(ranges, sched):
                    continue
                ranked.append((sched.time(times, m), micro, pp, counts, sched))
        mine = min((r[0] for r in ranked if r[1] == micro and r[2] == pp), default=math.inf)
        if last is not None and mine > last[1]:  # worse than the smaller micro-batch: stop growing it
            best_of[pp] = (None, None)
        elif mine < math.inf:
            best_of[pp] = (micro, mine)
    if bar is not None:
        bar.close()
    if not ranked:
        if capacity is not None and pairs:
            raise MemoryError(f"no pipeline of up to {max(pps)} stages fits the {capacity / 1e9:.3g} GB of a device")
        raise InputError(f"no pipeline of the batch of {batch} on {p} devices: at least as many micro-batches as "
                         "stages are needed")
    ranked.sort(key=lambda x: (x[0], x[2], x[1]))
    best, tried, fitted = None, 0, 0
    for est, micro, pp, counts, sched in ranked:
        if best is not None and (fitted >= SEARCHED or est >= best.step):
            break
        if tried >= 4 * SEARCHED and best is not None:  # enough tried beyond what fits
            break
        tried += 1
        g, costed, stage_model = costs[(micro, pp)]
        m = batch // micro
        ranges = dict(_cuts(g, chain, costed, pp))[counts]
        bounds, plans = [], {}
        keys = [_kind(i, pp, c, lo, hi, chain) for i, ((lo, hi), c) in enumerate(zip(ranges, counts))]
        # each kind of stage once, the middle ones first (the most of them, likeliest to be the slowest); the
        # first of a kind keeps the most micro-batches, so its plan serves every stage of its kind
        order = sorted(range(pp), key=lambda i: (keys[i][0] != "middle" if chain is not None else False, i))
        try:
            for i in order:
                key = keys[i]
                if key in plans:
                    continue
                lo, hi = ranges[i]
                f = max(sched.in_flight(j, pp, m) for j in range(pp) if keys[j] == key)
                sub = costed.restrict(range(lo, hi))
                if capacity is None:
                    r = plain_search(sub, threads=threads)
                    plans[key], floor = r.strategy, r.cost
                else:
                    b = search_within(sub, capacity, threads=threads, in_flight=f)
                    plans[key], floor = b.result.strategy, b.lower_bound
                    bounds.append(b.gap if b.status == "bound" else 0.0)
                if best is not None and m * floor >= ABANDON * best.step:
                    raise _Slower  # this stage alone makes it slower than the best
        except (DoesNotFit, _Slower):
            continue
        decisions = [d for key in keys for d in plans[key]]
        pipe = evaluate(g, model, p, pp, m, micro, sched, ranges, decisions)
        if capacity is not None and pipe.peak_memory > capacity * (1 + 1e-12):
            continue
        fitted += 1
        worst = max(bounds, default=0.0)
        pipe = replace(pipe, bound="exact for its stages" if worst == 0.0 else
                       f"within {100 * worst:.2f}% of the best for its stages (Lagrangian bound)")
        if best is None or pipe.step < best.step:
            best = pipe
    if best is None:
        raise MemoryError(f"no pipeline of up to {max(pps)} stages fits the {capacity / 1e9:.3g} GB of a device")
    return best


def as_result(g, pipe: Pipeline, model, p: int, batch: int, mode: str, **fields):
    """The :class:`result.Result` of a pipelined plan: every stage's layers
    (their costs for one micro-batch, on their stage's devices), the
    edges inside stages, and the pipeline."""
    from cost_model import model_flops, recomputed_flops
    from result import Result

    layers, edges, words = [], [], 0.0
    for s in pipe.stages:
        lo = s.nodes[0]
        r = s.result
        layers += [replace(layer, id=layer.id + lo, name=g.nodes[layer.id + lo]["op"].name) for layer in r.layers]
        edges += [(u + lo, v + lo, c) for u, v, c in r.edges]
        words += r.words * pipe.m + 2.0 * pipe.schedule.v * s.sends * pipe.m
    first = pipe.stages[0].result
    params = tuple((k, batch if k == "batch" else v) for k, v in first.params)
    if model.realistic:  # the model's FLOP for the whole batch
        fields.setdefault("model_flops", model_flops(g, model) * pipe.m)
        decisions = [layer.decision for layer in layers]
        fields.setdefault("recomputed_flops", recomputed_flops(g, decisions, model) * pipe.m)
    return Result(mode, g.graph["name"], params, p, model, tuple(layers), tuple(edges),
                  parameters=first.parameters if len(pipe.stages) == 1 else _parameters(g),
                  model_source=first.model_source, defaults=first.defaults, words=words,
                  transient=pipe.peak_stage.result.transient, pipeline=pipe, **fields)


def _parameters(g) -> int:
    from graph import parameter_count

    return parameter_count(g)
