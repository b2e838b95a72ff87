"""Orders in which the dynamic program eliminates the operators.

* :func:`generate_seq`: GENERATESEQ of the PaSE paper (Elango, IPDPS 2021,
  section IV): repeatedly the operator whose dependent set is smallest.  It
  is the minimum-degree heuristic for elimination orderings (see Bodlaender
  and Koster, "Treewidth computations I. Upper bounds", Information and
  Computation 208, 2010), which keeps the largest dependent set, and so the
  tables, small on the sparse graphs of neural networks;
* :func:`breadth_first`: breadth-first from operator 0 with the whole
  frontier as the dependent set, the paper's baseline (``--algo 1``).

Both read only the number of vertices and the edges.
"""

from __future__ import annotations

from collections import deque

__all__ = ["generate_seq", "breadth_first", "adjacency"]


def adjacency(n: int, edges) -> list[set[int]]:
    nbrs = [set() for _ in range(n)]
    for u, v in edges:
        if u != v:
            nbrs[u].add(v)
            nbrs[v].add(u)
    return nbrs


def generate_seq(n: int, edges, last=(), sizes=None) -> tuple[list[int], list[tuple[int, ...]]]:
    """GENERATESEQ: the order and each vertex's dependent set.

    Start with ``d(v) = neighbours(v)``; repeatedly take the undecided vertex
    with the smallest ``|d(u)|`` (ties: smallest id), record ``D = d(u)``, and
    for every ``w`` in ``D`` set ``d(w) = (d(w) | D) - {u, w}``.  The
    vertices of ``last`` (kept to the end, as the boundaries of a repeated
    block are) are taken only when nothing else is left.  With ``sizes``
    (each vertex's number of configurations), ties go to the vertex whose
    step evaluates the fewest table entries (``K_u`` times the product of
    its dependent set's), then to the smallest id: among the vertices
    with as many dependents, the one of the cheapest step, which the count
    alone cannot tell apart (a residual sum of 528 configurations beside a
    router of 78).
    """
    import math

    d = adjacency(n, edges)
    undecided = set(range(n))
    last = set(last)
    order, dependent = [], []
    if sizes is None:
        def key(v):
            return len(d[v]), 0, v
    else:
        def key(v):
            return len(d[v]), sizes[v] * math.prod(sizes[w] for w in d[v]), v
    for _ in range(n):
        candidates = undecided - last or undecided
        u = min(candidates, key=key)
        undecided.remove(u)
        D = d[u]
        order.append(u)
        dependent.append(tuple(sorted(D)))
        for w in D:
            d[w] = (d[w] | D) - {u, w}
    return order, dependent


def breadth_first(n: int, edges) -> tuple[list[int], list[tuple[int, ...]]]:
    """Breadth-first order from vertex 0 (neighbours by ascending id; a new
    root at the smallest unvisited id if the graph is disconnected), with the
    plain dependent set ``N(v1..vi) & {v(i+1)..vn}``: the frontier."""
    nbrs = adjacency(n, edges)
    seen, order = [False] * n, []
    for root in range(n):
        if seen[root]:
            continue
        seen[root] = True
        queue = deque([root])
        while queue:
            u = queue.popleft()
            order.append(u)
            for w in sorted(nbrs[u]):
                if not seen[w]:
                    seen[w] = True
                    queue.append(w)
    done, frontier, dependent = set(), set(), []
    for u in order:
        done.add(u)
        frontier = (frontier | nbrs[u]) - done
        dependent.append(tuple(sorted(frontier)))
    return order, dependent
