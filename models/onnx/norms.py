"""Normalisations, softmax and reductions."""

from __future__ import annotations

from models.onnx.values import Act, Unsupported, _axis


class Normalisations:
    """Mixin of :class:`models.onnx.importer.Importer` (see the module docstring)."""

    def reduce(self, a, name, ins) -> Act:
        from kinds.pointwise import ReduceMean

        x = ins[0]
        if "axes" in a:
            axes = a["axes"]
        elif len(ins) > 1 and ins[1] is not None:
            axes = self.values(ins[1], "axes")
        else:
            axes = [] if a.get("noop_with_empty_axes", 0) else list(range(len(x.shape)))
        if not axes:
            return x
        axes = tuple(_axis(i, len(x.shape)) for i in axes)
        (out,) = self.add(name, ReduceMean(axes, keepdims=bool(a.get("keepdims", 1))), self.ref(x))
        return Act(out)

    def _BatchNormalization(self, a, name, ins):
        from kinds.pointwise import Norm

        for h in ins[1:3]:
            self.weight(h, "scale")
        (out,) = self.add(name, Norm(axis=0, param_axis=1), self.ref(ins[0]))
        return [Act(out)]

    def _last_axis(self, a, x):
        if _axis(a.get("axis", -1), len(x.shape)) != len(x.shape) - 1:
            raise Unsupported("over several axes")

    def _LayerNormalization(self, a, name, ins):
        from kinds.pointwise import Norm

        self._last_axis(a, ins[0])
        weights = [self.weight(h, "scale") for h in ins[1:3] if h is not None]
        (out,) = self.add(name, Norm(-1, params=len(weights)), self.ref(ins[0]))
        return [Act(out)]

    def _RMSNormalization(self, a, name, ins):
        from kinds.pointwise import RMSNorm

        self._last_axis(a, ins[0])
        self.weight(ins[1], "scale")
        (out,) = self.add(name, RMSNorm(-1), self.ref(ins[0]))
        return [Act(out)]

    _SimplifiedLayerNormalization = _RMSNormalization

    def _LRN(self, a, name, ins):
        from kinds.pointwise import Norm

        (out,) = self.add(name, Norm(axis=1, params=0), self.ref(ins[0]))
        return [Act(out)]

    def _Softmax(self, a, name, ins):
        from kinds.pointwise import Softmax

        x = ins[0]
        axis = _axis(a.get("axis", 1 if self.opset < 13 else -1), len(x.shape))
        if self.opset < 13 and any(s != 1 for s in x.shape[axis + 1:]):
            raise Unsupported("over several axes (opset below 13)")
        (out,) = self.add(name, Softmax(axis), self.ref(x))
        self.softmax_axis[out.node] = axis
        return [Act(out)]

    _LogSoftmax = _Softmax
