"""Convolutions and pooling over NCHW images."""

from __future__ import annotations

from dataclasses import dataclass, replace

from errors import InputError
from kinds.base import Kind, Operator, Tensor, Work, gemm, halo, register


def _pair(v) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    a, b = v
    return (int(a), int(b))


def _pads(v) -> tuple[int, ...]:
    """Padding as ``(vertical, horizontal)``, or ``(top, left, bottom,
    right)`` when the two sides differ (ONNX's ``pads``)."""
    if isinstance(v, int) or len(v) == 2:
        return _pair(v)
    top, left, bottom, right = (int(x) for x in v)
    return (top, left) if (top, left) == (bottom, right) else (top, left, bottom, right)


def window_output(size: tuple[int, int], kernel, stride, pad) -> tuple[int, int]:
    """``h_o = floor((h - r + pad_top + pad_bottom) / stride_r) + 1``, likewise
    ``w_o``; a pair ``pad = (pad_r, pad_s)`` pads both sides alike."""
    (h, w), (r, s), (sr, sc) = size, kernel, stride
    top, left, bottom, right = pad if len(pad) == 4 else pad + pad
    return (h - r + top + bottom) // sr + 1, (w - s + left + right) // sc + 1


class _Window(Kind):
    """Kernel and stride as (vertical, horizontal) pairs; padding as a pair,
    or (top, left, bottom, right) when asymmetric."""

    def __post_init__(self):
        for f in ("kernel", "stride"):
            object.__setattr__(self, f, _pair(getattr(self, f)))
        object.__setattr__(self, "pad", _pads(self.pad))

    def _output_hw(self, name, x):
        if len(x.shape) != 4:
            raise InputError(f"{name}: {self.name} needs an NCHW image, got shape {x.shape}")
        ho, wo = window_output(x.shape[2:], self.kernel, self.stride, self.pad)
        if ho < 1 or wo < 1:
            raise InputError(f"{name}: a {self.kernel} window does not fit the {x.shape[2:]} image")
        return ho, wo


@register
@dataclass(frozen=True)
class Conv(_Window):
    """2-D convolution with ``out`` filters of ``kernel = (r, s)``.

    Space ``(b, c, h, w, r, s, n)``: batch, input channels, output height and
    width (never split), filter height and width, output channels.  Grouped
    (``groups = g > 1``, depthwise when ``g`` equals the channels): space
    ``(b, g, c, h, w, r, s, n)`` with ``c``, ``n`` the channels of one group;
    each group is its own GEMM.  Cost: GEMM with ``M = b*h*w``, ``N = n``,
    ``K = c*r*s`` (batch ``g``), plus the halo exchange of the input image.
    """

    out: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, ...] = (0, 0)
    groups: int = 1
    pw: int = 0  # pointwise operations per output element (activation)
    bias: bool = False

    def build(self, name, refs):
        (x,) = refs
        b, c, _, _ = x.shape
        ho, wo = self._output_hw(name, x)
        (r, s), n, g = self.kernel, self.out, self.groups
        if g < 1 or c % g or n % g:
            raise InputError(f"{name}: {g} groups do not divide {c} input and {n} output channels")
        gl = "g" if g > 1 else ""
        dims = "b" + gl + "chwrsn"
        space = (b,) + ((g,) if g > 1 else ()) + (c // g, ho, wo, r, s, n // g)
        inputs = [Tensor(x.shape, ("b", gl + "c", "h", "w"), x.role),
                  Tensor((n, c // g, r, s), (gl + "n", "c", "r", "s"), "weight")]
        if self.bias:
            inputs.append(Tensor((n,), (gl + "n",), "weight"))
        out = Tensor((b, n, ho, wo), ("b", gl + "n", "h", "w"))
        return Operator(self, dims, space, tuple(inputs), (out,), name), ("bchw",)

    def never_split(self, op):
        return "hw"

    def work(self, op, D, C, rules):
        w = gemm(D, C, "g" if "g" in op.dims else "", "bhw", "n", "crs", self.pw)
        return replace(w, comms=w.comms + (halo(op.inputs[0], C, D["r"], D["s"]),))


@register
@dataclass(frozen=True)
class Pooling(_Window):
    """Max or average pooling over a ``kernel = (r, s)`` window.

    Space ``(b, c, h, w)`` of the output, all splittable; input and output
    use the configuration.  Cost ``e`` (one operation per output element of a
    device) plus the halo exchange of the input image.
    """

    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, ...] = (0, 0)

    def build(self, name, refs):
        (x,) = refs
        b, c, _, _ = x.shape
        ho, wo = self._output_hw(name, x)
        letters = ("b", "c", "h", "w")
        op = Operator(self, "bchw", (b, c, ho, wo), (Tensor(x.shape, letters, x.role),),
                      (Tensor((b, c, ho, wo), letters),), name)
        return op, ("bchw",)

    def work(self, op, D, C, rules):
        e = (D / C).all  # (K,)
        r, s = self.kernel
        return Work(e, comms=(halo(op.inputs[0], C, r, s),))

