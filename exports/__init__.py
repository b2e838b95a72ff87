"""What a result is written as: one registry of formats, by name and by suffix.

A :class:`Format` renders a :class:`result.Result` (or, for ``dot``, the
graph) as text.  ``--output PATH`` picks the format of a result by the
path's suffix (:func:`for_path`); the formats are:

* ``json`` (``.json``): the plan file (:mod:`plan_file`), which
  ``--evaluate`` reads back;
* ``csv`` (``.csv``): one row per layer (:data:`LAYER_KEYS`);
* ``dot`` (``.dot``): the graph in Graphviz format (``-d``).

Sweeps write their tables with ``studies.tables`` (``.csv``, ``.json``,
``.md``): tables of many results, not one.  What a training framework
reads (``--export``: torchtitan, Megatron-LM, JAX, DTensor) is
:mod:`exports.frameworks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Format", "FORMATS", "for_path", "LAYER_KEYS", "render_json", "render_csv", "render_dot"]

LAYER_KEYS = ("id", "name", "op", "dims", "space", "config", "devices", "compute", "communication", "cost",
              "memory", "weights", "activations")


@dataclass(frozen=True)
class Format:
    """One way to write a result: ``render(result, graph) -> text``;
    ``suffix`` the file name ending it is chosen by; ``reads``: what it
    renders (``result`` or ``graph``)."""

    name: str
    suffix: str
    render: Callable
    description: str
    reads: str = "result"


def render_json(r, g=None) -> str:
    """The plan file (see :mod:`plan_file`)."""
    from plan_file import dumps, record

    return dumps(record(r)) + "\n"


def render_csv(r, g=None) -> str:
    """One row per layer (:data:`LAYER_KEYS`)."""
    import csv
    import io
    import json

    from plan_file import _layer_record

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(LAYER_KEYS)
    for layer in r.layers:
        rec = _layer_record(layer)
        w.writerow([json.dumps(rec[k]) if isinstance(rec[k], list) else rec[k] for k in LAYER_KEYS])
    return out.getvalue()


#: the first line of every graph file the tool writes: ``-d`` replaces a ``graph.dot`` that starts so, and no other
DOT_MARK = "// a model's graph, written by PaSE's scheduler.py"


def render_dot(r, g) -> str:
    """The graph in Graphviz format: one node per operator, one edge per
    tensor, after the line :data:`DOT_MARK`."""
    import pydot

    dot = pydot.Dot(g.graph["name"], graph_type="digraph", rankdir="TB")
    dot.set_node_defaults(shape="box", fontname="Helvetica", fontsize="10")
    dot.set_edge_defaults(fontname="Helvetica", fontsize="9")
    for v in sorted(g.nodes):
        op = g.nodes[v]["op"]
        space = " ".join(f"{d}={s}" for d, s in zip(op.dims, op.space))
        name = op.name.replace("\\", "\\\\").replace('"', '\\"')  # drawn as written, not as escapes
        dot.add_node(pydot.Node(str(v), label=f'"{v}: {name}\\n{op.kind.name}\\n{space}"'))
    for u, v, d in sorted(g.edges(data=True)):
        shape = "x".join(map(str, g.nodes[u]["op"].outputs[d["out"]].shape))
        dot.add_edge(pydot.Edge(str(u), str(v), label=f'"{shape}"'))
    return DOT_MARK + "\n" + dot.to_string()


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("json", ".json", render_json, "the plan file: every figure, read back by --evaluate"),
    Format("csv", ".csv", render_csv, "one row per layer"),
    Format("dot", ".dot", render_dot, "the graph in Graphviz format", reads="graph"),
)}


def for_path(path: str, reads: str = "result") -> Format | None:
    """The format of ``reads`` whose suffix ``path`` ends with (any case)."""
    low = path.lower()
    return next((f for f in FORMATS.values() if f.reads == reads and low.endswith(f.suffix)), None)
