"""Reading an ONNX file: parsing it, ONNX's shape inference, the nodes the
outputs depend on in order, and the data inputs."""

from __future__ import annotations

import heapq

from models.files import ModelFileError
from models.registry import MAX_SIZE


def _parse(path: str, data: bytes):
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:120]
        raise ModelFileError(f"{path}: not an ONNX model (cannot parse it: {first})") from None
    if not model.graph.node or not model.opset_import or model.ir_version < 1:
        raise ModelFileError(f"{path}: not an ONNX model (no graph of nodes in it)")
    _check_text(path, model.graph)
    return model


def _check_text(path: str, graph) -> None:
    """Refuse what a damaged file gives the graph: a name, or a string
    attribute, that is not UTF-8 text, or an attribute of no type."""
    from onnx import AttributeProto

    def refuse(what):
        raise ModelFileError(f"{path}: {what} is not UTF-8 text (a damaged file?)")

    for kind, values in (("input", graph.input), ("output", graph.output), ("weight", graph.initializer),
                         ("tensor", graph.value_info)):
        for v in values:
            if not isinstance(v.name, str):
                refuse(f"the name of a graph {kind}")
    for i, node in enumerate(graph.node):
        if not all(isinstance(x, str) for x in (node.op_type, node.name, node.domain, *node.input, *node.output)):
            refuse(f"the operator type or a name of node {i}")
        for a in node.attribute:
            if not isinstance(a.name, str):
                refuse(f"an attribute's name in node {i} ({node.op_type})")
            if a.type == AttributeProto.UNDEFINED:
                raise ModelFileError(f"{path}: attribute {a.name!r} of node {i} ({node.op_type}) has no type "
                                     "(a damaged file?)")
            for text in ([a.s] if a.type == AttributeProto.STRING else
                         a.strings if a.type == AttributeProto.STRINGS else ()):
                try:
                    text.decode("utf-8")
                except UnicodeDecodeError:
                    refuse(f"attribute {a.name!r} of node {i} ({node.op_type})")


def _infer(path: str, model) -> dict:
    """ONNX's shape inference over the file as it is: the shapes it knows."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as e:  # onnx raises several types (InferenceError, ValidationError, RuntimeError)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ModelFileError(f"{path}: shape inference fails: {first[:200]}") from None
    shapes = {}
    g = inferred.graph
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in t.shape.dim)
    return shapes


def _live(path: str, graph) -> tuple[list, set]:
    """The nodes the graph's outputs depend on, each after the nodes it
    reads (in the file's order where that allows), and the tensors they read."""
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    need = {o.name for o in graph.output}
    live, stack = set(), [producer[t] for t in need if t in producer]
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            need.update(t for t in graph.node[i].input if t)
            stack.extend(producer[t] for t in graph.node[i].input if t in producer)
    readers, blocked = {}, {}
    for i in sorted(live):
        waits = {producer[t] for t in graph.node[i].input if t in producer}
        blocked[i] = len(waits)
        for j in waits:
            readers.setdefault(j, []).append(i)
    ready = [i for i in sorted(live) if not blocked[i]]
    heapq.heapify(ready)
    order = []
    while ready:  # the earliest node in the file whose inputs are all written
        i = heapq.heappop(ready)
        order.append((i, graph.node[i]))
        for j in readers.get(i, ()):
            blocked[j] -= 1
            if not blocked[j]:
                heapq.heappush(ready, j)
    if len(order) < len(live):
        raise ModelFileError(f"{path}: the graph has a cycle")
    return order, need


def _data_inputs(path, graph):
    """``(name, dims)`` of the data inputs, a dim an int or a symbol's name."""
    inits = {t.name for t in graph.initializer}
    out = []
    for inp in graph.input:
        if inp.name in inits:
            continue
        if not inp.type.HasField("tensor_type") or not inp.type.tensor_type.HasField("shape"):
            raise ModelFileError(f"{path}: input {inp.name!r} is not a tensor of known rank")
        dims = []
        for axis, d in enumerate(inp.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                dims.append(d.dim_param or "?")
            elif d.dim_value < 1:  # an empty tensor: nothing to plan
                raise ModelFileError(f"{path}: input {inp.name!r} has a dimension of size {d.dim_value} (axis {axis})")
            elif d.dim_value > MAX_SIZE:  # the bound the flags have
                raise ModelFileError(f"{path}: input {inp.name!r} has a dimension of {d.dim_value:,} (axis {axis}); "
                                     f"the tool plans at most {MAX_SIZE:,}")
            else:
                dims.append(d.dim_value)
        out.append((inp.name, dims))
    return out
