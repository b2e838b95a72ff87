"""The collectives of a compiled XLA program (its HLO text): each
all-reduce, all-gather, reduce-scatter, all-to-all and collective-permute
with its replica groups, the elements it moves and the layer it belongs to
(the ``jax.named_scope`` of the operator that issued it), and the tables
in which ``jax_validate.py`` sets them beside the cost model's prediction.  Plain
text parsing: no JAX needed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["Collective", "replica_groups", "collectives", "layer_of", "comm_table", "locality_table", "fmt"]


_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_INSTR = re.compile(r"%(?P<id>[\w.\-]+)\s*=\s*(?P<shape>\(.*?\)|\w+\[[\d,]*\](?:\{[^}]*\})?)\s+(?P<kind>"
                    + "|".join(_KINDS) + r")(?P<start>-start)?\(")
_ARRAY = re.compile(r"\b(?:pred|[sufc]\d+|bf16)\[([\d,]*)\]")
_OPNAME = re.compile(r'op_name="([^"]*)"')
_GTE = re.compile(r"get-tuple-element\(%(?P<src>[\w.\-]+)\), index=(?P<i>\d+)")


@dataclass(frozen=True)
class Collective:
    kind: str
    elements: int  # of the result (for -start forms: the last array, the output)
    groups: tuple[tuple[int, ...], ...]  # replica groups (collective-permute: source-target pairs)
    op_name: str

    @property
    def group(self) -> int:
        """Devices per replica group."""
        return len(self.groups[0]) if self.groups else 1

    @property
    def traffic(self) -> float:
        """Elements one device sends over a ring for this collective."""
        g, w = self.group, self.elements
        if g <= 1 and self.kind != "collective-permute":
            return 0.0
        return {
            "all-reduce": 2.0 * (g - 1) / g * w,
            "all-gather": (g - 1) / g * w,
            "reduce-scatter": (g - 1) * w,
            "all-to-all": (g - 1) / g * w,
            "collective-permute": float(w),
        }[self.kind]

    def across_nodes(self, per_node: int) -> bool:
        """Whether a group joins devices of different nodes (devices numbered
        node-major: device d sits on node d // per_node)."""
        return any(len({d // per_node for d in group}) > 1 for group in self.groups)

    def across_share(self, per_node: int) -> float:
        """The share of this collective's traffic that crosses nodes: of a
        ring over each group in its listed order (all-reduce, all-gather,
        reduce-scatter), the links between nodes; of an all-to-all, the
        pairs on different nodes; of a permute, the pairs that cross."""
        def node(d):
            return d // per_node

        crossing = total = 0
        for group in self.groups:
            if self.kind == "collective-permute":
                pairs = [tuple(group)]
            elif self.kind == "all-to-all":
                pairs = [(a, b) for a in group for b in group if a != b]
            else:
                pairs = list(zip(group, group[1:] + group[:1])) if len(group) > 1 else []
            crossing += sum(node(a) != node(b) for a, b in pairs)
            total += len(pairs)
        return crossing / total if total else 0.0


def replica_groups(line: str, p: int) -> tuple[tuple[int, ...], ...]:
    """The device groups of one HLO collective, from any of XLA's spellings:
    explicit ``{{0,1},{2,3}}``, iota ``[2,4]<=[4,2]T(1,0)``, mesh axes
    ``mesh['axis_0'=4,'axis_1'=2] {'axis_1'}``, or none (every device);
    a collective-permute's source-target pairs."""
    import numpy as np

    m = re.search(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}", line)
    if m:
        return tuple(tuple(int(x) for x in pair.split(",")) for pair in re.findall(r"\{(\d+,\d+)\}", m.group(1)))
    m = re.search(r"replica_groups=\{((?:\{[\d,]*\},?)+)\}", line)
    if m:
        return tuple(tuple(int(x) for x in grp.split(",") if x) for grp in re.findall(r"\{([\d,]*)\}", m.group(1)))
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", line)
    if m:
        ids = np.arange(p).reshape([int(d) for d in m.group(3).split(",")])
        if m.group(4):
            ids = ids.transpose([int(d) for d in m.group(4).split(",")])
        return tuple(map(tuple, ids.reshape(int(m.group(1)), int(m.group(2))).tolist()))
    m = re.search(r"replica_groups=mesh\[([^\]]*)\](?:\s*\{([^}]*)\})?", line)
    if m:
        axes = [(k.strip("' "), int(v)) for k, v in (kv.split("=") for kv in m.group(1).split(","))]
        names = [a for a, _ in axes]
        chosen = [names.index(a.strip("' ")) for a in (m.group(2) or "").split(",") if a.strip()]
        chosen = chosen or list(range(len(axes)))
        ids = np.arange(p).reshape([n for _, n in axes])
        rest = [i for i in range(len(axes)) if i not in chosen]
        size = math.prod(axes[i][1] for i in chosen)
        return tuple(map(tuple, ids.transpose(rest + chosen).reshape(-1, size).tolist()))
    return (tuple(range(p)),)


def collectives(hlo: str, p: int) -> list[Collective]:
    """The collectives of a compiled HLO module's text, one per array: XLA
    merges the gradient all-reduces of several layers into one instruction
    with a tuple result; its parts keep their own op_name on the
    get-tuple-element that reads them."""
    lines = hlo.splitlines()
    part_names = {}
    for line in lines:
        m = _GTE.search(line)
        name = _OPNAME.search(line)
        if m and name:
            part_names[(m.group("src"), int(m.group("i")))] = name.group(1)
    out = []
    for line in lines:
        m = _INSTR.search(line)
        if not m:
            continue
        arrays = [math.prod(int(d) for d in dims.split(",") if d) for dims in _ARRAY.findall(m.group("shape"))]
        name = _OPNAME.search(line)
        op_name = name.group(1) if name else ""
        groups = replica_groups(line, p)
        if m.group("start") or len(arrays) == 1:
            out.append(Collective(m.group("kind"), arrays[-1], groups, op_name))
            continue
        for i, n in enumerate(arrays):
            out.append(Collective(m.group("kind"), n, groups, part_names.get((m.group("id"), i), op_name)))
    return out


def layer_of(op_name: str, names: list[str]) -> str:
    """The graph operator an HLO instruction came from (by its named scope)."""
    for name in names:  # longest first
        if re.search(r"(?:^|[/(])" + re.escape(name) + r"(?:$|[/)])", op_name):
            return name
    return "(other)"


# -- tables: the model beside XLA -----------------------------------------------------


def fmt(x: float) -> str:
    """A figure of a table: three significant digits, zero as 0."""
    return "0" if x == 0 else f"{x:.3g}"


def comm_table(comm: dict, markdown: bool) -> str:
    meas, pred = comm["measured"], comm["predicted"]
    rows = []
    for name in list(pred) + ["(other)"]:
        m = meas.get(name, 0.0)
        own, edges = pred.get(name, (0.0, 0.0))
        if m == 0 and own + edges == 0:
            continue
        ratio = "-" if own + edges == 0 else f"{m / (own + edges):.2f}"
        rows.append([name, fmt(own), fmt(edges), fmt(m), ratio])
    tm, to, te = sum(meas.values()), sum(o for o, _ in pred.values()), sum(e for _, e in pred.values())
    rows.append(["total", fmt(to), fmt(te), fmt(tm), f"{tm / (to + te):.2f}" if to + te else "-"])
    from table import render

    return render(["layer", "model: layer", "model: edges in", "XLA", "XLA / model"], rows, markdown)


def locality_table(comm: dict, markdown: bool) -> str:
    """Per layer: elements moved inside a node and between nodes, cost model
    (hierarchical all-reduces) beside XLA (each collective's traffic split by
    the share of its ring's links, or of its pairs, that join two nodes)."""
    from table import render

    meas, pred = comm["locality"], comm["predicted_locality"]
    rows = []
    for name in list(pred) + ["(other)"]:
        mi, ma = meas.get(name, (0.0, 0.0))
        pi, pa = pred.get(name, (0.0, 0.0))
        if mi + ma + pi + pa > 0:
            rows.append([name, fmt(pi), fmt(pa), fmt(mi), fmt(ma)])
    tot = [sum(x[i] for x in pred.values()) for i in (0, 1)] + [sum(x[i] for x in meas.values()) for i in (0, 1)]
    rows.append(["total"] + [fmt(x) for x in tot])
    return render(["layer", "model: inside", "model: across", "XLA: inside", "XLA: across"], rows, markdown)
