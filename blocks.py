"""Repeated blocks of a graph, found from its structure alone.

A *chain* is a run of consecutive blocks of operators (node ids ``start +
k * size ... start + (k + 1) * size - 1`` for block ``k = 0 .. count - 1``)
that are the same up to names: block ``k``'s operators equal block 0's
(:class:`kinds.Operator` equality ignores names), its edges inside the
block are block 0's shifted, and it reads what comes from outside it
through one tensor only: the output of one operator of the block before it
(at the same position in every block, ``exit``), or, for the first block,
of one operator before the chain (``entry``; ``None`` when the first block
reads only the network's inputs and weights).  Nothing but that operator
of the last block is read after the chain.  A skip connection across
blocks (a decoder layer reading the encoder's output) makes the boundary
wider than one tensor: no chain.

Detection: the operators, interned, form a sequence; for each period
``L`` the runs where operator ``i`` equals operator ``i + L`` are the
candidates, the longest coverage first; each is checked edge by edge and
rotated (its first block may start anywhere in the run's first period)
until the boundary is one tensor.  Names are never read.  Chains do not
overlap; a graph may hold several (the stages of a ResNet).

    >>> from models import build_graph
    >>> [(c.count, c.size) for c in find_chains(build_graph("transformer"))]
    [(6, 12)]
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Chain", "find_chains", "block_of", "MIN_BLOCKS"]

MIN_BLOCKS = 2  # a chain has at least this many blocks


@dataclass(frozen=True)
class Chain:
    """``count`` identical blocks of ``size`` operators from node ``start``
    (see the module docstring); ``exit`` the position, inside a block, of
    the operator whose output the next block reads; ``entry`` the node
    before the chain the first block reads (``None``: none)."""

    start: int
    size: int
    count: int
    exit: int
    entry: int | None

    @property
    def stop(self) -> int:
        """One past the chain's last node."""
        return self.start + self.size * self.count

    def block(self, k: int) -> range:
        """The nodes of block ``k``."""
        first = self.start + k * self.size
        return range(first, first + self.size)

    def boundary(self, k: int) -> int:
        """The node of block ``k`` whose output block ``k + 1`` reads (for
        the last block: what follows the chain reads)."""
        return self.start + k * self.size + self.exit

    def describe(self) -> str:
        return f"{self.count} x block of {self.size} operator{'s' * (self.size > 1)}"


def _in_edges(g) -> list[list[tuple[int, int, int]]]:
    """Per node, its in-edges as ``(source, output, input)``, sorted."""
    out = [[] for _ in range(g.number_of_nodes())]
    for u, v, d in g.edges(data=True):
        out[v].append((u, d["out"], d["inp"]))
    return [sorted(e) for e in out]


def _check(g, ins, outs, start: int, size: int, count: int):
    """The :class:`Chain` of ``count`` blocks of ``size`` from ``start``
    when the edges allow one, else ``None`` (the operators are known to
    repeat)."""
    stop = start + size * count
    inner = None  # the edges inside a block, as offsets
    crossing = None  # the edges into a block from outside it: (source offset or entry, target offset, out, inp)
    entry = None
    for k in range(count):
        first = start + k * size
        here_inner, here_cross = [], []
        for j in range(size):
            for u, o, i in ins[first + j]:
                if first <= u < first + size:
                    here_inner.append((u - first, j, o, i))
                elif k > 0 and first - size <= u < first:
                    here_cross.append((u - (first - size), j, o, i))
                elif k == 0 and u < start:
                    if entry is None:
                        entry = u
                    elif u != entry:
                        return None  # the first block reads two tensors from before the chain
                    here_cross.append((None, j, o, i))
                else:
                    return None  # a skip connection across blocks
        if inner is None:
            inner = here_inner
        elif here_inner != inner:
            return None
        if k == 0:
            first_cross = here_cross
        elif crossing is None:
            crossing = here_cross
        elif here_cross != crossing:
            return None
    sources = {src for src, *_ in crossing}
    if len(sources) != 1 or (first_cross and [x[1:] for x in first_cross] != [x[1:] for x in crossing]):
        return None  # the boundary is more than one tensor, or the first block reads differently
    (exit_,) = sources
    if entry is not None and len({o for _, _, o, _ in first_cross}) != 1:
        return None
    for k in range(count):  # nothing leaves a block but through its exit, to the next block (or after the chain)
        first = start + k * size
        for j in range(size):
            for v in outs[first + j]:
                if first <= v < first + size:
                    continue
                if j != exit_ or v < first + size or (k < count - 1 and v >= first + 2 * size):
                    return None
                if k == count - 1 and v < stop:
                    return None
    return Chain(start, size, count, exit_, entry)


def find_chains(g, min_blocks: int = MIN_BLOCKS) -> tuple[Chain, ...]:
    """Every chain of at least ``min_blocks`` identical blocks in ``g``,
    by node id (see the module docstring)."""
    import numpy as np

    from graph import operators

    ops = operators(g)
    n = len(ops)
    ids: dict = {}
    seq = np.array([ids.setdefault(op, len(ids)) for op in ops], dtype=np.int64)
    ins = _in_edges(g)
    outs = [sorted(g.successors(v)) for v in range(n)]
    taken = np.zeros(n, dtype=bool)
    chains = []
    while True:
        free = np.where(taken, -np.arange(1, n + 1), seq)  # taken nodes match nothing
        best = None
        candidates = []
        for L in range(1, n // min_blocks + 1):
            same = free[:-L] == free[L:]  # (n - L,): operator i equals operator i + L
            if not same.any():
                continue
            edges = np.diff(np.concatenate(([0], same.astype(np.int8), [0])))
            for lo, hi in zip(np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]):
                if (hi - lo + L) // L >= min_blocks:  # the run covers nodes lo .. hi + L - 1
                    candidates.append(((hi - lo + L) // L * L, -L, -lo, int(lo), int(hi), L))
        for cover, _, _, lo, hi, L in sorted(candidates, reverse=True):
            if best is not None and cover <= best.size * best.count:
                break
            span = hi + L - lo  # nodes in the run
            for shift in range(min(L, span - min_blocks * L + 1)):  # rotations: where the first block starts
                count = (span - shift) // L
                chain = _check(g, ins, outs, lo + shift, L, count) if count >= min_blocks else None
                if chain is not None:
                    if best is None or chain.size * chain.count > best.size * best.count:
                        best = chain
                    break
        if best is None:
            return tuple(sorted(chains, key=lambda c: c.start))
        chains.append(best)
        taken[best.start:best.stop] = True


def block_of(chains, n: int) -> list[int | None]:
    """Per node of a graph of ``n`` nodes, the number of the block holding
    it (blocks numbered across all chains, in order), or ``None``."""
    out: list[int | None] = [None] * n
    b = 0
    for c in chains:
        for k in range(c.count):
            for v in c.block(k):
                out[v] = b
            b += 1
    return out
