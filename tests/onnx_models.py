"""Test helper: write ONNX files with ``onnx.helper``.

:func:`export` writes a built-in CNN (AlexNet, ResNet-101, Inception-v3) as
an inference graph of standard ONNX operators, the way a framework exports
it: exported at batch 1, a convolution or Gemm followed by one Relu per
pointwise operation, batch normalisation with its running statistics, the
classifier's Softmax as the output, and the weights kept outside the file
(in a file that does not exist: the importer must not need it).
:func:`model` builds small graphs node by node.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from graph import operators

OPSET = 17


def _weight(name: str, shape) -> TensorProto:
    """A float tensor whose data lives in an external file."""
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(shape))
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", "0"), ("length", str(4 * int(np.prod(shape))))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def export(g, path, batch: int = 1) -> None:
    """Write the built-in graph ``g`` as ONNX (see the module docstring)."""
    ops = operators(g)
    nodes, weights = [], []
    out = {}  # node id -> the ONNX tensor it writes
    preds = {v: sorted(g.predecessors(v), key=lambda u: g.edges[u, v]["inp"]) for v in g}

    def relus(name, x, pw):
        for i in range(pw):
            nodes.append(helper.make_node("Relu", [x], [f"{name}/relu{i}"], name=f"{name}/relu{i}"))
            x = f"{name}/relu{i}"
        return x

    image = ops[0].inputs[0].shape
    for v, op in enumerate(ops):
        k, name = op.kind, op.name
        ins = [out[u] for u in preds[v]] or ["image"]
        y = name
        if k.name == "Conv":
            w = _weight(f"{name}.weight", op.inputs[1].shape)
            weights.append(w)
            args = ins[:1] + [w.name]
            if k.bias:
                weights.append(_weight(f"{name}.bias", (k.out,)))
                args.append(f"{name}.bias")
            nodes.append(helper.make_node("Conv", args, [y], name=name, kernel_shape=list(k.kernel),
                                          strides=list(k.stride), pads=list(k.pad) * 2, group=k.groups))
            y = relus(name, y, k.pw)
        elif k.name == "Pooling":
            nodes.append(helper.make_node("MaxPool", ins, [y], name=name, kernel_shape=list(k.kernel),
                                          strides=list(k.stride), pads=list(k.pad) * 2))
        elif k.name == "Norm":
            c = op.space[1]
            stats = [_weight(f"{name}.{s}", (c,)) for s in ("scale", "shift", "mean", "var")]
            weights.extend(stats)
            nodes.append(helper.make_node("BatchNormalization", ins + [t.name for t in stats], [y], name=name))
        elif k.name == "Ravel":
            y = ins[0]  # the Reshape is written with its Unravel
        elif k.name == "Unravel":
            base = name.rsplit("/", 1)[0]
            shape = helper.make_tensor(f"{base}.shape", TensorProto.INT64, [len(k.shape)], [batch, *k.shape[1:]])
            weights.append(shape)
            nodes.append(helper.make_node("Reshape", [ins[0], shape.name], [y], name=base))
        elif k.name == "FC":
            w = _weight(f"{name}.weight", (k.units, op.inputs[1].shape[0]))
            weights.append(w)
            args = ins + [w.name] + ([f"{name}.bias"] if k.bias else [])
            if k.bias:
                weights.append(_weight(f"{name}.bias", (k.units,)))
            nodes.append(helper.make_node("Gemm", args, [y], name=name, transB=1))
            y = relus(name, y, k.pw)
        elif k.name == "Elementwise":
            nodes.append(helper.make_node("Add", ins, [y], name=name))
            y = relus(name, y, k.pw)
        elif k.name == "ReduceMean":
            nodes.append(helper.make_node("ReduceMean", ins, [y], name=name, axes=list(k.axes), keepdims=0))
        elif k.name == "Concat":
            nodes.append(helper.make_node("Concat", ins, [y], name=name, axis=k.axis))
        elif k.name == "SoftmaxCrossEntropy":
            nodes.append(helper.make_node("Softmax", ins, [y], name=name, axis=-1))
        else:
            raise ValueError(f"no ONNX form for {k.name}")
        out[v] = y
    last = out[len(ops) - 1]
    graph = helper.make_graph(nodes, g.graph["name"],
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, *image[1:]])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, None)], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), str(path))


def model(path, nodes, inputs, outputs, initializers=(), opset: int = OPSET) -> str:
    """Write a small model: ``inputs``/``outputs`` as ``(name, shape)`` (a
    shape of ints and symbol names; floats unless the name starts with
    ``ids``), ``initializers`` as ``(name, array or shape)``."""

    def info(name, shape):
        dtype = TensorProto.INT64 if name.startswith("ids") else TensorProto.FLOAT
        return helper.make_tensor_value_info(name, dtype, shape)

    inits = []
    for name, value in initializers:
        if isinstance(value, np.ndarray):
            inits.append(onnx.numpy_helper.from_array(value, name))
        else:
            inits.append(_weight(name, value))
    graph = helper.make_graph(nodes, "test", [info(*i) for i in inputs], [info(*o) for o in outputs], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return str(path)
