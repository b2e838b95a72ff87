"""Chains of identical blocks searched once: the (min, +) product of a
block's boundary matrix.

A graph whose operators repeat in blocks (``blocks.py``: a transformer's
layers) costs, per block, the same arrays: block ``k``'s operators read the
previous block only through one operator's output, its *boundary* ``b_(k-1)``.
Eliminating a block's other variables with both boundaries kept gives a
matrix over (previous boundary, own boundary),

    M[a, b] = min over the block's other configurations of the sum of its
              cost vectors, its edges, and its edges from the previous boundary ``a``,

the same matrix for every block.  With the cost ``v_(k-1)`` of everything
before the block as a function of its boundary, the block adds
``v_k[b] = min_a v_(k-1)[a] + M[a, b]``: a (min, +) product of a vector and
a matrix, ``K^2`` per block, where the plain search eliminates the whole
block again (the tables of its operators, up to ``K^3`` and more each).  The
optimum is the plain search's exactly; different blocks may still take
different configurations (the plan is recovered block by block from each
product's arg-minima).  Computing the powers ``M^n`` by squaring costs
``K^3`` per squaring, more than ``n`` vector products unless ``n`` exceeds
``K``: the vector form is used.

The graph must be a *series* of plain segments and chains: nothing but the
chain's entry (the operator before it that its first block reads) joins what
comes before a chain to it, nothing but its last boundary joins it to what
follows, and no edge bypasses it.  Otherwise (a decoder reading the
encoder's output in every layer) :func:`series` says so and the plain search
runs.  Before anything, every operator of a block keeps the configurations
the pruning keeps for any block at its position (a superset: still exact).

:func:`chain_costs` exposes the same products for ranges of blocks: the
least cost of ``n`` consecutive blocks, for every ``n``, which a pipeline's
stages need.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from search.elimination import SearchResult, Workers, _stats, eliminate, reduce_problem

__all__ = ["Run", "series", "solve_chained", "minplus_vector", "chain_costs", "stage_costs"]

_PRODUCT_ROWS = 1 << 22  # entries of a (min, +) vector product worked out at once


@dataclass(frozen=True)
class Run:
    """A chain in the search's variables: ``blocks[k]`` the variables of
    block ``k`` (the same positions in every block: operators, then the
    variables of block options), ``exits[k]`` its boundary, ``entry`` the
    variable before the chain its first block reads (``None``: none), and
    ``start``, ``stop`` the chain's node ids."""

    blocks: tuple
    exits: tuple
    entry: int | None
    start: int
    stop: int

    @property
    def variables(self) -> set:
        return {v for b in self.blocks for v in b}


def series(runs, n_real: int, edges, place=None) -> bool:
    """Whether the problem is a series of plain segments and ``runs``
    (see the module docstring): every edge inside a segment, inside a
    block, from a block's exit into the next block, from a run's entry into
    its first block, or from its last exit into the segment (or run) after
    it.  ``place``: for variables after the ``n_real`` operators (a block
    option's), the operator each stands beside (one of its block's), which
    says the segment it belongs to when no run holds it."""
    where = {}  # variable -> ("run", j, k) or ("seg", s)
    for j, r in enumerate(runs):
        for k, b in enumerate(r.blocks):
            for v in b:
                where[v] = ("run", j, k)
    starts = [r.start for r in runs]
    for v in list(range(n_real)) + sorted(place or ()):
        at = v if v < n_real else place[v]
        where.setdefault(v, ("seg", sum(1 for s in starts if s < at)))

    def allowed(x, wx, y, wy) -> bool:  # the edge from x to y
        if wx[0] == "seg":
            if wy[0] == "seg":
                return wx[1] == wy[1]
            r = runs[wy[1]]
            return x == r.entry and wy[2] == 0 and wx[1] == wy[1]
        r = runs[wx[1]]
        if wy[0] == "seg":
            return x == r.exits[-1] and wy[1] == wx[1] + 1
        if wx[1] == wy[1]:
            ka, kb = wx[2], wy[2]
            return ka == kb or (kb == ka + 1 and x == r.exits[ka])
        return wy[1] == wx[1] + 1 and x == r.exits[-1] and x == runs[wy[1]].entry and wy[2] == 0

    for u, v in edges:
        a, b = where.get(u), where.get(v)
        if a is None or b is None or not (allowed(u, a, v, b) or allowed(v, b, u, a)):
            return False
    return True


