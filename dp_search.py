"""Exact minimum-cost strategy search: the PaSE dynamic program.

Implements section IV of "PaSE: Parallelization Strategies for Efficient DNN
Training" (Elango, IPDPS 2021).  A strategy picks one configuration per
operator; its cost is the sum of every operator's cost vector and every edge's
cost matrix at the chosen configurations.  The search treats the graph as
undirected and returns a strategy of minimum cost.  This module is the entry
point; the algorithms are the ``search`` package's, one module each:

* :mod:`search.order`: the elimination orders, GENERATESEQ (``--algo 0``)
  and breadth-first (``--algo 1``);
* :mod:`search.elimination`: the dynamic program itself (bucket elimination
  over an order, with dominance pruning, :mod:`search.prune`, and the (min, +)
  contractions of :mod:`search.contract`);
* :mod:`search.lagrange`: the cheapest strategy within the device memory.

:func:`search` and :func:`search_within` run them on a
:class:`cost_model.CostedGraph`.  Every array the search allocates is
estimated first and checked against a memory limit.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from errors import SettingError
from search.elimination import (
    Elimination,
    SearchResult,
    SearchTooLarge,
    check_fits,
    cores,
    default_memory_limit,
    elimination,
    solve,
    worth_pruning,
)
from search.chain import Run, series, solve_chained
from search.lagrange import Bounded, DoesNotFit, NotBetter, crossing, none_below, relax, within_memory
from search.options import Choice, Group, Problem
from search.order import breadth_first, generate_seq

__all__ = [
    "ALGOS",
    "SearchTooLarge",
    "Elimination",
    "SearchResult",
    "generate_seq",
    "breadth_first",
    "elimination",
    "solve",
    "search",
    "search_within",
    "worth_pruning",
    "check_fits",
    "cores",
    "default_memory_limit",
    "within_memory",
    "Bounded",
    "DoesNotFit",
    "NotBetter",
]

ALGOS = {0: "GENERATESEQ", 1: "breadth-first"}
CHAIN_WORK = 10**8  # searches evaluating this many table entries search their repeated blocks once
CHAIN_BLOCKS = 8  # a run of fewer blocks is searched as plain operators: its boundary matrix costs more than it saves


def problem_of(costed, in_flight=1) -> Problem:
    """The arrays-only :class:`search.options.Problem` of a
    :class:`cost_model.CostedGraph`: its cost and kept memory vectors, the
    options each operator chooses alone combined into one table per
    operator, and a :class:`search.options.Group` per block for the options
    a block chooses together.  ``in_flight``: the micro-batches of
    activations kept (a pipeline stage's), one number or one per operator
    (the interleaved schedule's chunks each keep their own)."""
    from options import OPTIONS

    own = [None] * costed.n
    members: dict = {}
    made: dict = {}  # operators with the same tables (identical layers) share the arrays made of them

    def arrays(t, f):
        if (id(t), f) not in made:
            kept = t.kept if f == 1 else t.kept_with(f)
            made[(id(t), f)] = (t, np.ascontiguousarray(t.cost), np.ascontiguousarray(kept))
        return made[(id(t), f)][1:]

    for v, tables in enumerate(costed.tables or [()] * costed.n):
        f = in_flight[v] if isinstance(in_flight, tuple) else in_flight
        alone = [t for t in tables if OPTIONS[t.name].scope == "operator"]
        if alone:
            key = (tuple(id(t) for t in alone), f)
            if key not in made:
                c, m = arrays(alone[0], f)
                for t in alone[1:]:  # every combination of values, the first option's slowest
                    tc, tm = arrays(t, f)
                    c = (c[:, :, None] + tc[:, None, :]).reshape(len(c), -1)
                    m = (m[:, :, None] + tm[:, None, :]).reshape(len(m), -1)
                made[key] = (alone, np.ascontiguousarray(c), np.ascontiguousarray(m))
            own[v] = made[key][1:]
        for t in tables:
            if OPTIONS[t.name].scope == "block":
                block = costed.contexts[v].block
                members.setdefault((t.name, block), []).append((v,) + arrays(t, f))
    groups = []
    for (name, _), ms in sorted(members.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        opt = OPTIONS[name]
        groups.append(Group(tuple(ms), len(opt.values), opt.values.index(opt.default), name))
    return Problem(costed.node_costs, costed.memory_with(in_flight), costed.edge_costs, own, groups)


def choices_of(costed, problem: Problem, choice: Choice) -> dict:
    """Per operator, the position of each searched option's value (name ->
    position), from a :class:`search.options.Choice`."""
    from options import OPTIONS

    out = {v: {} for v in range(costed.n)}
    for v, tables in enumerate(costed.tables or [()] * costed.n):
        alone = [t for t in tables if OPTIONS[t.name].scope == "operator"]
        j = choice.own[v]
        for t in reversed(alone):  # undo the combination: the last option varies fastest
            out[v][t.name] = j % len(t.values)
            j //= len(t.values)
    for g, value in zip(problem.groups, choice.groups):
        for v, _, _ in g.members:
            out[v][g.name] = value
    return out


def runs_of(costed, problem: Problem | None = None, groups: bool = False) -> list[Run]:
    """The repeated blocks of ``costed`` (its ``chains``) as runs of the
    search's variables (with ``groups``: each block's option variables too),
    those that keep the problem a series (:func:`search.chain.series`)."""
    runs = [_run(c) for c in costed.chains]
    place = places_of(costed, problem) if groups and problem is not None else {}
    joining = [[() for _ in r.blocks] for r in runs]  # per block, the option variables that join it
    for z, v in place.items():  # a block's option variable joins the block of its operators
        for j, c in enumerate(costed.chains):
            if c.start <= v < c.stop:
                k = (v - c.start) // c.size
                joining[j][k] = joining[j][k] + (z,)
                break
    runs = [replace(r, blocks=tuple(b + z for b, z in zip(r.blocks, joined))) for r, joined in zip(runs, joining)]
    edges = list(costed.edge_costs) + (problem.structure()[len(costed.edge_costs):] if groups and problem else [])
    good = [r for r in runs if series([r], costed.n, edges, place)]
    if series(good, costed.n, edges, place):
        return good
    return max(([r] for r in good), key=lambda rs: len(rs[0].variables), default=[])


def _run(c) -> Run:
    """A :class:`blocks.Chain` as a :class:`search.chain.Run` of its operators."""
    return Run(tuple(tuple(c.block(k)) for k in range(c.count)), tuple(c.boundary(k) for k in range(c.count)),
               c.entry, c.start, c.stop)


def places_of(costed, problem: Problem) -> dict:
    """Each block option's variable (numbered after the operators) and the
    first operator of its block: where it stands among the runs and
    segments of the chained search."""
    return {costed.n + b: min(v for v, _, _ in g.members) for b, g in enumerate(problem.groups)}


def _solver(costed, algo: int, problem: Problem | None = None, chained: bool = True, **options):
    """A function solving ``costed``'s edges (and with ``problem``'s block
    variables, when asked) for any node cost vectors, in the order of
    ``algo`` (the options are :func:`solve`'s); repeated blocks are searched
    once (:mod:`search.chain`) unless ``chained`` is false."""
    if algo not in ALGOS:
        raise SettingError("algo", f"must be one of {sorted(ALGOS)}, got {algo!r}")
    g = costed.graph
    names = [g.nodes[v]["op"].name for v in range(costed.n)]
    order_of = generate_seq if algo == 0 else breadth_first
    orders, runs = {}, {}

    def run(node_costs, edge_costs=None, groups=False):
        edges = costed.edge_costs if edge_costs is None else edge_costs
        if groups not in orders:
            n = len(node_costs)
            orders[groups] = order_of(n, list(edges))[0]
            worth = elimination(orders[groups], [len(c) for c in node_costs], list(edges)).work >= CHAIN_WORK
            found = runs_of(costed, problem, groups) if chained and algo == 0 and worth else []
            runs[groups] = found if any(len(r.blocks) >= CHAIN_BLOCKS for r in found) else []
        labels = names + [f"block option {b}" for b in range(len(node_costs) - costed.n)]
        if runs[groups]:
            place = places_of(costed, problem) if groups else None
            r = solve_chained(node_costs, edges, orders[groups], runs[groups], names=labels,
                              held_bytes=costed.nbytes, place=place, **options)
            r.stats = replace(r.stats, repeated=tuple(f"{c.count} x block of {c.size} operators"
                                                      for c in costed.chains if any(x.start == c.start for x in
                                                                                   runs[groups])))
            return r
        return solve(node_costs, edges, orders[groups], names=labels, held_bytes=costed.nbytes, **options)

    return run


def _named(result: SearchResult, costed, algo: int, problem: Problem | None = None, **stats) -> SearchResult:
    """``result`` with its order in the statistics and its decisions."""
    result.stats = replace(result.stats, algo=algo, order=ALGOS[algo], **stats)
    result.index = list(result.index[:costed.n])
    choices = choices_of(costed, problem, result.choice) if result.choice is not None else None
    result.strategy = costed.decisions(result.index, choices)
    result.choices = choices
    return result


def search(costed, algo: int = 0, *, prune: bool | str = "auto", memory_limit: int | None = None, progress=None,
           threads: int | None = None, kernel: str = "auto", chained: bool = True) -> SearchResult:
    """Optimal strategy of a :class:`cost_model.CostedGraph`.

    ``algo`` 0 uses GENERATESEQ, 1 the breadth-first order; ``prune``
    applies dominance pruning first, as in :func:`solve` (the optimum is
    the same).  The returned ``cost`` is the DP's optimum, ``strategy`` one
    decision per node; ``costed.cost_at(result.index, result.choices)``
    re-evaluates it.  With searched execution options, each operator takes
    the cheapest value for its configuration (and a block, when a value
    other than the default can be cheaper).  The memory limit covers the
    cost arrays ``costed`` holds too.
    """
    if not costed.searched:
        run = _solver(costed, algo, chained=chained, prune=prune, memory_limit=memory_limit, progress=progress,
                      threads=threads, kernel=kernel)
        return _named(run(costed.node_costs), costed, algo)
    problem = problem_of(costed)
    run = _solver(costed, algo, problem, chained=chained, prune=prune, memory_limit=memory_limit,
                  progress=progress, threads=threads, kernel=kernel)
    groups = bool(problem.groups) and problem.groups_matter(0.0)
    nodes, edges = problem.at(0.0, groups)
    r = run(nodes, edges, groups)
    r.choice = problem.decode(r.index, 0.0, groups)
    r.cost = problem.cost(r.choice)
    return _named(r, costed, algo, problem)


def pieces_bound(costed, *, threads: int | None = None, memory_limit: int | None = None) -> float:
    """A lower bound of ``costed``'s unconstrained optimum, at a small part
    of the search's work: what precedes its longest chain of repeated
    blocks, each block and what follows, each searched alone (blocks with
    the same arrays once) over a spanning tree of its edges (the costliest
    kept: a tree is searched in the time of its edges), the other edges
    dropped (a re-distribution costs nothing or more).  ``-inf`` without a
    chain, or when a dropped edge could cost less than nothing."""
    found = _pieces(costed, threads=threads, memory_limit=memory_limit)
    return -math.inf if found is None else math.fsum(r.cost for _, r in found)


def pieces_within(costed, capacity: float, *, cutoff: float | None = None, searches: int = 12,
                  threads: int | None = None, memory_limit: int | None = None) -> float:
    """A lower bound of the cheapest strategy of ``costed`` that keeps at
    most ``capacity`` bytes a device (what :func:`search_within` finds, in
    the operators' own costs), from the pieces of :func:`pieces_bound`:
    the Lagrangian dual of the capacity on them.

    At a multiplier ``lam >= 0`` every operator's cost vector, and what
    each value of its searched options adds to it, take ``lam`` times the
    memory they keep; the pieces' bound of those costs, less ``lam *
    capacity``, bounds every strategy that fits from below.  The
    multipliers are walked as :func:`search.lagrange.relax` walks them
    (where the lines of a solution above the capacity and one within it
    cross), from the multiplier at which the memory weighs as much as the
    cost, raised eightfold until the pieces' solution fits; at most
    ``searches`` pieces' searches, stopped as soon as the bound reaches
    ``cutoff``.  ``-inf`` where :func:`pieces_bound` is."""

    def solve_at(lam):  # the pieces' solution at lam: (its cost, its memory), or None
        shifted = _with_memory_priced(costed, lam)
        found = _pieces(shifted, threads=threads, memory_limit=memory_limit)
        if found is None:
            return None
        memory = math.fsum(_kept(shifted, piece, r) for piece, r in found)
        return math.fsum(r.cost for _, r in found) - lam * memory, memory

    first = solve_at(0.0)
    if first is None:
        return -math.inf
    c_lo, m_lo = first
    bound, done = c_lo, 1
    if m_lo <= capacity:
        return bound

    def enough():
        return cutoff is not None and bound >= cutoff

    hi = None
    lam = c_lo / m_lo if c_lo > 0 else 1.0
    while hi is None and done < searches and not enough():  # a multiplier at which the pieces fit
        c, m = solve_at(lam)
        done += 1
        bound = max(bound, c + lam * (m - capacity))
        if m > capacity:
            c_lo, m_lo = c, m
            lam *= 8.0
        else:
            hi = (c, m)
    while hi is not None and done < searches and not enough():
        lam = crossing(c_lo, m_lo, *hi)
        if lam is None:
            break
        c, m = solve_at(lam)
        done += 1
        bound = max(bound, c + lam * (m - capacity))
        if none_below(c, m, lam, c_lo, m_lo):
            break
        if m > capacity:
            c_lo, m_lo = c, m
        else:
            hi = (c, m)
    return bound


def _with_memory_priced(costed, lam: float):
    """``costed`` with ``lam`` times the memory each operator keeps added to
    its cost vector, and to each searched option's value what it keeps
    (arrays shared as ``costed``'s are)."""
    if not lam:
        return costed
    made: dict = {}

    def shared(key, make):
        if key not in made:
            made[key] = make()
        return made[key]

    nodes = [shared((id(c), id(m)), lambda c=c, m=m: c + lam * m) for c, m in zip(costed.node_costs, costed.memory)]
    tables = [tuple(shared(id(t), lambda t=t: replace(t, compute=t.compute + lam * t.kept)) for t in ts)
              for ts in costed.tables] if costed.tables else costed.tables
    return replace(costed, node_costs=nodes, tables=tables)


def _kept(costed, piece, result) -> float:
    """The bytes the operators ``piece`` of ``costed`` keep at ``result``
    (a search of them alone)."""
    tables = costed.tables or [()] * costed.n
    out = []
    for k, (v, i) in enumerate(zip(piece, result.index)):
        out.append(float(costed.memory[v][i]))
        for t in tables[v]:
            j = (result.choices or {}).get(k, {}).get(t.name, 0)
            out.append(float(t.parts[:, i, j].sum()))  # what the value keeps (its column of ``kept``)
    return math.fsum(out)


def _pieces(costed, *, threads: int | None = None, memory_limit: int | None = None):
    """The searches :func:`pieces_bound` sums: ``(piece, result)`` for each
    piece (its operators' ids, ascending; pieces with the same arrays share
    one result).  ``None`` without a chain, or when a dropped edge could
    cost less than nothing."""
    import networkx as nx

    if not costed.chains:
        return None
    c = max(costed.chains, key=lambda x: x.count * x.size)
    pieces = [range(0, c.start)] + [c.block(k) for k in range(c.count)] + [range(c.stop, costed.n)]
    where = {v: i for i, piece in enumerate(pieces) for v in piece}
    inner: dict = {}  # piece -> its edges (ids from its first operator, the array)
    for (u, v), m in costed.edge_costs.items():
        if where[u] != where[v]:
            if float(m.min()) < 0:
                return None
            continue
        lo = pieces[where[u]][0]
        inner.setdefault(where[u], []).append((u - lo, v - lo, m))
    tables = costed.tables or [()] * costed.n
    ids = [(id(costed.node_costs[v]), tuple(id(t) for t in tables[v])) for v in range(costed.n)]
    found: dict = {}  # what identifies a piece's arrays -> its search
    out = []
    for i, piece in enumerate(pieces):
        if not len(piece):
            continue
        edges = inner.get(i, [])
        key = (tuple(ids[v] for v in piece), tuple(sorted((u, v, id(m)) for u, v, m in edges)))
        if key not in found:
            tree = nx.Graph()
            tree.add_nodes_from(range(len(piece)))
            tree.add_weighted_edges_from((u, v, float(m.max())) for u, v, m in edges)
            tree = nx.maximum_spanning_tree(tree)
            if any(not tree.has_edge(u, v) and float(m.min()) < 0 for u, v, m in edges):
                return None
            sub = costed.restrict(piece)
            sub = replace(sub, edge_costs={e: m for e, m in sub.edge_costs.items() if tree.has_edge(*e)})
            found[key] = search(sub, threads=threads, memory_limit=memory_limit, prune=False)
        out.append((list(piece), found[key]))
    return out


def stage_costs(costed, *, threads: int | None = None, memory_limit: int | None = None):
    """The least costs of pipeline stages of ``c`` blocks of ``costed``'s
    longest repeated chain (the one a pipeline's stages cut), for every
    ``c``: ``(first, middle, last, whole)`` (see
    :func:`search.chain.stage_costs`; the repeated blocks before the chain
    searched once, what follows it as plain operators), the
    options at the values cheapest in time (block options at their
    default); ``None`` when the graph is not that chain between plain
    segments.  Worked out on the chain shortened to three blocks (what
    follows the last one read from the third): the blocks' arrays are the
    same; without pruning (the same figures)."""
    from search.chain import stage_costs as costs

    if not costed.chains:
        return None
    problem = problem_of(costed) if costed.searched else None
    nodes, edges = problem.at(0.0, False) if problem else (costed.node_costs, costed.edge_costs)
    c = max(costed.chains, key=lambda x: x.count * x.size)
    run = _run(c)
    if not series([run], costed.n, list(edges)):
        return None
    before = [_run(x) for x in costed.chains if x.stop <= c.start and x.count > 1]
    if not series(before + [run], costed.n, list(edges)):
        before = []  # what precedes the chain as plain operators
    keep = min(c.count, 3)
    cut = (c.count - keep) * c.size  # the nodes of the blocks left out
    last_block = range(c.start + (c.count - 1) * c.size, c.stop)

    def new(v):
        if v < c.start + keep * c.size:
            return v
        if v in last_block:
            return v - cut
        return v - cut if v >= c.stop else None

    short_nodes = [nodes[v] for v in range(len(nodes)) if v < c.start + keep * c.size or v >= c.stop]
    short_edges = {}
    for (u, v), m in edges.items():
        a, b = new(u), new(v)
        if a is None or b is None:
            continue
        if cut and (u in last_block) != (v in last_block) and c.start <= min(u, v) and max(u, v) < c.stop:
            continue  # into the last block, moved onto the third, from the one before: the kept blocks' own edge
        short_edges[(a, b)] = m  # the last block's own edges land on the third's: the same arrays
    short = Run(tuple(tuple(range(c.start + k * c.size, c.start + (k + 1) * c.size)) for k in range(keep)),
                tuple(c.start + k * c.size + c.exit for k in range(keep)), c.entry, c.start, c.start + keep * c.size)
    order = generate_seq(len(short_nodes), list(short_edges))[0]
    # unpruned: every operator is kept whole here (nothing folded), and on the shortened chain pruning
    # costs more than it saves (DeepSeek-V3's stages: 63 s against 89 s over a pipeline search's settings)
    return costs(short_nodes, short_edges, order, short, count=c.count, threads=threads, prune=False, before=before,
                 memory_limit=memory_limit, held_bytes=costed.nbytes)


# -- within the device memory ---------------------------------------------------------


def search_within(costed, capacity: float, algo: int = 0, *, prune: bool | str = "auto",
                  memory_limit: int | None = None, progress=None, threads: int | None = None,
                  kernel: str = "auto", rounds: int = 4, chained: bool = True, in_flight=1,
                  cutoff: float | None = None) -> Bounded:
    """:func:`search.lagrange.relax` for a :class:`cost_model.CostedGraph`:
    the cheapest strategy whose per-device peak memory is at most
    ``capacity`` bytes, with the search order of ``algo``; each search of
    the relaxation prunes its own node costs.

    The peak is what a device keeps (a sum over operators, which the
    relaxation bounds) and the most it holds on top of that at one time
    (one block's transients: recomputed activations, gathered weights).
    The relaxation runs within ``capacity`` less a reserve for the
    transient, starting at none and raised to the transient of the best
    strategy found until it fits (at most ``rounds`` times); its lower
    bound, for the capacity without a reserve, holds for every strategy
    that fits.  ``in_flight``: a pipeline stage's memory, the activations of
    that many micro-batches kept (one number, or one per operator).  ``cutoff``: :class:`search.lagrange.NotBetter`
    as soon as no strategy that fits can cost less."""
    problem = problem_of(costed, in_flight)
    run = _solver(costed, algo, problem, chained=chained, prune=prune, memory_limit=memory_limit, progress=progress,
                  threads=threads, kernel=kernel)
    t0 = time.perf_counter()
    reserve, searches, b = 0.0, 0, None
    memo = {}  # the solves of one round serve the next (a smaller capacity: the same problem)
    for _ in range(rounds):
        if capacity - reserve < problem.least_memory:
            break
        b = relax(problem, capacity - reserve, run, memo=memo, cutoff=cutoff)
        searches += b.searches
        r = _named(b.result, costed, algo, problem)
        peak = costed.figures(r.index, r.choices).peak_transient
        if b.memory + peak <= capacity * (1 + 1e-12):
            break
        reserve = max(peak, reserve * 1.01 + 1.0)  # more than before: the reserve grows each round
        b = None
    if b is None:
        raise DoesNotFit(problem.least_memory + reserve, capacity)
    b = replace(b, searches=searches, lower_bound=min(b.lower_bound, b.cost))
    b.result.seconds = time.perf_counter() - t0
    b.result.cost = b.cost
    b.result.stats = replace(b.result.stats, seconds=b.result.seconds)
    return b
