"""Computation graphs: one node per operator, one edge per tensor between two.

A graph is a networkx ``DiGraph`` whose nodes are numbered ``0..n-1`` in
creation order (for the built-in networks, the original tool's order) and
carry two attributes: ``op``, an :class:`Operator`, and ``reads``, the node
that writes each of its inputs (``None`` for a graph input).  An edge ``u -> v`` means
that ``v`` reads a tensor ``u`` writes; its attributes ``out`` and ``inp``
say which output of ``u`` and which input of ``v``.  When ``v`` reads several
outputs of ``u`` the edge keeps the last input position, the only one the
PaSE cost model charges.  Weights and the data fed to the network are graph
inputs: no node, no edge.

:class:`GraphBuilder` is how every graph is made: the built-in models
(``models/``) and the importers call it with operator kinds (``kinds/``).
Graph-level attributes: ``name``, ``cutoff`` (the smallest per-device extent
a split may leave), ``params`` (the model's parameters, e.g. batch and
width), ``expert`` (the hand-written baseline's recipe) and, for models that
name them, ``model_dims`` (letters split by Mesh-TensorFlow-style model
parallelism).  ``batch`` and ``width`` are kept at the top level too.  A
model read from a file has ``source`` (its file name, path and SHA-256);
``shared`` lists the weight inputs ``(node, position)`` that read a tensor
another operator already reads (tied embeddings), so that
:func:`parameter_count` counts it once.

Nothing here depends on the number of devices or on the hardware, so one
graph serves every ``p``; the models themselves are built in ``models/``.
Example::

    >>> from models import build_graph
    >>> g = build_graph("alexnet", batch=128)
    >>> g.nodes[0]["op"].name, g.nodes[0]["op"].space
    ('conv1', (128, 3, 55, 55, 11, 11, 96))
"""

from __future__ import annotations

from math import prod

from errors import InputError
from kinds import Kind, Operator, Ref, Tensor

__all__ = ["GraphBuilder", "Operator", "Tensor", "Ref", "operators", "parameter_count"]


class GraphBuilder:
    """Adds operators to a DiGraph in creation order and wires the edges.

        B = GraphBuilder("tiny", cutoff=1, batch=8)
        x = B.data((8, 16), "bk")
        y = B.add("fc", FC(units=4), x)
        g = B.graph
    """

    def __init__(self, name: str, cutoff: int, **attrs):
        import networkx as nx

        self.graph = nx.DiGraph(name=name, cutoff=cutoff, **attrs)
        self._names: set[str] = set()

    # -- graph inputs ------------------------------------------------------------------
    @staticmethod
    def data(shape, letters: str) -> Ref:
        """A tensor fed to the network (images, token ids)."""
        return Ref(None, 0, tuple(int(s) for s in shape), letters, "data")

    @staticmethod
    def weight(shape, letters: str) -> Ref:
        """A trained parameter read by an operator (e.g. an einsum's operand)."""
        return Ref(None, 0, tuple(int(s) for s in shape), letters, "weight")

    # -- operators ---------------------------------------------------------------------
    def add(self, name: str, kind: Kind, *inputs: Ref, shared: tuple[int, ...] = ()):
        """Add the operator ``kind`` makes of ``inputs``; return its output
        (or a tuple of them when it has several).  ``shared``: positions of
        weight inputs that another operator also reads (a tied embedding)."""
        if name in self._names:
            raise InputError(f"two operators are named {name!r}")
        op, out_letters = kind.build(name, tuple(inputs))
        v = self.graph.number_of_nodes()
        for ref, t in zip(inputs, op.inputs):
            if ref.shape != t.shape:
                raise InputError(f"{name}: input shape {ref.shape} is not the {t.shape} it needs")
        for i in shared:
            if not 0 <= i < len(op.inputs) or op.inputs[i].role != "weight":
                raise InputError(f"{name}: input {i} is not a weight it could share")
            self.graph.graph.setdefault("shared", []).append((v, i))
        self.graph.add_node(v, op=op, reads=tuple(ref.node for ref in inputs))
        self._names.add(name)
        for pos, ref in enumerate(inputs):
            if ref.node is not None:  # later inputs overwrite: the last one is charged
                self.graph.add_edge(ref.node, v, out=ref.index, inp=pos)
        outs = tuple(Ref(v, i, t.shape, letters) for i, (t, letters) in enumerate(zip(op.outputs, out_letters)))
        return outs[0] if len(outs) == 1 else outs

    def reshape(self, name: str, x: Ref, shape, letters: str) -> Ref:
        """A reshape as two operators: Ravel to a flat tensor (``name/ravel``),
        then Unravel to ``shape`` with ``letters`` (``name/unravel``)."""
        from kinds.shape import Ravel, Unravel

        if prod(x.shape) != prod(shape):
            raise InputError(f"{name}: cannot reshape {x.shape} to {tuple(shape)}")
        flat = self.add(f"{name}/ravel", Ravel(), x)
        return self.add(f"{name}/unravel", Unravel(tuple(shape), letters), flat)


def operators(g) -> list[Operator]:
    """The operators of a graph in node-id order."""
    return [g.nodes[v]["op"] for v in range(g.number_of_nodes())]


def parameter_count(g) -> int:
    """Trained parameters: the elements of every weight the operators read,
    each tensor once (a weight listed in ``shared`` is counted where it is
    first read)."""
    shared = set(g.graph.get("shared", ()))
    return sum(t.size for v, op in enumerate(operators(g)) for i, t in enumerate(op.inputs)
               if t.role == "weight" and (v, i) not in shared)