def minplus_vector(v: np.ndarray, M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``out[b] = min_a v[a] + M[a, b]`` and the first ``a`` that reaches
    it, for each ``b``, in blocks of columns."""
    Ka, Kb = M.shape
    out = np.empty(Kb)
    arg = np.empty(Kb, dtype=np.int64)
    cols = max(1, _PRODUCT_ROWS // max(Ka, 1))
    for j in range(0, Kb, cols):
        s = v[:, None] + M[:, j:j + cols]  # (K_a, cols)
        a = np.argmin(s, axis=0)
        arg[j:j + cols] = a
        out[j:j + cols] = s[a, np.arange(s.shape[1])]
    return out, arg


def _order(red, variables, keep) -> list:
    """GENERATESEQ over ``variables`` and ``keep`` (the edges among them),
    the kept ones left last, ties to the cheapest step (the kept
    boundaries make more steps alike in their dependents than the plain
    search sees): the order to eliminate ``variables`` in."""
    from search.order import generate_seq

    every = list(variables) + list(keep)
    local = {v: i for i, v in enumerate(every)}
    edges = [(local[u], local[v]) for u, v in red.edges if u in local and v in local]
    kept = set(range(len(variables), len(every)))
    order, _ = generate_seq(len(every), edges, last=kept, sizes=[red.sizes[v] for v in every])
    return [every[i] for i in order if i not in kept]


def _same(red, block, model) -> bool:
    """Whether ``block``'s arrays are those of ``model`` position by position."""
    pos = {v: i for i, v in enumerate(block)}
    for x, y in zip(block, model):
        if red.sizes[x] != red.sizes[y]:
            return False
        if (x in red.nodes) != (y in red.nodes) or (x in red.nodes and not np.array_equal(red.nodes[x],
                                                                                        red.nodes[y])):
            return False
    for (u, v), m in red.edges.items():
        if u in pos and v in pos:
            other = red.edges.get((model[pos[u]], model[pos[v]]))
            if other is None or (other is not m and not np.array_equal(other, m)):
                return False
    return True


def _crossing(edges, source, block) -> dict:
    """The edges from ``source`` into ``block``: position in the block ->
    matrix (``source``'s configurations along the rows)."""
    pos = {v: i for i, v in enumerate(block)}
    out = {}
    for (u, v), m in edges.items():
        if u == source and v in pos:
            out[pos[v]] = (m, False)
        elif v == source and u in pos:
            out[pos[u]] = (m, True)
    return out


def _same_crossing(a: dict, b: dict) -> bool:
    """Whether two :func:`_crossing` results hold equal matrices."""
    if a.keys() != b.keys():
        return False
    for i, (m, t) in a.items():
        n, u = b[i]
        if (m is not n or t != u) and not np.array_equal(m.T if t else m, n.T if u else n):
            return False
    return True


def _entry_like_exits(node_costs, edge_costs, run: Run) -> bool:
    """Whether the run's first block reads its entry as every other block
    reads the exit before it: as many configurations, equal edges.  Then
    the entry keeps the exits' configurations and the first block's
    boundary matrix is the others' (one elimination fewer)."""
    if run.entry is None or len(run.blocks) < 2 or len(node_costs[run.entry]) != len(node_costs[run.exits[0]]):
        return False
    return _same_crossing(_crossing(edge_costs, run.entry, run.blocks[0]),
                          _crossing(edge_costs, run.exits[0], run.blocks[1]))


class _Blocks:
    """The boundary matrices of a run's blocks: one elimination for the
    first block (from the entry) and one for the others (from the previous
    exit), each computed once and kept for the recovery; the first block
    takes the others' when it reads the entry as they read the exit
    before them (the same arrays, the entry keeping the same
    configurations)."""

    def __init__(self, red, run: Run, pool):
        self.red, self.run, self.pool = red, run, pool
        self.cache = {}  # block number whose arrays it is -> (matrix, Eliminated, keep)
        self._first = None

    def first_like_the_rest(self) -> bool:
        if self._first is None:
            red, run = self.red, self.run
            self._first = (run.entry is not None and len(run.blocks) > 1
                           and np.array_equal(red.kept[run.entry], red.kept[run.exits[0]])
                           and _same(red, run.blocks[0], run.blocks[1])
                           and _same_crossing(_crossing(red.edges, run.entry, run.blocks[0]),
                                              _crossing(red.edges, run.exits[0], run.blocks[1])))
        return self._first

    def matrix(self, k: int):
        """(M, eliminated, representative block) for block ``k``."""
        run = self.run
        rep = 0 if k == 0 and not self.first_like_the_rest() else 1
        if k > 1 and not _same(self.red, run.blocks[k], run.blocks[1]):
            rep = k
        if rep not in self.cache:
            prev = run.entry if rep == 0 else run.exits[rep - 1]
            b = run.exits[rep]
            inner = [v for v in run.blocks[rep] if v != b and v in self.red.nodes]
            keep = (b,) if prev is None else (prev, b)
            nodes = {v: self.red.nodes[v] for v in inner + [b]}
            if prev is not None:
                nodes[prev] = np.zeros(self.red.sizes[prev])  # its cost counts where it belongs
            done = eliminate(self.red, _order(self.red, inner, keep), keep, nodes=nodes, pool=self.pool)
            M = done.table if prev is not None else np.asarray(done.table)[None, :]
            self.cache[rep] = (M, done, keep)
        return self.cache[rep] + (rep,)


def _alike(node_costs, edge_costs, runs) -> list:
    """The variables that keep the same configurations: each position of a
    run's blocks, with the entry at the exits' when the first block reads
    it as the others read theirs (:func:`_entry_like_exits`); groups that
    share a variable (one run's exit, the next one's entry) merged."""
    groups = []
    for r in runs:
        for i in range(len(r.blocks[0])):
            group = [b[i] for b in r.blocks]
            if r.blocks[0][i] == r.exits[0] and _entry_like_exits(node_costs, edge_costs, r):
                group.append(r.entry)
            groups.append(group)
    parent = {}

    def root(v):
        while parent.setdefault(v, v) != v:
            v = parent[v]
        return v

    for group in groups:
        for v in group[1:]:
            a, b = root(group[0]), root(v)
            if a != b:
                parent[b] = a
    merged = {}
    for v in parent:
        merged.setdefault(root(v), []).append(v)
    return [sorted(g) for g in merged.values()]


def _reduced(node_costs, edge_costs, order, runs, fold: bool = True, **options):
    """The pruned problem, every block's operators keeping what any block
    keeps at their position (see :func:`_alike`), and what touches a
    boundary kept whole (with ``fold`` false, every operator: nothing in
    the constant)."""
    alike = _alike(node_costs, edge_costs, runs)
    if not fold:
        return reduce_problem(node_costs, edge_costs, order, free=range(len(node_costs)), alike=alike, **options)
    boundaries = {r.entry for r in runs if r.entry is not None} | {e for r in runs for e in r.exits}
    near = set(boundaries)  # never folded: what touches a boundary must cost alike in every block
    for u, v in edge_costs:
        if u in boundaries or v in boundaries:
            near |= {u, v}
    return reduce_problem(node_costs, edge_costs, order, free=near, alike=alike, **options)


def _segments(red, runs, place=None) -> list:
    """The variables before, between and after the runs, each in the plain
    order (a block option's variable where ``place`` puts it, see
    :func:`series`)."""
    in_run = {v for r in runs for v in r.variables}
    starts = [r.start for r in runs]
    place = place or {}
    segments = [[] for _ in range(len(runs) + 1)]
    for v in red.unpruned.order:
        if v not in in_run and v in red.nodes:
            at = place.get(v, v)
            segments[sum(1 for s in starts if s < at)].append(v)
    return segments


def stage_costs(node_costs, edge_costs, order, run: Run, count: int | None = None, **options):
    """The least costs of a pipeline's stages cut between the blocks of the
    problem's one ``run``: ``(first, middle, last, whole)``: vectors whose
    entry ``c - 1`` is what a stage of ``c`` blocks costs, the first with
    what precedes the run, a middle one alone, the last with what follows
    it (a stage's input from the stage before costs nothing here: it
    arrives point to point), and what all ``count`` blocks (default: the
    run's) cost with both.  Blocks are taken as identical (the second
    block's matrix), so the run may be a short one standing for ``count``
    blocks: figures to rank cuts by, four eliminations in all."""
    pool = options.pop("pool", None)
    earlier = list(options.pop("before", ()))
    red = _reduced(node_costs, edge_costs, order, earlier + [run], fold=False, **options)
    segments = _segments(red, earlier + [run])
    after = segments[-1]
    blocks = _Blocks(red, run, pool)
    count = len(run.blocks) if count is None else count
    head = np.zeros(1) if run.entry is None else _head(red, earlier + [run], segments, pool)
    exit_ = run.exits[-1]
    done = eliminate(red, _order(red, after, (exit_,)), (exit_,),
                     nodes={**{v: red.nodes[v] for v in after}, exit_: np.zeros(red.sizes[exit_])}, pool=pool)
    tail = np.asarray(done.table, dtype=float)
    M0 = blocks.matrix(0)[0]
    M = blocks.matrix(1)[0] if len(run.blocks) > 1 else M0  # one block: no stage but the whole
    first, middle, last = [], [], []
    f, _ = minplus_vector(head, M0)
    mid = np.zeros(M.shape[0])
    for c in range(count):
        if c:
            f, _ = minplus_vector(f, M)
        mid, _ = minplus_vector(mid, M)
        first.append(float(f.min()))
        middle.append(float(mid.min()))
        last.append(float((mid + tail).min()))
    return np.asarray(first), np.asarray(middle), np.asarray(last), float((f + tail).min())


def _head(red, runs, segments, pool):
    """The least cost of everything before the last of ``runs`` as a
    vector over that run's entry: the segments eliminated, the runs before
    it searched once (:func:`solve_chained`'s forward pass, nothing kept
    for a recovery)."""
    incoming = None
    for j, run in enumerate(runs):
        nodes = {v: red.nodes[v] for v in segments[j]}
        eliminated = [v for v in segments[j] if v != run.entry]
        if incoming is not None:
            nodes[incoming[0]] = incoming[1]
            if incoming[0] != run.entry:
                eliminated.append(incoming[0])
        keep = (run.entry,) if run.entry is not None else ()
        done = eliminate(red, _order(red, eliminated, keep), keep, nodes=nodes, pool=pool)
        vec = np.asarray(done.table, dtype=float) if keep else np.zeros(1) + float(done.table)
        if j == len(runs) - 1:
            return vec
        blocks = _Blocks(red, run, pool)
        for k in range(len(run.blocks)):
            vec, _ = minplus_vector(vec, blocks.matrix(k)[0])
        incoming = (run.exits[-1], vec)


def solve_chained(node_costs, edge_costs, order, runs, **options) -> SearchResult:
    """The plain search's optimum of ``node_costs`` and ``edge_costs`` (see
    :func:`search.elimination.solve`, whose options it takes) with the
    ``runs`` of identical blocks searched once each (see the module
    docstring).  The problem must be a :func:`series` (with ``place``, the
    operator each block option's variable that no run holds stands
    beside)."""
    progress = options.pop("progress", None)
    place = options.pop("place", None)
    red = _reduced(node_costs, edge_costs, order, runs, **options)
    segments = _segments(red, runs, place)
    n = len(node_costs)
    pool = Workers(red.threads) if red.threads > 1 else None
    work, saved, fused, steps, largest, widest = 0, 0, False, 0, 1, 0
    records = []  # what the recovery needs, in the order worked out
    incoming = None  # (exit variable, vector over it) from the run before
    total = red.constant
    try:
        for j in range(len(runs) + 1):
            run = runs[j] if j < len(runs) else None
            entry = run.entry if run is not None else None
            nodes = {v: red.nodes[v] for v in segments[j]}
            eliminated = [v for v in segments[j] if v != entry]
            if incoming is not None:
                nodes[incoming[0]] = incoming[1]  # the run before, as a cost of its exit
                if incoming[0] != entry:
                    eliminated.append(incoming[0])
            keep = (entry,) if entry is not None else ()
            done = eliminate(red, _order(red, eliminated, keep), keep, nodes=nodes, pool=pool)
            work += done.elimination.work
            saved += done.saved
            fused |= done.fused
            largest = max(largest, done.elimination.largest_table)
            widest = max(widest, done.elimination.largest_dependent_set)
            records.append(("segment", done, keep))
            steps += len(eliminated)
            if run is None:
                total += float(done.table)
                break
            vec = np.asarray(done.table, dtype=float) if keep else np.zeros(1) + float(done.table)
            blocks = _Blocks(red, run, pool)
            args = []
            for k in range(len(run.blocks)):
                fresh = len(blocks.cache)
                M, elim, _, _ = blocks.matrix(k)
                if len(blocks.cache) > fresh:
                    work += elim.elimination.work
                    saved += elim.saved
                    fused |= elim.fused
                    largest = max(largest, elim.elimination.largest_table)
                    widest = max(widest, elim.elimination.largest_dependent_set)
                work += M.size  # the (min, +) product of the vector and the block's matrix
                vec, arg = minplus_vector(vec, M)
                args.append(arg)
                steps += len(run.blocks[k])
                if progress is not None:
                    progress(min(steps, n), n)
            records.append(("run", blocks, args))
            incoming = (run.exits[-1], vec)
    finally:
        if pool is not None:
            pool.close()
    # The recovery, last first: a segment decides the exit of the run before it (or, kept, is given its
    # run's entry); a run's arg-minima decide its boundaries, each block's elimination its other variables.
    local = {}
    for record in reversed(records):
        if record[0] == "segment":
            _, done, keep = record
            local.update(done.recover({v: local[v] for v in keep}))
            continue
        _, blocks, args = record
        run = blocks.run
        b = local[run.exits[-1]]
        for k in range(len(run.blocks) - 1, -1, -1):
            a = int(args[k][b])
            _, elim, kept, rep = blocks.matrix(k)
            got = elim.recover({kept[-1]: b, **({kept[0]: a} if len(kept) == 2 else {})})
            for x, y in zip(run.blocks[k], run.blocks[rep]):
                if y in got:
                    local[x] = got[y]
            local[run.exits[k]] = b
            b = a
        if run.entry is not None:
            local[run.entry] = b
    index = [int(k[local.get(v, 0)]) for v, k in enumerate(red.kept)]
    seconds = time.perf_counter() - red.t0
    stats = _stats(red, red.unpruned, fused, seconds)
    from dataclasses import replace

    stats = replace(stats, work=work, work_computed=work - saved, largest_table=largest, largest_dependent_set=widest)
    return SearchResult(total, index, red.unpruned, seconds, stats, red.kept)


def chain_costs(red, run: Run, start=None, count: int | None = None, pool=None):
    """The least cost of ``n`` consecutive blocks of ``run`` for every
    ``n`` up to ``count`` (default: all), the first one's previous boundary
    free (each value of it costing ``start``, default nothing) and the last
    one's boundary free: what a stage of a pipeline made of those blocks
    costs on the cluster ``red`` was built for.  Returns a vector of
    ``count`` costs."""
    count = len(run.blocks) if count is None else count
    blocks = _Blocks(red, run, pool)
    M, _, _, _ = blocks.matrix(min(1, len(run.blocks) - 1))
    vec = np.zeros(M.shape[0]) if start is None else np.asarray(start, float)
    out = []
    for _ in range(count):
        vec, _ = minplus_vector(vec, M)
        out.append(float(vec.min()))
    return np.asarray(out)
