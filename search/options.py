"""The search problem with execution options, on arrays.

Beside its configuration, an operator may choose execution options
(``options/``).  Their effects are tables: for each configuration ``k``
and value ``j``, what the value adds to the operator's cost and to the
memory it keeps (``(K, n)`` arrays).  They never touch an edge (an option
does not change how tensors are split), so:

* an option each operator chooses alone (its *own* table: ZeRO's stage) is
  folded into the operator's cost vector: at a multiplier ``lam`` of the
  memory (:mod:`search.lagrange`), the best value for each configuration is
  ``argmin_j cost[k, j] + lam * memory[k, j]``, exactly;
* an option a block of operators chooses together (recomputation) is one
  more variable per block, with as many values as the option, joined to
  each operator of the block by a matrix ``(n, K_v)``: the value's cost and
  memory for each of the operator's configurations.  The dynamic program
  eliminates it like an operator.

:class:`Problem` turns a multiplier into the plain arrays
:func:`search.elimination.solve` reads (its ``nodes`` and ``edges``, block
variables numbered after the operators), decodes a solution, and evaluates
its true cost and memory.  Without options it is the plain problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from result import total

__all__ = ["Group", "Choice", "Problem"]


@dataclass(frozen=True)
class Group:
    """Operators that choose one value of an option together (a block):
    ``members`` ``(v, cost (K_v, n), memory (K_v, n))``, ``n`` values,
    ``default`` the value chosen when it makes no difference, ``name`` the
    option's."""

    members: tuple
    n: int
    default: int = 0
    name: str = ""


@dataclass(frozen=True)
class Choice:
    """A solution: ``index[v]`` the configuration of operator ``v``,
    ``own[v]`` the value of its own options' table (flattened), ``groups[b]``
    the value of block option group ``b``."""

    index: tuple
    own: tuple
    groups: tuple


