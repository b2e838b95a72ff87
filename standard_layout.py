"""The layout of a model for the standard search's counting
(:mod:`standard_costs`): its operators' classes (the operator up to
names, and its context), its edges' classes, and, for any range of
operators (a pipeline stage), how many of each it holds, which transient
groups, expert blocks and repeated blocks, and what it sends on.  A long
model's layout can be built from its first three blocks
(:func:`stretch`)."""

from __future__ import annotations

import numpy as np

from frameworks.host import in_expert_blocks

__all__ = ["Layout", "stretch"]


class Layout:
    """One graph (the model at a micro-batch): its operators' classes, its
    edges' classes, and the sums of ranges of operators (stages).

    Built from the whole graph, or from the model with only its first
    blocks (``blocks``: how many the whole model has): every block beyond
    the first and before the last is then the second one again (the
    same classes and edges, block after block), which is what the whole
    graph holds (:meth:`Costing.layout` checks its chain against the whole
    model's)."""

    def __init__(self, g, blocks: int | None = None):
        from blocks import find_chains
        from graph import operators
        from options import contexts

        self.g = g
        self.short = blocks is not None
        ops = operators(g)
        chains = find_chains(g)
        chain = max(chains, key=lambda c: c.count * c.size) if chains else None
        ctx = contexts(g, chains)
        ids: dict = {}
        node_class = []
        self.reps = []  # per class: (operator, context)
        for op, c in zip(ops, ctx):
            key = (op, c.key)
            if key not in ids:
                ids[key] = len(ids)
                self.reps.append((op, c))
            node_class.append(ids[key])
        self.nc = len(self.reps)
        edges = sorted((u, v, d["out"], d["inp"]) for u, v, d in g.edges(data=True))
        eids: dict = {}
        edge_class = []
        self.edge_reps = []  # per class: (source class, output, target class, input)
        for u, v, o, i in edges:
            key = (node_class[u], o, node_class[v], i)
            if key not in eids:
                eids[key] = len(eids)
                self.edge_reps.append(key)
            edge_class.append(eids[key])
        self.ne = len(self.edge_reps)
        sizes = [ops[u].outputs[o].size for u, _, o, _ in edges]
        group = [("block", c.block) if c.block is not None else ("op", v) for v, c in enumerate(ctx)]
        edges = [(u, v, o, e, z) for (u, v, o, _), e, z in zip(edges, edge_class, sizes)]
        self.chain = chain
        from pipeline import block_layers

        self.layers = block_layers(g, chain) if chain is not None else 1  # read once: every point's split asks it
        if blocks is not None and (chain is None or chain.count != 3 or blocks < 3):
            raise ValueError("the model's first layers are not three blocks")
        if blocks is not None:  # the blocks beyond the second and before the last, added
            from dataclasses import replace as copy

            node_class, edges, group = stretch(chain, blocks, node_class, edges, group)
            self.chain = copy(chain, count=blocks)
        self.n = len(node_class)
        self.node_class = np.asarray(node_class, dtype=np.intp)
        self.eu = np.asarray([e[0] for e in edges], dtype=np.intp)
        self.ev = np.asarray([e[1] for e in edges], dtype=np.intp)
        self.eout = np.asarray([e[2] for e in edges], dtype=np.intp)
        self.edge_class = np.asarray([e[3] for e in edges], dtype=np.intp)
        self.esize = np.asarray([e[4] for e in edges], dtype=np.int64)
        # the groups whose transients add up (a block; an operator outside blocks alone), by kind
        groups: dict = {}
        for v, key in enumerate(group):
            groups.setdefault(key, []).append(v)
        kinds: dict = {}
        first, group_kind = [], []
        for members in groups.values():
            counts = np.bincount(self.node_class[members], minlength=self.nc)
            group_kind.append(kinds.setdefault(counts.tobytes(), len(kinds)))
            first.append(members[0])
        self.kinds = np.zeros((len(kinds), self.nc))
        for key, k in kinds.items():
            self.kinds[k] = np.frombuffer(key, dtype=np.intp)
        self.group_kind = np.asarray(group_kind, dtype=np.intp)
        self.group_first = np.asarray(first, dtype=np.intp)
        # whether each node is in a block that dispatches tokens to experts (frameworks.host), and is a dispatch
        experts = {c for c, (op, _) in enumerate(self.reps) if op.kind.name == "Dispatch"}
        dispatches = [c in experts for c in node_class]
        self.moe = np.asarray(in_expert_blocks(dispatches, [k if k[0] == "block" else None for k in group]))
        self.dispatch = np.asarray(dispatches, dtype=bool) & self.moe
        self.moe_classes = {c for c, inside in zip(node_class, self.moe) if inside}
        # the repeated blocks: their operators' count by class and their first and last operators (their collectives
        # pooled under their passes, cost.evaluate.block_credits)
        blocks = [members for key, members in groups.items() if key[0] == "block"]
        self.block_cc = np.zeros((len(blocks), self.nc))
        for i, members in enumerate(blocks):
            self.block_cc[i] = np.bincount(self.node_class[members], minlength=self.nc)
        self.block_lo = np.asarray([m[0] for m in blocks], dtype=np.intp)
        self.block_hi = np.asarray([m[-1] + 1 for m in blocks], dtype=np.intp)
        self.block_moe = np.asarray([bool(self.moe[m].any()) for m in blocks], dtype=bool)
        # blocks alike (the same classes) save alike: each block's kind, and each kind's count by class
        self.block_kinds, self.block_kind = (np.unique(self.block_cc, axis=0, return_inverse=True) if len(blocks)
                                             else (np.zeros((0, self.nc)), np.zeros(0, dtype=np.intp)))
        self.block_kind = np.asarray(self.block_kind, dtype=np.intp).reshape(-1)
        self._ranges: dict = {}
        self._moe: dict = {}
        self._blocks: dict = {}

    def experts(self, lo: int, hi: int):
        """The operators ``[lo, hi)`` in blocks that dispatch tokens to
        experts: their count by class, their edges' count by class, and how
        many dispatches (expert layers) they hold."""
        key = (lo, hi)
        if key not in self._moe:
            mine = self.moe[lo:hi]
            cc = np.bincount(self.node_class[lo:hi][mine], minlength=self.nc).astype(float)
            sel = (self.eu >= lo) & (self.eu < hi) & (self.ev >= lo) & (self.ev < hi) & self.moe[self.eu]
            ec = np.bincount(self.edge_class[sel], minlength=self.ne).astype(float)
            self._moe[key] = (cc, ec, int(self.dispatch[lo:hi].sum()))
        return self._moe[key]

    def block_savings(self, records, contention: float = 0.0) -> np.ndarray:
        """What each kind of repeated block saves pooling its overlapped
        collectives under its passes (:func:`cost.evaluate.pooled_saving`,
        with the framework's ``contention``), from each class's figures of
        :data:`cost.evaluate.RECORD` (``records``: classes x rows)."""
        from cost.evaluate import pooled_saving

        return pooled_saving(self.block_kinds @ records, contention) if len(self.block_kinds) else np.zeros(0)

    def pooled(self, lo: int, hi: int, savings, experts: bool = False) -> float:
        """What the repeated blocks among the operators ``[lo, hi)`` save,
        each kind's :meth:`block_savings` (``savings``); with ``experts``,
        the blocks that dispatch tokens to experts alone."""
        key = (lo, hi, experts)
        if key not in self._blocks:  # the blocks within the range (a standard stage holds whole blocks), by kind
            inside = (self.block_lo >= lo) & (self.block_hi <= hi)
            mine = self.block_kind[inside & self.block_moe if experts else inside]
            self._blocks[key] = np.bincount(mine, minlength=len(self.block_kinds)).astype(float)
        return float(self._blocks[key] @ savings) if len(savings) else 0.0

    def summary(self, lo: int, hi: int):
        """The operators ``[lo, hi)``: their count by class, their edges'
        count by class, the kinds of transient groups they hold, and the
        elements they send to later operators."""
        key = (lo, hi)
        if key not in self._ranges:
            cc = np.bincount(self.node_class[lo:hi], minlength=self.nc).astype(float)
            inside = (self.eu >= lo) & (self.eu < hi) & (self.ev >= lo) & (self.ev < hi)
            ec = np.bincount(self.edge_class[inside], minlength=self.ne).astype(float)
            kinds = np.unique(self.group_kind[(self.group_first >= lo) & (self.group_first < hi)])
            out = (self.eu >= lo) & (self.eu < hi) & (self.ev >= hi)
            pairs = np.unique(np.stack([self.eu[out], self.eout[out]], axis=1), axis=0) if out.any() else ()
            sizes = {(int(u), int(o)): int(s) for u, o, s in zip(self.eu[out], self.eout[out], self.esize[out])}
            crossing = float(sum(sizes[(int(u), int(o))] for u, o in pairs))
            self._ranges[key] = (cc, ec, self.kinds[kinds], crossing)
        return self._ranges[key]


