"""Operators that only move data: concatenation, splitting, slicing, transposes and reshapes."""

from __future__ import annotations

import math

from models.onnx.values import Act, Unsupported, Val, _axis, _reshape_letters


def _expanded(shape: tuple, target) -> tuple[int, ...]:
    """The shape ``Expand`` gives ``shape`` (numpy's broadcasting, both ways)."""
    r = max(len(shape), len(target))
    a, b = (1,) * (r - len(shape)) + shape, (1,) * (r - len(target)) + tuple(target)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise Unsupported(f"of {shape} to {tuple(target)}")
    return tuple(max(x, y) for x, y in zip(a, b))


class Shapes:
    """Mixin of :class:`models.onnx.importer.Importer` (see the module docstring)."""

    def _Concat(self, a, name, ins):
        from kinds.shape import Concat

        present = [h for h in ins if h is not None and math.prod(h.shape) > 0]
        axis = _axis(a["axis"], len(present[0].shape))
        letters = next(h.ref.letters for h in present if isinstance(h, Act))  # every input is split alike
        refs = [self.ref(h)._replace(letters=letters) for h in present]
        weights = [(i, h.key) for i, h in enumerate(present) if isinstance(h, Val) and not h.data]
        (out,) = self.add(name, Concat(axis), *refs, weights=weights)
        return [Act(out)]

    def split_sizes(self, a, ins) -> tuple[int, list[int]]:
        """The axis and the pieces of a Split node (``self.current``)."""
        x = ins[0]
        axis = _axis(a.get("axis", 0), len(x.shape))
        if "split" in a:
            return axis, list(a["split"])
        if len(ins) > 1 and ins[1] is not None:
            return axis, self.values(ins[1], "sizes")
        parts = a.get("num_outputs", len(self.current.output))
        step = -(-x.shape[axis] // parts)
        return axis, [min(step, x.shape[axis] - i * step) for i in range(parts)]

    def _Split(self, a, name, ins):
        from kinds.shape import Split

        axis, sizes = self.split_sizes(a, ins)
        return [Act(o) for o in self.add(name, Split(axis, tuple(sizes)), self.ref(ins[0]))]

    def slice(self, name, x: Act, axis: int, start: int, stop: int) -> Act:
        """Elements ``start:stop`` of ``axis``: a piece of a Split."""
        from kinds.shape import Split

        size = x.shape[axis]
        if (start, stop) == (0, size):
            return x
        pieces = [p for p in (start, stop - start, size - stop) if p > 0]
        outs = self.add(name, Split(axis, tuple(pieces)), self.ref(x))
        return Act(outs[1 if start > 0 else 0])

    def _slices(self, a, ins) -> list[tuple[int, int, int]]:
        """``(axis, start, stop)`` of a Slice node, clamped."""
        x = ins[0]
        if "starts" in a:
            starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
        else:
            starts, ends = self.values(ins[1], "starts"), self.values(ins[2], "ends")
            axes = self.values(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
            steps = self.values(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
        if steps is not None and any(s != 1 for s in steps):
            raise Unsupported("with a step")
        out = []
        for start, end, axis in zip(starts, ends, range(len(starts)) if axes is None else axes):
            axis = _axis(axis, len(x.shape))
            size = x.shape[axis]
            start, end = (max(0, min(size, v + size if v < 0 else v)) for v in (start, end))
            if end <= start:
                raise Unsupported("that is empty")
            out.append((axis, start, end))
        return out

    def _Slice(self, a, name, ins):
        x = ins[0]
        for i, (axis, start, end) in enumerate(self._slices(a, ins)):
            x = self.slice(name if i == 0 else f"{name}/{i}", x, axis, start, end)
        return [x]

    def _Expand(self, a, name, ins):
        """An activation broadcast to a larger shape (grouped-query attention's
        keys and values repeated for each query head of their group): a copy,
        a Concat of as many copies as each size-1 axis grows to."""
        from kinds.shape import Concat

        x = ins[0]
        shape = _expanded(tuple(x.shape), self.values(ins[1], "shape"))
        if len(shape) > len(x.shape):
            x = self.reshape(f"{name}/axes", x, (1,) * (len(shape) - len(x.shape)) + tuple(x.shape))
        for axis, (have, want) in enumerate(zip(x.shape, shape)):
            if have != want:
                (out,) = self.add(name if tuple(x.shape[axis + 1:]) == shape[axis + 1:] else f"{name}/{axis}",
                                  Concat(axis), *[self.ref(x)] * want)
                x = Act(out)
        return [x]

    def _Transpose(self, a, name, ins):
        from kinds.shape import Transpose

        x = ins[0]
        perm = tuple(a.get("perm", range(len(x.shape) - 1, -1, -1)))
        if perm == tuple(range(len(perm))):
            return [x]
        (out,) = self.add(name, Transpose(perm), self.ref(x))
        return [Act(out)]

    def reshape(self, name, x, shape) -> Act:
        from kinds.shape import Ravel, Unravel

        shape = tuple(int(s) for s in shape)
        if shape == tuple(x.shape):
            return x
        r = self.ref(x)
        (flat,) = self.add(f"{name}/ravel", Ravel(), r)
        (out,) = self.add(f"{name}/unravel", Unravel(shape, _reshape_letters(r.letters, x.shape, shape)), flat)
        return Act(out)

    def reshaped(self, op, a, ins) -> tuple[int, ...]:
        """The shape a Reshape, Flatten, Squeeze or Unsqueeze gives ``ins[0]``."""
        x = ins[0]
        shape, r = list(x.shape), len(x.shape)
        if op == "Flatten":
            axis = a.get("axis", 1)
            axis = axis + r if axis < 0 else axis
            return (math.prod(shape[:axis]), math.prod(shape[axis:]))
        if op in ("Squeeze", "Unsqueeze"):
            axes = a["axes"] if "axes" in a else (self.values(ins[1], "axes") if len(ins) > 1 and ins[1] is not None
                                                   else None)
            if op == "Squeeze":
                axes = [i for i, s in enumerate(shape) if s == 1] if axes is None else [_axis(i, r) for i in axes]
                return tuple(s for i, s in enumerate(shape) if i not in axes)
            if axes is None:
                raise Unsupported("without axes")
            for i in sorted(_axis(i, r + len(axes)) for i in axes):
                shape.insert(i, 1)
            return tuple(shape)
        target = self.values(ins[1], "target shape")
        if not a.get("allowzero", 0):
            target = [shape[i] if t == 0 and i < r else t for i, t in enumerate(target)]
        b0 = self.exported_batch
        if b0 is not None and b0 != self.batch and target and target[0] == b0 and self._sample_leads(x):
            target[0] = self.batch  # the exported batch size, hard-coded
        size = math.prod(shape)
        if -1 in target:
            rest = math.prod(t for t in target if t != -1)
            if rest <= 0 or size % rest:
                raise Unsupported(f"of {tuple(shape)} to {tuple(target)}")
            target[target.index(-1)] = size // rest
        if math.prod(target) != size or min(target, default=1) < 0:
            raise Unsupported(f"of {tuple(shape)} to {tuple(target)}")
        return tuple(target)

    def _sample_leads(self, x) -> bool:
        return x.ref.letters[:1] == "b" if isinstance(x, Act) else x.data and x.bax == 0

    def _Reshape(self, a, name, ins):
        return [self.reshape(name, ins[0], self.reshaped(self.current.op_type, a, ins))]

    _Flatten = _Squeeze = _Unsqueeze = _Reshape
