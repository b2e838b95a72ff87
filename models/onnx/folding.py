"""Constants and data preparation folded away: nodes whose inputs are all constants, or the network's inputs alone, never become operators."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from models.onnx.values import (
    ACTIVATIONS,
    ARITHMETIC,
    NUMPY,
    PREDICATES,
    RESHAPES,
    SMALL,
    VANISH,
    Unsupported,
    Val,
    _axis,
    _broadcast,
    _data_letters,
    _dtype,
    _reshape_letters,
    _tensor_value,
)


class Folding:
    """Mixin of :class:`models.onnx.importer.Importer` (see the module docstring)."""

    def constant(self, node, a) -> Val:
        if "value" in a:
            t = a["value"]
            return Val(tuple(t.dims), _tensor_value(t), key=node.output[0])
        for k, dtype in (("value_float", np.float32), ("value_int", np.int64), ("value_floats", np.float32),
                         ("value_ints", np.int64)):
            if k in a:
                arr = np.asarray(a[k], dtype=dtype)
                return Val(arr.shape, arr)
        raise Unsupported("holding a sparse tensor or strings")

    def shape_of(self, op, a, h) -> Val:
        shape = tuple(h.shape)
        if op == "Size":
            return Val((), np.asarray(math.prod(shape), dtype=np.int64))
        r = len(shape)
        start, end = (max(0, min(r, x + r if x < 0 else x)) for x in (a.get("start", 0), a.get("end", r)))
        arr = np.asarray(shape[start:end], dtype=np.int64)
        return Val(arr.shape, arr)

    def fold(self, node, op, a, ins) -> list:
        """A node whose inputs are constants or the network's inputs alone:
        computed when small, else only its shape; never an operator."""
        self.current = node
        present = [h for h in ins if h is not None]
        data = any(h.data for h in present)
        key = next((h.key for h in present), "")
        outs = len(node.output)
        if op in VANISH:
            x = ins[0]
            value = x.value.astype(_dtype(a["to"])) if op == "Cast" and x.known() else x.value
            return [replace(x, value=value)] + [Val(x.shape, None, x.data)] * (outs - 1)
        if op == "ConstantOfShape":
            shape = tuple(self.values(ins[0], "shape"))
            t = a.get("value")
            fill = _tensor_value(t) if t is not None else np.zeros(1, np.float32)
            value = np.full(shape, fill.reshape(-1)[0], fill.dtype) if math.prod(shape) <= SMALL else None
            return [Val(shape, value, key=node.output[0])]
        known = all(h.known() for h in present)
        if known and not data:
            shapes = self.result_shapes(node, op, a, ins)  # from the shapes first: never an array beyond SMALL
            if any(math.prod(shape) > SMALL for shape in shapes):
                return [Val(tuple(shape), None, key=key) for shape in shapes]
            results = self.compute(node, op, a, ins)
            return [Val(np.shape(v), v if np.size(v) <= SMALL else None, key=key) for v in results]
        shapes = self.fold_shape(op, a, ins)
        if shapes is not None:
            return [Val(shape, None, data, key, bax) for shape, bax in
                    (shapes if isinstance(shapes, list) else [shapes])]
        if data:
            raise Unsupported("on the network's inputs")
        shapes = [self.inferred.get(o) for o in node.output]
        if any(s is None for s in shapes):
            raise Unsupported("on weights of unknown shape")
        return [Val(tuple(s), None, key=key) for s in shapes]

    def fold_shape(self, op, a, ins):
        """``(shape, sample axis)`` of a node on values whose elements are
        not all known, for the ops that need no elements (a list of them for
        a Split); else ``None``."""
        present = [h for h in ins if h is not None]
        if not present:
            return None
        x = ins[0]
        bax = x.bax if x.data else None
        if op == "Split":
            axis, sizes = self.split_sizes(a, ins)
            return [(x.shape[:axis] + (size,) + x.shape[axis + 1:], bax) for size in sizes]
        if op == "Pad" and "pads" not in a and len(ins) > 1:
            pads = self.values(ins[1], "pads")
            axes = self.values(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else range(len(x.shape))
            shape = list(x.shape)
            for j, axis in enumerate(axes):
                shape[_axis(axis, len(shape))] += pads[j] + pads[j + len(pads) // 2]
            return tuple(shape), bax
        if op in PREDICATES or op == "Trilu":
            return tuple(x.shape), bax
        if op in ACTIVATIONS or op in ARITHMETIC:
            shape = _broadcast(*[h.shape for h in present])
            lead = next((h for h in present if h.data and h.bax is not None), None)
            return shape, None if lead is None else lead.bax + len(shape) - len(lead.shape)
        if op == "Transpose":
            perm = tuple(a.get("perm", range(len(x.shape) - 1, -1, -1)))
            return tuple(x.shape[i] for i in perm), None if bax is None else perm.index(bax)
        if op in RESHAPES:
            shape = self.reshaped(op, a, ins)
            if bax is None:
                return shape, None
            return shape, _reshape_letters(_data_letters(x), x.shape, shape).find("b")
        if op == "Concat":
            axis = _axis(a["axis"], len(x.shape))
            shape = list(x.shape)
            shape[axis] = sum(h.shape[axis] for h in present)
            return tuple(shape), bax
        if op == "Expand":
            shape = _broadcast(x.shape, tuple(self.values(ins[1], "shape")))
            return shape, None if bax is None else bax + len(shape) - len(x.shape)
        if op == "Slice":
            shape = list(x.shape)
            for axis, start, end in self._slices(a, ins):
                shape[axis] = end - start
            return tuple(shape), bax
        if op == "GatherND" and len(present) == 2 and len(ins[1].shape) >= 1:
            index, rank = tuple(ins[1].shape), a.get("batch_dims", 0)
            shape = index[:-1] + tuple(x.shape[rank + index[-1]:])
            lead = bax == 0 and not ins[1].data and index and index[0] == x.shape[0]  # sample i picked by sample i
            return shape, 0 if lead or ins[1].data and ins[1].bax == 0 else None
        if op == "Gather" and isinstance(ins[1], Val) and not ins[1].data:
            axis = _axis(a.get("axis", 0), len(x.shape))
            shape = x.shape[:axis] + tuple(ins[1].shape) + x.shape[axis + 1:]
            moved = None if bax is None or bax == axis else bax if bax < axis else bax + len(ins[1].shape) - 1
            return shape, moved
        return None

    def result_shapes(self, node, op, a, ins) -> list[tuple[int, ...]]:
        """The shapes of the outputs of ``node`` on known constants, found
        before computing them (a result of more than ``SMALL`` elements is
        kept as its shape alone, so no array of the model's sizes is ever
        made): by :meth:`fold_shape`, a ``Range``'s length, else ONNX's shape
        inference of the node on its constant inputs.  A result whose size
        cannot be known beforehand is not computed."""
        try:
            shapes = self.fold_shape(op, a, ins)
        except Unsupported:
            shapes = None
        if shapes is not None:
            return [shape for shape, _ in shapes] if isinstance(shapes, list) else [shapes[0]]
        if op == "Range" and len(ins) == 3 and all(h is not None and np.size(h.value) == 1 for h in ins):
            start, limit, delta = (float(np.asarray(h.value).reshape(-1)[0]) for h in ins)
            if delta == 0 or not all(map(math.isfinite, (start, limit, delta))):
                raise Unsupported("on constants (a step of 0 or an endless range)")
            return [(max(math.ceil((limit - start) / delta), 0),)]
        return self.inferred_shapes(node, [h.value if h is not None else None for h in ins])

    def inferred_shapes(self, node, values) -> list[tuple[int, ...]]:
        """The output shapes ONNX's shape inference gives ``node`` on the
        constant inputs ``values``; :class:`Unsupported` when one is not
        known."""
        from onnx import helper, numpy_helper, shape_inference

        names = [f"in{i}" if v is not None else "" for i, v in enumerate(values)]
        outs = [f"out{i}" for i in range(len(node.output))]
        one = helper.make_node(node.op_type, names, outs, domain=node.domain)
        one.attribute.extend(node.attribute)
        inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names, values) if n]
        graph = helper.make_graph([one], "size", [], [helper.make_empty_tensor_value_info(o) for o in outs],
                                  initializer=inits)
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        try:
            inferred = shape_inference.infer_shapes(model, data_prop=True).graph
        except Exception as e:  # onnx raises several types
            raise Unsupported(f"on constants ({type(e).__name__})") from None
        found = {}
        for vi in list(inferred.output) + list(inferred.value_info):
            t = vi.type.tensor_type
            if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
                found[vi.name] = tuple(int(d.dim_value) for d in t.shape.dim)
        if any(o not in found for o in outs):
            raise Unsupported("on constants (the size of its result is not known before computing it)")
        return [found[o] for o in outs]

    def compute(self, node, op, a, ins) -> list:
        """Outputs of ``node`` on known constants: numpy for the common
        shape arithmetic, ONNX's reference implementation for the rest."""
        values = [h.value if h is not None else None for h in ins]
        x = values[0] if values else None
        if op in NUMPY and values and all(v is not None for v in values):  # not `None in`: == on arrays
            f = NUMPY[op]
            if op in ("Sum", "Max", "Min"):
                out = values[0]
                for v in values[1:]:
                    out = f(out, v)
                return [np.asarray(out)]
            return [np.asarray(f(*values))]
        if op in RESHAPES:
            return [x.reshape(self.reshaped(op, a, ins))]
        if op == "Transpose":
            return [np.transpose(x, a.get("perm"))]
        if op == "Concat":
            return [np.concatenate([v for v in values if v is not None], axis=a["axis"])]
        if op == "Gather":
            return [np.take(x, values[1], axis=a.get("axis", 0))]
        if op == "Slice":
            index = [slice(None)] * x.ndim
            for axis, start, end in self._slices(a, ins):
                index[axis] = slice(start, end)
            return [x[tuple(index)]]
        return self.evaluate(node, values)

    def evaluate(self, node, values) -> list:
        """Outputs of ``node`` by ONNX's reference implementation."""
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        names = [f"in{i}" if v is not None else "" for i, v in enumerate(values)]
        outs = [f"out{i}" for i in range(len(node.output))]
        one = helper.make_node(node.op_type, names, outs, domain=node.domain)
        one.attribute.extend(node.attribute)
        graph = helper.make_graph([one], "fold", [helper.make_tensor_value_info(n, 0, None) for n in names if n],
                                  [helper.make_tensor_value_info(o, 0, None) for o in outs])
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        try:
            results = ReferenceEvaluator(model).run(None, {n: v for n, v in zip(names, values) if n})
        except Exception as e:  # the reference implementation's own errors, of many types
            raise Unsupported(f"on constants ({type(e).__name__})") from None
        if not all(isinstance(r, (np.ndarray, np.generic)) for r in results):
            raise Unsupported("making something else than tensors")
        return [np.asarray(r) for r in results]
