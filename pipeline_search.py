"""The pipeline search (``--pp auto``, ``--microbatches auto``): the
stages, micro-batches and schedule of the fastest pipeline found, each
stage's plan searched (:mod:`pipeline` costs a pipeline).

**Search** (:func:`search`): over ``pp`` (the divisors of ``p`` up to the
number of blocks whose blocks share out evenly enough, ``N / (pp
ceil(N / pp)) >= 0.85``), the micro-batch size (for each ``pp``, about each
power of two from an eighth of a stage's devices to all of them, dividing
the batch, with at least ``pp`` micro-batches, tried from the smallest up
while the ranking improves), the schedule (1F1B, and interleaved with 2
chunks when every stage holds an even number of blocks; an interleaved
``--schedule`` asked for takes stages whose blocks split unevenly into its
chunks too; GPipe runs as fast
as 1F1B with more memory, so only when asked), and the cuts (blocks shared
evenly, the first and the last stage taking up to two fewer or one more,
and the shares whose slowest stage is least, :func:`balanced_counts`, by
the operators' least costs before anything is costed, and by the
stages' optima below after: Alpa's stage DP restricted to partitions of
identical blocks).  Every
setting is ranked by its stages' unconstrained optima: for a stacked model
each stage length's optimum comes from one short chain (three blocks'
matrices, :func:`search.chain.stage_costs`); settings with a stage that
cannot fit (each operator at its least memory) are dropped, and so are
those whose operators at their cheapest already cost more than the
ranking's best few.  The best few (``SEARCHED``) are then searched within
the memory: each kind of stage (the first, the middle ones of a length,
the last) once, by the exact search with its Lagrangian bound, for the
most micro-batches in flight among the stages of that kind (its plan
serves them all; under the interleaved schedule, each chunk's operators
with their chunk's own count).  So each stage's plan is exact (or within its stated
bound) for its cut, micro-batch and schedule; the choice of ``pp``,
micro-batch, schedule and cuts is over the candidates above, bounded, not
exhaustive.  A graph without repeated blocks is cut twice per ``pp`` (up
to 8 stages): where the running sum of its operators' least costs
reaches each stage's share, and where its slowest stage with its sends
is the fastest (:func:`pipeline_layout.bottleneck_ranges`), every stage
searched on its own; so is one whose longest run of them holds less
than half its operators (:func:`covers`), those cuts ranked beside the
ones between the run's blocks.  Every setting is ranked with what its
stages send on, as :func:`pipeline.evaluate` prices it.  Zero-bubble schedules
(ZB-H1) are not modelled.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import NamedTuple

from errors import InputError, plain
from pipeline import (Pipeline, Schedule, balanced_ranges, block_layers, chunk_share, chunking_error, cut_as_framework,
                      evaluate, node_in_flight, partitions, stage_cost_model, stage_ranges, stage_sends,
                      unblocked_error, with_sends)
from pipeline_layout import _even, bottleneck_ranges, crossings, sent_on

__all__ = ["search", "micro_candidates", "balanced_counts", "covers", "PipelineDoesNotFit", "SEARCHED"]

SEARCHED = 4  # pipeline settings searched within the memory, the best ranked first
ABANDON = 1.02  # a candidate whose stage's bound times m passes the best step by this much is dropped
DAG_STAGES = 8  # the most stages the search tries on a graph without repeated blocks
BALANCE = 0.85  # the least share of its busiest stage's time the blocks keep busy (N / (pp ceil(N / pp)))
MAIN_CHAIN = 0.5  # the least share of the operators a repeated chain's blocks hold for the stages to cut between them


def micro_candidates(batch: int, p: int, pp: int, larger: bool = False) -> list[int]:
    """The micro-batch sizes (samples, over all the data-parallel groups of
    a stage) the search tries for ``pp`` stages: divisors of ``batch``
    leaving at least ``pp`` micro-batches, about each power of two from an
    eighth of a stage's devices to all of them (a stage's devices taking
    from 8 down to 1 sample each, the rest of the split along other
    dimensions), the largest divisor at or below each; with ``larger``,
    those above a stage's devices instead, about each power of two up to
    half the batch (fewer, larger micro-batches, which one stage may run
    faster where the whole batch is held back by the memory)."""
    q = p // pp
    from config_space import divisors_upto

    divisors = list(divisors_upto(batch, batch // pp))  # from its prime factors: a batch of 10^9 is not walked
    if not divisors:
        return []
    out = set()
    t = 2 * q if larger else max(1, q // 8)
    while t <= (batch // 2 if larger else q):
        below = [d for d in divisors if d <= t]
        out.add(below[-1] if below else divisors[0])
        t *= 2
    return sorted(x for x in out if x > q) if larger else sorted(out)


def covers(chain, n: int) -> bool:
    """Whether the stages of a graph of ``n`` operators cut only between
    the blocks of its longest repeated ``chain``: where its blocks hold at
    least :data:`MAIN_CHAIN` of the operators (a stacked model's layers).
    Where they do not (the built-in transformer, whose decoder layers read
    the encoder's output and are no such chain; Inception's and
    ShuffleNet's short runs), a cut of the operator order where the work
    balances is tried beside the cuts between the blocks, which would
    otherwise leave all else whole in the first and the last stage, and
    the ranking chooses."""
    return chain.count * chain.size >= MAIN_CHAIN * n


class Cut(NamedTuple):
    """A cut of the operator order into stages: ``counts`` (the blocks of
    each stage, or with ``blocks`` false its operators), ``ranges`` (each
    stage's ``[lo, hi)``)."""

    counts: tuple
    ranges: tuple
    blocks: bool


def balanced_counts(table, N: int, pp: int, least: int = 1, step: int = 1) -> tuple[int, ...] | None:
    """The blocks per stage (``N`` blocks over ``pp`` stages, each at
    least ``least``, each a multiple of ``step``) whose slowest stage is
    the fastest, by ``table`` (the stages' costs by their blocks:
    ``(first, middle, last, ...)``, entry ``c - 1`` for ``c`` blocks, as
    :func:`dp_search.stage_costs` gives them): the first and the last
    stage take as many blocks as what precedes and follows the chain
    leaves them room for (a ResNet's early layers, a language model's
    head), the middle ones share the rest evenly.  :func:`partitions`
    tries only shares near the even ones; where the ends weigh more than a
    block or two, this is the cut that balances (``None``: none can)."""
    import numpy as np

    if pp < 2 or N < pp * least:
        return None
    first, middle, last = (np.asarray(t, dtype=float) for t in table[:3])
    ends = np.arange(1, N + 1)
    fine = (ends >= least) & (ends % step == 0)
    rest = N - ends[:, None] - ends[None, :]  # the first's blocks down, the last's across
    ok = fine[:, None] & fine[None, :]
    if pp == 2:
        slowest = np.where(ok & (rest == 0), np.maximum(first[:, None], last[None, :]), np.inf)
    else:
        k = pp - 2
        ok &= (rest >= k * least) & (rest % step == 0)
        most = np.where(ok, step * -(-(rest // step) // k), 1)  # the middle stages' largest share of the rest
        slowest = np.where(ok, np.maximum(np.maximum(first[:, None], last[None, :]), middle[most - 1]), np.inf)
    i, j = np.unravel_index(int(np.argmin(slowest)), slowest.shape)  # the first least: fewest blocks first
    if not np.isfinite(slowest[i, j]):
        return None
    a, b = int(i) + 1, int(j) + 1
    return (a,) + tuple(step * x for x in _even((N - a - b) // step, pp - 2)) + (b,) if pp > 2 else (a, b)


def _least_table(least, chain) -> tuple:
    """A stage table (as :func:`balanced_counts` reads it) from the
    operators' least costs alone (``least``), edges free: before the
    stages' optima are worked out, what shares the ends' work with the
    blocks."""
    import numpy as np

    block = math.fsum(least[chain.start:chain.stop]) / chain.count
    c = block * np.arange(1, chain.count + 1)
    return math.fsum(least[:chain.start]) + c, c, math.fsum(least[chain.stop:]) + c


class _Slower(Exception):
    """A candidate the search drops: one stage shows it slower than the best."""


def _kind(i: int, pp: int, count: int, lo: int, hi: int, chain) -> tuple:
    """Stages alike in what they hold: the first, a middle one of
    ``count`` blocks, the last (one stage: the whole graph); without
    repeated blocks, each stage its own."""
    if chain is None:
        return (lo, hi)
    return ("first" if i == 0 else "last" if i == pp - 1 else "middle", count, pp == 1)


def _cuts(g, chain, costed, pp: int, dag: bool, shapes=((1, 1),), sends=None) -> list:
    """The cuts the search tries (:class:`Cut`): with ``chain``, between
    its blocks (:func:`partitions`, and for each ``(least, step)`` of
    ``shapes`` the shares :func:`balanced_counts` finds by the operators'
    least costs), where it has at least ``pp`` blocks; with ``dag``, the cut
    of the operator order balancing the operators' least costs and the one
    whose slowest stage is the fastest by them and its sends (``sends``:
    ``(the elements crossing each cut place, the prices per element,
    realistic)``, :func:`pipeline_layout.bottleneck_ranges`; ``counts``
    then the operators per stage)."""
    n = g.number_of_nodes()
    out: list = []
    weights = [float(c.min()) for c in costed.node_costs]
    if chain is not None and chain.count >= pp:
        shares = [c for c in partitions(chain.count, pp) if min(c) >= 1]
        if pp > 1:
            table = _least_table(weights, chain)
            shares += [c for c in (balanced_counts(table, chain.count, pp, *x) for x in shapes) if c is not None]
        for counts in dict.fromkeys(shares):
            out.append(Cut(counts, tuple(stage_ranges(n, chain, counts)), True))
    if dag and pp <= n:
        even = balanced_ranges(weights, pp)
        fastest = [tuple(bottleneck_ranges(weights, *sends))] if pp > 1 and sends else []
        for ranges in dict.fromkeys([tuple(even)] + fastest):
            if all(cut.ranges != ranges for cut in out):
                out.append(Cut(tuple(hi - lo for lo, hi in ranges), ranges, False))
    return out


def search(build, model, p: int, batch: int, *, pp_values=None, micro_values=None, schedules=None,
           memory_limit=None, threads=None, progress=None, incumbent: float | None = None,
           beside_plain: bool = False, least_stages: int = 1, rivals: tuple = (),
           estimates: list | None = None) -> Pipeline | None:
    """The fastest pipeline found (see the module docstring); with
    ``incumbent`` (the step of a plan found otherwise), only one faster,
    else ``None``; with ``beside_plain`` (the plan without stages searched
    apart), without one stage of one micro-batch, which is that plan; with
    ``least_stages`` 2, without a single stage at all (gradient
    accumulation, searched apart: see :func:`planner.staged.pipelined`);
    ``rivals``: the ranking figures of settings ranked in another search,
    which drop candidates here as if ranked beside them (not searched
    here); ``estimates``, a list this search adds its own ranking figures
    to.  ``build(b)``
    makes the graph at a micro-batch of ``b`` samples; ``model`` the cost
    model (its cluster's capacity bounds every stage).  Its stages cost what
    their operators' own costs sum to, the currency of the bounds that rank
    and drop candidates (its blocks' collectives not pooled:
    :func:`as_plan` costs the answer as a plan)."""
    from blocks import find_chains
    from cost_model import build_costs, with_edges
    from dp_search import pieces_bound, search as plain_search, stage_costs

    capacity = model.cluster.capacity
    g1 = build(micro_values[0] if micro_values else 1)
    chains = find_chains(g1)
    chain = max(chains, key=lambda c: c.count * c.size) if chains else None
    n = g1.number_of_nodes()
    dag = chain is None or not covers(chain, n)  # the operator order cut where the work balances, too
    if chain is None and any(sched.v > 1 for sched in schedules or ()):
        raise InputError(unblocked_error(g1.graph["name"]))
    N = chain.count if chain is not None else n
    layers = block_layers(g1, chain) if chain is not None else 1  # of a block, as the framework's split counts them
    if not dag and pp_values and max(pp_values) > N:  # a stage holds whole blocks
        raise InputError(f"--pp {max(pp_values)} is more stages than the {N} blocks of {g1.graph['name']}")
    if dag and pp_values and max(pp_values) > n:  # and at least one operator
        raise InputError(f"{max(pp_values)} stages need at least {max(pp_values)} operators; the graph has {n}")
    pps = pp_values or [d for d in range(1, p + 1) if p % d == 0 and (
        chain is not None and d <= N and N / (d * -(-N // d)) >= BALANCE or dag and d <= min(n, DAG_STAGES))]
    pps = [d for d in pps if d >= least_stages]
    ranked = []
    costs: dict = {}
    graphs: dict = {}
    chains_of: dict = {}  # micro-batch -> its graph's chains, found once
    known_of: dict = {}  # and what costing its operators works out of it alone, whatever the stage's devices
    sends_of: dict = {}  # and what each range of its operators sends on (pipeline_layout.sent_on)
    crossing_of: dict = {}  # and what each place a cut could take would cut (pipeline_layout.crossings)
    pairs = [(pp, micro) for pp in sorted(pps, reverse=True) if p % pp == 0  # small stages first: quick to cost
             for micro in (micro_values or micro_candidates(batch, p, pp))
             if (batch // micro >= pp or micro_values) and not (beside_plain and pp == 1 and micro == batch)]
    smallest = [math.inf]  # the least memory a device of any pipeline tried needs (its stages' bound)
    chunked, unchunked = 0, None  # settings whose stages can run the schedule; why the first other cannot
    bar = progress("ranking pipelines", "settings") if progress is not None else None
    best_of: dict = {}  # pp -> (micro, its best estimate)

    def loses(bound: float) -> bool:
        """Whether a setting whose step is at least ``bound`` can be
        neither faster than the incumbent nor among the settings searched."""
        if incumbent is not None and bound >= incumbent:
            return True
        figures = sorted([r[0] for r in ranked] + list(rivals))
        return len(figures) >= SEARCHED and bound >= figures[SEARCHED - 1]

    for n_done, (pp, micro) in enumerate(pairs):
        if bar is not None:
            bar(n_done + 1, len(pairs))
        last = best_of.get(pp)
        if last is not None and last[0] != micro and last[1] is None:
            continue  # a larger micro-batch for this pp after one that ranked worse than the one before it
        q, m = p // pp, batch // micro
        if micro not in graphs:
            graphs[micro] = build(micro)
            chains_of[micro] = find_chains(graphs[micro])
            known_of[micro] = {}
        g = graphs[micro]
        stage_model = stage_cost_model(model, q, pp, m)
        costed = build_costs(g, q, stage_model, memory_limit=memory_limit, edges=False, chains=chains_of[micro],
                             known=known_of[micro])
        # a bound: every stage's operators at their cheapest (with their options' cheapest), edges free
        if loses(m * costed.least_cost / pp):
            continue
        least: dict = {}  # in flight -> each operator's least memory (a lower bound of a stage's)
        arrays = memory_arrays(costed) if capacity is not None else None  # the operators' arrays, each once

        def too_big(cut, sched):
            if capacity is None:
                return False
            need = 0.0
            for i, (lo, hi) in enumerate(cut.ranges):
                f = node_in_flight(sched, i, pp, m, chain if cut.blocks else None, lo, hi)
                fs = f if isinstance(f, tuple) else (f,)  # each chunk's operators with its own count
                for x in sorted(set(fs)):
                    if x not in least:
                        least[x] = least_memory(costed, x, arrays).tolist()
                if isinstance(f, tuple):
                    need = max(need, math.fsum(least[x][u] for u, x in zip(range(lo, hi), fs)))
                else:
                    need = max(need, math.fsum(least[f][lo:hi]))
            smallest[0] = min(smallest[0], need)
            return need > capacity

        scheds = [Schedule("1f1b")] if schedules is None else list(schedules)
        # interleaved where every stage's blocks divide into its chunks: stages of unequal chunks, asked for, run
        # too, but searched beside the others they crowd out better settings the bounded search then never tries
        # (and micro-batches in groups of the stages, as Megatron-LM runs them)
        if schedules is None and chain is not None and 1 < pp <= N and all(c % 2 == 0 for c in _even(N, pp)) \
                and m % pp == 0 and (model.framework is None or not model.framework.refuses_schedule("interleaved")):
            scheds = scheds + [Schedule("interleaved", 2)]
        # the shapes of the blocks' shares each schedule can run: at least its chunks in each stage, and searched
        # unasked, a multiple of them
        shapes = tuple(dict.fromkeys((x.v, x.v if schedules is None else 1) for x in scheds))

        def runnable(cuts):
            """The settings of ``cuts`` whose stages can run a schedule, and why the first other cannot."""
            out, why_not = [], None
            for cut in cuts:
                for sched in scheds:
                    if sched.v > 1 and m < pp:  # fewer micro-batches than stages, given: 1F1B and GPipe run them
                        why_not = why_not or (f"the interleaved schedule needs at least as many micro-batches as "
                                              f"the {pp} stages, not {m}")
                        continue
                    if not cut.blocks and sched.v > 1:  # the interleaved schedule's chunks are blocks
                        if N < pp:
                            why_not = why_not or (f"the interleaved schedule splits stages into chunks of blocks; "
                                                  f"{g.graph['name']} has {N}, fewer than the {pp} stages")
                        continue
                    if schedules is None and any(c % sched.chunks for c in cut.counts):
                        continue  # searched unasked: chunks of equal blocks only (see above)
                    ends = cut_as_framework(cut.counts, sched.v, model.framework, layers) if cut.blocks else False
                    why = chunking_error(cut.counts, sched, ends)
                    if why:
                        why_not = why_not or why
                    else:
                        out.append((cut, sched))
            return out, why_not

        # the settings whose stages can fit, before anything else is costed (edges, the stages' optima)
        flows = None
        if dag and pp > 1:  # what crosses each place a cut could take, and what an element sent on costs
            if micro not in crossing_of:
                crossing_of[micro] = crossings(g)
            one = Schedule("1f1b")
            flows = (crossing_of[micro], [stage_sends(stage_model.cluster, model.cluster, q, pp, i, one, 1.0, 0.0)[1]
                                          for i in range(pp)], stage_model.cluster.realistic)
        cuts = _cuts(g, chain, costed, pp, dag, shapes, flows)
        run, why = runnable(cuts)
        unchunked = unchunked or why
        chunked += len(run)
        fitting = [(cut, sched) for cut, sched in run if not too_big(cut, sched)]
        if not fitting:
            continue
        costed = with_edges(costed)
        # one stage is the whole plan, whose figure below costs what its search does: first its pieces' bound
        # (with room for rounding), where a bound can drop it
        if pp == 1 and chain is not None and (incumbent is not None or len(ranked) + len(rivals) >= SEARCHED) and loses(
                m * pieces_bound(costed, threads=threads, memory_limit=memory_limit) / (1 + 1e-9)):
            continue
        costs[(micro, pp)] = (g, costed, stage_model)
        blocky = any(cut.blocks for cut in cuts)
        table = stage_costs(costed, threads=threads, memory_limit=memory_limit) if blocky else None
        if table is not None and pp > 1:  # the ends' work balanced as the stages' optima tell
            known = {cut.counts for cut in cuts if cut.blocks}
            for counts in dict.fromkeys(balanced_counts(table, N, pp, *x) for x in shapes):
                if counts is not None and counts not in known:
                    cut = Cut(counts, tuple(stage_ranges(g.number_of_nodes(), chain, counts)), True)
                    fitting += [x for x in runnable([cut])[0] if not too_big(*x)]
        memo: dict = {}

        def stage_cost(cut, i):
            (lo, hi), c = cut.ranges[i], cut.counts[i]
            if table is not None and cut.blocks:
                first, middle, last, whole = table
                return whole if pp == 1 else (first if i == 0 else last if i == pp - 1 else middle)[c - 1]
            key = _kind(i, pp, c, lo, hi, None)
            if key not in memo:
                memo[key] = plain_search(costed.restrict(range(lo, hi)), threads=threads).cost
            return memo[key]

        if micro not in sends_of:
            sends_of[micro] = sent_on(g)
        sends = sends_of[micro]
        realistic = stage_model.cluster.realistic

        def stage_time(cut, sched, i, cost):
            """Stage ``i``'s figure per micro-batch: its ``cost`` and what it sends on, as
            :func:`pipeline.evaluate` prices them (:func:`pipeline.with_sends`)."""
            own = sends(*cut.ranges[i]) if i < pp - 1 else 0.0
            first = sends(*cut.ranges[0]) if i == pp - 1 and sched.v > 1 else 0.0
            return with_sends(cost, stage_sends(stage_model.cluster, model.cluster, q, pp, i, sched, own, first)[1],
                              realistic)

        floors = None  # the operators' least costs, summed over a range: a lower bound of its stage's optimum

        def floor(cut, sched) -> float | None:
            """A lower bound of a cut of the operator order's figure, its operators' least costs with its sends,
            before its stages' optima are searched (``None`` for the cuts between blocks, which read theirs off
            the table)."""
            nonlocal floors
            if cut.blocks:
                return None
            if floors is None:
                floors = list(itertools.accumulate(costed.least_costs(), initial=0.0))
            times = [stage_time(cut, sched, i, floors[hi] - floors[lo]) for i, (lo, hi) in enumerate(cut.ranges)]
            return sched.time(times, m, None) / (1 + 1e-9)

        dropped = math.inf  # the least bound of the cuts dropped on it
        for cut, sched in fitting:
            bound = floor(cut, sched)
            if bound is not None and loses(bound):
                dropped = min(dropped, bound)
                continue
            times = [stage_time(cut, sched, i, stage_cost(cut, i)) for i in range(pp)]
            ends = cut_as_framework(cut.counts, sched.v, model.framework, layers) if cut.blocks else False
            ranked.append((sched.time(times, m, chunk_share(cut.counts, sched.v, ends)), micro, pp, cut, sched))
        mine = min((r[0] for r in ranked if r[1] == micro and r[2] == pp), default=math.inf)
        if last is not None and min(mine, dropped) > last[1]:  # worse than the smaller micro-batch: stop growing it
            best_of[pp] = (None, None)
        elif mine < math.inf:
            best_of[pp] = (micro, mine)
    if bar is not None:
        bar.close()
    if not ranked:
        if incumbent is not None or (beside_plain and not pairs):  # nothing to try beside the plan without stages
            return None
        if unchunked and not chunked:  # no cut of the blocks runs the schedule asked for
            raise InputError(f"no pipeline of up to {max(pps)} stages: {unchunked}")
        if capacity is not None and pairs:
            raise PipelineDoesNotFit(max(pps), capacity, smallest[0])
        raise InputError(f"no pipeline of the batch of {batch} on {p} devices: at least as many micro-batches as "
                         "stages are needed")
    ranked.sort(key=lambda x: (x[0], x[2], x[1]))
    if estimates is not None:
        estimates.extend(r[0] for r in ranked)
    bar = progress("searching the best pipelines", "settings") if progress is not None else None
    try:
        return _search_ranked(ranked, costs, chain, model, p, batch, capacity, incumbent, threads, pps, smallest,
                              bar)
    finally:
        if bar is not None:
            bar.close()


def memory_arrays(costed):
    """The operators' memory arrays, each once: ``(index, arrays)``,
    operator ``v``'s being ``arrays[index[v]]`` (its parts and its
    searched options' tables; operators alike share them)."""
    import numpy as np

    index, arrays, seen = np.empty(costed.n, dtype=np.intp), [], {}
    for v, parts in enumerate(costed.parts):
        tables = costed.tables[v] if costed.tables else ()
        key = (id(parts), tuple(id(t) for t in tables))
        if key not in seen:
            seen[key] = len(arrays)
            arrays.append((parts, tables))
        index[v] = seen[key]
    return index, arrays


def least_memory(costed, in_flight: float, arrays=None):
    """Each operator's least memory (bytes; an array over the operators)
    over its configurations and the values of its searched options, with
    the activations of ``in_flight`` micro-batches: a stage's least is
    their sum (operators alike share their arrays, each reduced once;
    ``arrays``: :func:`memory_arrays` of ``costed``, when worked out)."""
    import numpy as np

    index, arrays = memory_arrays(costed) if arrays is None else arrays
    least = np.empty(len(arrays))
    for i, (parts, tables) in enumerate(arrays):
        m = parts[0] + parts[1] + parts[2] + in_flight * parts[3]
        for t in tables:  # each option's least, per configuration
            m = m + (t.kept if in_flight == 1 else t.kept_with(in_flight)).min(axis=1)
        least[i] = np.min(m)
    return least[index]


def _search_ranked(ranked, costs, chain, model, p, batch, capacity, incumbent, threads, pps, smallest, bar):
    """The best of the ``ranked`` pipeline settings (best first), each
    stage searched within the memory (see :func:`search`)."""
    from dp_search import DoesNotFit

    best, tried, fitted = None, 0, 0
    to_beat = math.inf if incumbent is None else incumbent
    failed = [math.inf]  # the least a stage searched within the memory needed, where none fitted
    found: dict = {}  # (micro, pp, kind of stage, in flight) -> (plan, bound, gap), or the DoesNotFit it raised
    for est, micro, pp, cut, sched in ranked:
        if best is not None and (fitted >= SEARCHED or est >= best.step):
            break
        if est >= to_beat:
            break
        if tried >= 4 * SEARCHED and best is not None:  # enough tried beyond what fits
            break
        tried += 1
        if bar is not None:
            bar(tried, len(ranked))
        g, costed, stage_model = costs[(micro, pp)]
        m = batch // micro
        ranges, blocks = cut.ranges, chain if cut.blocks else None  # the chain its stages cut between, if any
        bounds, plans = [], {}
        keys = [_kind(i, pp, c, lo, hi, blocks) for i, ((lo, hi), c) in enumerate(zip(ranges, cut.counts))]
        # each kind of stage once, the middle ones first (the most of them, likeliest to be the slowest); the
        # first of a kind keeps the most micro-batches, so its plan serves every stage of its kind
        order = sorted(range(pp), key=lambda i: (keys[i][0] != "middle" if blocks is not None else False, i))
        try:
            for i in order:
                key = keys[i]
                if key in plans:
                    continue
                lo, hi = ranges[i]
                fs = [node_in_flight(sched, j, pp, m, blocks, *ranges[j]) for j in range(pp) if keys[j] == key]
                f = tuple(map(max, zip(*fs))) if isinstance(fs[0], tuple) else max(fs)
                at = (micro, pp, key, f)  # the same stage in another cut or schedule: searched once
                if at not in found:
                    found[at] = _stage(costed.restrict(range(lo, hi)), capacity, threads, f)
                if isinstance(found[at], DoesNotFit):
                    raise found[at]
                plans[key], floor, gap = found[at]
                if capacity is not None:
                    bounds.append(gap)
                # this stage alone makes it slower than the best; not one stage (gradient accumulation), searched
                # whole by now, whose bound charges every micro-batch the synchronisation its step hides
                if pp > 1 and m * floor >= ABANDON * min(best.step if best is not None else math.inf, to_beat):
                    raise _Slower
        except DoesNotFit as e:
            failed[0] = min(failed[0], e.least)
            continue
        except _Slower:
            continue
        decisions = [d for key in keys for d in plans[key]]
        pipe = evaluate(g, replace(model, pooled=False), p, pp, m, micro, sched, ranges, decisions)  # as bounded
        if capacity is not None and pipe.peak_memory > capacity * (1 + 1e-12):
            continue
        fitted += 1
        worst = max(bounds, default=0.0)
        pipe = replace(pipe, bound="exact for its stages" if worst == 0.0 else
                       f"within {100 * worst:.2f}% of the best for its stages (Lagrangian bound)")
        if best is None or pipe.step < best.step:
            best = pipe
    if best is None:
        if incumbent is not None:
            return None
        raise PipelineDoesNotFit(max(pps), capacity, failed[0] if math.isfinite(failed[0]) else smallest[0])
    return best


def as_plan(g, model, p: int, pipe: Pipeline) -> Pipeline:
    """``pipe`` (as :func:`search` compares pipelines: its blocks'
    collectives not pooled) costed again as a plan under ``model``."""
    ranges = [(s.nodes[0], s.nodes[-1] + 1) for s in pipe.stages]
    decisions = [layer.decision for s in pipe.stages for layer in s.result.layers]
    return evaluate(g, model, p, pipe.pp, pipe.m, pipe.micro, pipe.schedule, ranges, decisions, pipe.bound)


def _stage(sub, capacity, threads, in_flight):
    """A stage's plan, a lower bound of its cost and the bound's gap (0:
    exact), searched within ``capacity`` with ``in_flight`` micro-batches'
    activations kept; the :class:`dp_search.DoesNotFit` it raises when
    nothing fits.  Within a capacity, unpruned: the search prunes afresh
    at each multiplier, and that took longer than the eliminations it
    shortened (two thirds of the stages' time on Megatron-LM's 145.6B row,
    a third on Llama 3 405B's)."""
    from dp_search import DoesNotFit, search as plain_search, search_within

    if capacity is None:
        r = plain_search(sub, threads=threads)
        return r.strategy, r.cost, 0.0
    try:
        b = search_within(sub, capacity, threads=threads, in_flight=in_flight, prune=False)
    except DoesNotFit as e:
        return e
    return b.result.strategy, b.lower_bound, b.gap if b.status == "bound" else 0.0


class PipelineDoesNotFit(MemoryError):
    """No pipeline tried fits the device memory: ``least`` the least any
    needed (each stage's operators at their least memory, a bound)."""

    def __init__(self, stages: int, capacity: float | None, least: float):
        need = f": the smallest needs at least {plain(least / 1e9, 4)} GB" if math.isfinite(least) else ""
        where = f"the {plain(capacity / 1e9, 4)} GB of a device" if capacity is not None else "the memory"
        super().__init__(f"no pipeline of up to {stages} stages fits {where}{need}")
        self.least, self.capacity = least, capacity
