"""Convolutions and pooling windows (2-D, NCHW)."""

from __future__ import annotations

from models.onnx.values import Act, Unsupported


class Convolutions:
    """Mixin of :class:`models.onnx.importer.Importer` (see the module docstring)."""

    def _Conv(self, a, name, ins):
        from kinds.conv import Conv

        x, w = ins[0], self.weight(ins[1], "filter")
        bias = ins[2] if len(ins) > 2 and ins[2] is not None else None
        if len(x.shape) != 4:
            raise Unsupported(f"over {len(x.shape) - 2} spatial dimension{'s' * (len(x.shape) != 3)} (only 2)")
        if bias is not None:
            self.weight(bias, "bias")
        if any(d != 1 for d in a.get("dilations", [1, 1])):
            raise Unsupported("with dilation")
        kernel = tuple(w.shape[2:])
        stride, pad = self.window(a, x.shape, kernel, ceil=False)
        kind = Conv(w.shape[0], kernel, stride=stride, pad=pad, groups=a.get("group", 1), bias=bias is not None)
        (out,) = self.add(name, kind, self.ref(x), weights=[(1, w.key)])
        return [Act(out)]

    def window(self, a, shape, kernel, ceil: bool):
        """Stride and ``(top, left, bottom, right)`` padding of a 2-D window
        over ``shape`` (NCHW), ``auto_pad`` and ``ceil_mode`` made explicit."""
        stride = tuple(a.get("strides", [1, 1]))
        hw = shape[2:]
        auto = a.get("auto_pad", "NOTSET")
        if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
            raise Unsupported(f"with auto_pad {auto!r} (ONNX knows NOTSET, SAME_UPPER, SAME_LOWER and VALID)")
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            sides = []
            for size, k, s in zip(hw, kernel, stride):
                total = max((-(-size // s) - 1) * s + k - size, 0)
                sides.append((total // 2, total - total // 2)[:: 1 if auto == "SAME_UPPER" else -1])
            pad = [sides[0][0], sides[1][0], sides[0][1], sides[1][1]]
        elif auto == "VALID":
            pad = [0, 0, 0, 0]
        else:
            pad = list(a.get("pads", [0, 0, 0, 0]))
        if len(pad) != 4 or len(stride) != 2 or len(kernel) != 2:
            raise Unsupported("over other than 2 dimensions")
        if ceil:  # the window count rounded up: pad the end so that the floor gives it
            for i, (size, k, s) in enumerate(zip(hw, kernel, stride)):
                out = -(-(size + pad[i] + pad[i + 2] - k) // s) + 1
                if (out - 1) * s >= size + pad[i]:  # a last window starting in the padding does not count
                    out -= 1
                pad[i + 2] += max((out - 1) * s + k - (size + pad[i] + pad[i + 2]), 0)
        return stride, tuple(pad)

    def pool(self, op, a, name, x) -> Act:
        from kinds.conv import Pooling
        from kinds.pointwise import ReduceMean

        if len(x.shape) != 4 and not op.startswith("Global"):
            raise Unsupported(f"over {len(x.shape) - 2} spatial dimension{'s' * (len(x.shape) != 3)} (only 2)")
        if op.startswith("Global"):
            kind = ReduceMean(tuple(range(2, len(x.shape))), keepdims=True)
        else:
            if any(d != 1 for d in a.get("dilations", [1, 1])):
                raise Unsupported("with dilation")
            kernel = tuple(a["kernel_shape"])
            stride, pad = self.window(a, x.shape, kernel, ceil=bool(a.get("ceil_mode", 0)))
            kind = Pooling(kernel, stride=stride, pad=pad)
        (out,) = self.add(name, kind, self.ref(x))
        return Act(out)