class Problem:
    """See the module docstring.  ``node_costs[v]`` and ``node_memory[v]``
    (K,); ``edge_costs[(u, v)]`` (K_u, K_v); ``own[v]``: ``None`` or the
    ``(cost, memory)`` tables ``(K, J)`` of the options operator ``v``
    chooses alone (their values combined); ``groups``: the :class:`Group`
    of each block option."""

    def __init__(self, node_costs, node_memory, edge_costs, own=None, groups=()):
        self.node_costs = list(node_costs)
        self.node_memory = list(node_memory)
        self.edge_costs = edge_costs
        self.n = len(self.node_costs)
        self.own = list(own) if own is not None else [None] * self.n
        self.groups = tuple(groups)
        self._folded = {}

    @property
    def plain(self) -> bool:
        return not self.groups and all(o is None for o in self.own)

    # -- the arrays at a multiplier ----------------------------------------------------
    def _own_at(self, v: int, lam: float):
        """(cost of each configuration at its best own value, that value) at
        ``lam`` (worked out once for operators that share their tables)."""
        c, m = self.own[v]
        key = (id(c), id(m), lam)
        if key not in self._folded:
            folded = c + lam * m if lam else c  # (K, J)
            j = np.argmin(folded, axis=1)  # (K,) the first best: the default on ties
            self._folded = {k: x for k, x in self._folded.items() if k[2] == lam}  # one multiplier at a time
            self._folded[key] = (folded[np.arange(len(j)), j], j)
        return self._folded[key]

    def groups_matter(self, lam: float) -> bool:
        """Whether a block's value can change the optimum at ``lam``: not
        when every value adds a cost and memory at least the default's."""
        for g in self.groups:
            for _, c, m in g.members:
                extra = c + lam * m if lam else c
                if (extra < extra[:, [g.default]]).any():
                    return True
        return False

    def at(self, lam: float, with_groups: bool = True):
        """``(nodes, edges)`` of the plain problem at multiplier ``lam``
        (block variables after the operators when ``with_groups``)."""
        nodes = []
        for v in range(self.n):
            c = self.node_costs[v] + lam * self.node_memory[v] if lam else np.asarray(self.node_costs[v], float)
            if self.own[v] is not None:
                c = c + self._own_at(v, lam)[0]
            nodes.append(c)
        edges = dict(self.edge_costs)
        if with_groups:
            made = {}  # operators with the same tables share one matrix (as the cost arrays share theirs)
            for b, g in enumerate(self.groups):
                z = self.n + b
                nodes.append(np.zeros(g.n))
                for v, c, m in g.members:
                    key = (id(c), id(m))
                    if key not in made:
                        made[key] = np.ascontiguousarray((c + lam * m if lam else c).T)  # (n, K_v)
                    edges[(z, v)] = made[key]
        else:
            for g in self.groups:
                for v, c, _ in g.members:
                    nodes[v] = nodes[v] + c[:, g.default]
        return nodes, edges

    def structure(self) -> list:
        """The edges of the plain problem with the block variables."""
        edges = list(self.edge_costs)
        for b, g in enumerate(self.groups):
            edges += [(self.n + b, v) for v, _, _ in g.members]
        return edges

    def decode(self, index, lam: float, with_groups: bool = True) -> Choice:
        """The solution a plain solution ``index`` at ``lam`` stands for."""
        index = [int(i) for i in index]
        own = tuple(int(self._own_at(v, lam)[1][index[v]]) if self.own[v] is not None else 0
                    for v in range(self.n))
        groups = tuple(index[self.n + b] if with_groups else g.default for b, g in enumerate(self.groups))
        return Choice(tuple(index[:self.n]), own, groups)

    # -- a solution's figures ------------------------------------------------------------
    def _parts(self, s: Choice, v: int) -> tuple[float, float]:
        """Operator ``v``'s (cost, memory) under ``s``, without its edges."""
        k = s.index[v]
        c, m = float(self.node_costs[v][k]), float(self.node_memory[v][k])
        if self.own[v] is not None:
            c += float(self.own[v][0][k, s.own[v]])
            m += float(self.own[v][1][k, s.own[v]])
        return c, m

    def _group_parts(self, s: Choice):
        for g, j in zip(self.groups, s.groups):
            for v, c, m in g.members:
                yield float(c[s.index[v], j]), float(m[s.index[v], j])

    def cost(self, s: Choice) -> float:
        nodes = [self._parts(s, v)[0] for v in range(self.n)] + [c for c, _ in self._group_parts(s)]
        return total(nodes, (float(m[s.index[u], s.index[v]]) for (u, v), m in self.edge_costs.items()))

    def memory(self, s: Choice) -> float:
        return math.fsum([self._parts(s, v)[1] for v in range(self.n)] + [m for _, m in self._group_parts(s)])

    @property
    def least_memory(self) -> float:
        """The smallest memory of any solution: each operator its smallest
        (every block at its most memory-saving value for that operator: a
        lower bound)."""
        return math.fsum(self.least_by_operator())

    def least_by_operator(self) -> list[float]:
        """Each operator's smallest memory over its configurations and
        options (see :attr:`least_memory`)."""
        mins: dict = {}  # operators alike share their arrays: each is reduced once

        def row_min(a):
            if id(a) not in mins:
                mins[id(a)] = (a, a.min(axis=1))
            return mins[id(a)][1]

        blocks = [[] for _ in range(self.n)]
        for g in self.groups:
            for u, _, gm in g.members:
                blocks[u].append(gm)
        least, seen = [], {}
        for v in range(self.n):
            own = self.own[v][1] if self.own[v] is not None else None
            key = (id(self.node_memory[v]), id(own), tuple(id(a) for a in blocks[v]))
            if key not in seen:
                m = np.asarray(self.node_memory[v], float)
                if own is not None:
                    m = m + row_min(own)
                extra = 0.0
                for a in blocks[v]:
                    extra = extra + row_min(a)
                seen[key] = (self.node_memory[v], own, blocks[v], float((m + extra).min()))
            least.append(seen[key][3])
        return least

    def flat(self, s: Choice):
        """Per operator, its cost and memory for every (configuration, own
        value) with the blocks' values of ``s`` fixed: ``(K_v * J_v,)``
        arrays, and the position of ``s``'s choice in them, for the local
        repair."""
        costs, mems, pos, widths = [], [], [], []
        add_c = [0.0] * self.n
        add_m = [0.0] * self.n
        for g, j in zip(self.groups, s.groups):
            for v, c, m in g.members:
                add_c[v] = add_c[v] + c[:, j]
                add_m[v] = add_m[v] + m[:, j]
        for v in range(self.n):
            c = np.asarray(self.node_costs[v], float) + add_c[v]
            m = np.asarray(self.node_memory[v], float) + add_m[v]
            J = 1
            if self.own[v] is not None:
                oc, om = self.own[v]
                J = oc.shape[1]
                c = c[:, None] + oc
                m = m[:, None] + om
            costs.append(np.asarray(c).reshape(-1))
            mems.append(np.asarray(m).reshape(-1))
            widths.append(J)
            pos.append(s.index[v] * J + s.own[v])
        return costs, mems, pos, widths

    def unflat(self, pos, widths, s: Choice) -> Choice:
        return Choice(tuple(p // J for p, J in zip(pos, widths)), tuple(p % J for p, J in zip(pos, widths)),
                      s.groups)
