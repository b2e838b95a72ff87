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

import time
from dataclasses import replace

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
from search.lagrange import Bounded, DoesNotFit, within_memory
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
]

ALGOS = {0: "GENERATESEQ", 1: "breadth-first"}


def _solver(costed, algo: int, **options):
    """A function solving ``costed``'s edges for any node cost vectors, in
    the order of ``algo`` (the options are :func:`solve`'s)."""
    if algo not in ALGOS:
        raise SettingError("algo", f"must be one of {sorted(ALGOS)}, got {algo!r}")
    order, _ = (generate_seq if algo == 0 else breadth_first)(costed.n, list(costed.edge_costs))
    g = costed.graph
    names = [g.nodes[v]["op"].name for v in range(costed.n)]

    def run(node_costs):
        return solve(node_costs, costed.edge_costs, order, names=names, held_bytes=costed.nbytes, **options)

    return run


def _named(result: SearchResult, costed, algo: int, **stats) -> SearchResult:
    """``result`` with its order in the statistics and its configurations."""
    result.stats = replace(result.stats, algo=algo, order=ALGOS[algo], **stats)
    result.strategy = costed.decisions(result.index)
    return result


def search(costed, algo: int = 0, *, prune: bool | str = "auto", memory_limit: int | None = None, progress=None,
           threads: int | None = None, kernel: str = "auto") -> SearchResult:
    """Optimal strategy of a :class:`cost_model.CostedGraph`.

    ``algo`` 0 uses GENERATESEQ, 1 the breadth-first order; ``prune``
    applies dominance pruning first, as in :func:`solve` (the optimum is
    the same).  The returned ``cost`` is the DP's optimum, ``strategy`` one
    configuration per node; ``costed.cost_at(result.index)`` re-evaluates
    it.  The memory limit covers the cost arrays ``costed`` holds too.
    """
    run = _solver(costed, algo, prune=prune, memory_limit=memory_limit, progress=progress, threads=threads,
                  kernel=kernel)
    return _named(run(costed.node_costs), costed, algo)


# -- within the device memory ---------------------------------------------------------


def search_within(costed, capacity: float, algo: int = 0, *, prune: bool | str = "auto",
                  memory_limit: int | None = None, progress=None, threads: int | None = None,
                  kernel: str = "auto") -> Bounded:
    """:func:`within_memory` for a :class:`cost_model.CostedGraph`: the
    cheapest strategy whose per-device memory (``costed.memory``, bytes) is
    at most ``capacity`` bytes, with the search order of ``algo``; each
    search of the relaxation prunes its own node costs."""
    run = _solver(costed, algo, prune=prune, memory_limit=memory_limit, progress=progress, threads=threads,
                  kernel=kernel)
    t0 = time.perf_counter()
    b = within_memory(costed.node_costs, costed.memory, costed.edge_costs, capacity, run)
    b.result.seconds = time.perf_counter() - t0
    b.result.cost = b.cost
    _named(b.result, costed, algo, seconds=b.result.seconds)
    return b
