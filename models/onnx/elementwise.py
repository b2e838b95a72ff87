"""Elementwise arithmetic and activations: an operator of their own, or one more pointwise operation of the operator that made their input."""

from __future__ import annotations

from models.onnx.values import PRODUCTS, Act, Unsupported, Val, _broadcast


class Elementwise:
    """Mixin of :class:`models.onnx.importer.Importer` (see the module docstring)."""

    def standalone(self, name, x) -> Act:
        from kinds.pointwise import Elementwise

        (out,) = self.add(name, Elementwise(), self.ref(x))
        return Act(out)

    def arithmetic(self, op, name, ins) -> Act:
        from kinds.pointwise import Elementwise

        if op == "Where":
            ins = ins[1:]  # the condition selects, it is not differentiated
        acts = []
        for h in ins:
            if isinstance(h, Act) and all(h.ref[:2] != g.ref[:2] for g in acts):
                acts.append(h)
        out_shape = _broadcast(*[h.shape for h in ins])
        if len(acts) == 1:
            act, vals = acts[0], [h for h in ins if isinstance(h, Val)]
            if tuple(act.shape) != out_shape:
                raise Unsupported("broadcasting an activation to a larger shape")
            if op == "Add" and len(vals) == 1 and not vals[0].data:
                return self.bias(act, vals[0], name)
            return self.pointwise(act, name)
        full = [h for h in acts if tuple(h.shape) == out_shape]
        if not full:
            raise Unsupported("of activations broadcast against each other")
        order = full[:1] + [h for h in acts if h is not full[0]]
        (out,) = self.add(name, Elementwise(keeps_inputs=op in PRODUCTS), *[h.ref for h in order])
        return Act(out)