def stretch(chain, blocks: int, node_class, edges, group):
    """The classes, edges ``(source, target, output, class, elements)`` and
    transient groups of a model of ``blocks`` blocks, from those of the
    same model with the three blocks of ``chain``: the operators before the
    chain, its first block, the second block ``blocks - 2`` times, its last
    block, and what follows (node ids shifted); each block's edges, and
    those from one block to the next, as in the blocks they repeat."""
    k, size, start = chain.count, chain.size, chain.start
    extra = (blocks - k) * size  # nodes added

    def where(v):  # -1 before the chain, the block, or k after it
        return -1 if v < start else k if v >= chain.stop else (v - start) // size

    def moved(v, to):  # node v of its block (or after the chain), in block ``to`` of the long model
        b = where(v)
        return v + extra if b == k else v if b < 0 else v + (to - b) * size

    def spread(b):  # the blocks of the long model block ``b`` of the short one stands for
        return [0] if b == 0 else range(1, blocks - 1) if b == 1 else [blocks - 1]

    cls = list(node_class[:start + size])
    for _ in range(blocks - 2):
        cls += node_class[start + size:start + 2 * size]
    cls += node_class[chain.stop - size:]
    out = []
    for u, v, o, e, z in edges:
        bu, bv = where(u), where(v)
        if bu == bv and 0 <= bu < k:  # inside a block
            out += [(moved(u, t), moved(v, t), o, e, z) for t in spread(bu)]
        elif 0 <= bu < k and bv == bu + 1 < k:  # from one block to the next: the last one's, else the first's
            targets = [blocks - 2] if bu == k - 2 and bu > 0 else range(0, blocks - 2) if bu == 0 else []
            out += [(moved(u, t), moved(v, t + 1), o, e, z) for t in targets]
        else:  # before or after the chain, into its first block, out of its last
            out.append((moved(u, blocks - 1 if bu == k - 1 else 0), moved(v, 0), o, e, z))
    grp = []
    for v in range(len(cls)):
        if v < start:
            grp.append(group[v])
        elif v >= start + blocks * size:
            grp.append(group[v - extra])
        else:
            grp.append(("block", ("stretched", (v - start) // size)))
    return cls, out, grp
