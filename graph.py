"""The five built-in computation graphs, one node per operator.

Each graph is a networkx ``DiGraph`` whose nodes are numbered ``0..n-1`` in
creation order (the original tool's order) and carry one attribute, ``op``:
an :class:`Operator`.  An edge ``u -> v`` means that ``v`` reads a tensor
``u`` writes; its attributes ``out`` and ``inp`` say which output of ``u``
and which input of ``v``.  When ``v`` reads several outputs of ``u`` the edge
keeps the last input position, the only one the PaSE cost model charges.
Weights and the data fed to the network are graph inputs: no node, no edge.

Graph-level attributes: ``name``, ``batch``, ``cutoff`` (the smallest
per-device extent a split may leave: 4 for the CNNs, 1 for RNNLM and the
Transformer) and, for the two sequence models, ``width``.

Nothing here depends on the number of devices or on the hardware, so one
graph serves every ``p``.  Example::

    >>> g = build_graph("alexnet", batch=128)
    >>> g.nodes[0]["op"].name, g.nodes[0]["op"].space
    ('conv1', (128, 3, 55, 55, 11, 11, 96))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import NamedTuple

__all__ = [
    "GRAPHS",
    "DEFAULT_WIDTH",
    "Tensor",
    "Operator",
    "build_graph",
    "operators",
    "check_graph_args",
    "MAX_SIZE",
]

GRAPHS = ("alexnet", "resnet101", "inception3", "rnnlm", "transformer")
DEFAULT_WIDTH = {"rnnlm": 2048, "transformer": 512}
_HEAD_WIDTH = 64  # Transformer key width per head: heads = width / 64
MAX_SIZE = 10**9  # largest batch or width accepted: far beyond any real model


@dataclass(frozen=True)
class Tensor:
    """One input or output of an operator and how it is split.

    ``axes[j]`` lists the iteration-space dimensions whose splits multiply
    into the split of tensor axis ``j``: ``((0,), (6,), (2,), (3,))`` for a
    convolution's output, ``((0, 1, 2, 3),)`` for the flat side of a reshape,
    ``()`` for an axis that is never split.
    """

    shape: tuple[int, ...]
    axes: tuple[tuple[int, ...], ...]

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "axes", tuple(tuple(int(i) for i in a) for a in self.axes))
        if len(self.shape) != len(self.axes):
            raise ValueError(f"tensor shape {self.shape} and axes {self.axes} differ in rank")


@dataclass(frozen=True)
class Gemm:
    """Which iteration-space dimensions play the GEMM roles batch, M, N, K."""

    batch: tuple[int, ...]
    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]


@dataclass(frozen=True)
class Operator:
    """One node of a computation graph; independent of ``p`` and hardware.

    Two operators that differ only in ``name`` compare equal, so costs can be
    shared between the identical layers of a network.
    """

    kind: str  # Conv, Pooling, FC, Einsum, Embedding, Elementwise, Norm, ...
    dims: str  # one letter per iteration-space dimension, 'b' the sample
    space: tuple[int, ...]
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    never_split: tuple[int, ...] = ()
    gemm: Gemm | None = None
    pw: int = 0  # pointwise operations per output element
    window: tuple[int, ...] = ()  # Pooling: (r, s)
    axes: tuple[int, ...] = ()  # Norm/Softmax: (a,); ReduceMean: A; Concat: (axis,)
    name: str = field(default="", compare=False)

    def __post_init__(self):
        object.__setattr__(self, "space", tuple(int(s) for s in self.space))
        if len(self.dims) != len(self.space):
            raise ValueError(f"{self.name}: dims {self.dims!r} do not match space {self.space}")
        if "b" not in self.dims:
            raise ValueError(f"{self.name}: iteration space {self.dims!r} has no sample dim 'b'")

    @property
    def contiguous_only(self) -> bool:
        """Reshapes admit only contiguous configurations."""
        return self.kind in ("Ravel", "Unravel")

    def __repr__(self) -> str:
        space = ", ".join(f"{d}={s}" for d, s in zip(self.dims, self.space))
        return f"Operator({self.kind} {self.name!r}: {space})"


class _Ref(NamedTuple):
    """A tensor while a graph is being built: its producer and dimension letters."""

    node: int | None  # None for a graph input
    index: int
    shape: tuple[int, ...]
    letters: str


def _ident(rank: int, offset: int = 0) -> tuple[tuple[int, ...], ...]:
    return tuple((offset + i,) for i in range(rank))


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


class _Builder:
    """Adds operators to a DiGraph in creation order and wires the edges."""

    def __init__(self, name: str, batch: int, cutoff: int, **attrs):
        import networkx as nx

        self.g = nx.DiGraph(name=name, batch=batch, cutoff=cutoff, **attrs)

    # -- plumbing -----------------------------------------------------------
    def _add(self, op: Operator, reads: list[_Ref], out_letters: list[str]) -> list[_Ref]:
        v = self.g.number_of_nodes()
        for ref, t in zip(reads, op.inputs):
            if ref.shape != t.shape:
                raise AssertionError(f"{op.name}: input shape {ref.shape} != {t.shape}")
        self.g.add_node(v, op=op)
        for pos, ref in enumerate(reads):
            if ref.node is not None:  # later inputs overwrite: the last one is charged
                self.g.add_edge(ref.node, v, out=ref.index, inp=pos)
        return [_Ref(v, i, t.shape, l) for i, (t, l) in enumerate(zip(op.outputs, out_letters))]

    @staticmethod
    def data(shape: tuple[int, ...], letters: str) -> _Ref:
        return _Ref(None, 0, tuple(shape), letters)

    # -- operators ----------------------------------------------------------
    def conv(self, name, x, n, rs, stride=1, pad=0, pw=0) -> _Ref:
        b, c, h, w = x.shape
        (r, s), (sr, sc), (pr, pc) = _pair(rs), _pair(stride), _pair(pad)
        ho, wo = (h - r + 2 * pr) // sr + 1, (w - s + 2 * pc) // sc + 1
        op = Operator(
            "Conv", "bchwrsn", (b, c, ho, wo, r, s, n),
            inputs=(Tensor(x.shape, _ident(4)), Tensor((n, c, r, s), ((6,), (1,), (4,), (5,)))),
            outputs=(Tensor((b, n, ho, wo), ((0,), (6,), (2,), (3,))),),
            never_split=(2, 3), gemm=Gemm((), (0, 2, 3), (6,), (1, 4, 5)), pw=pw, name=name,
        )
        return self._add(op, [x], ["bchw"])[0]

    def pool(self, name, x, rs, stride=1, pad=0) -> _Ref:
        b, c, h, w = x.shape
        (r, s), (sr, sc), (pr, pc) = _pair(rs), _pair(stride), _pair(pad)
        ho, wo = (h - r + 2 * pr) // sr + 1, (w - s + 2 * pc) // sc + 1
        op = Operator(
            "Pooling", "bchw", (b, c, ho, wo),
            inputs=(Tensor(x.shape, _ident(4)),), outputs=(Tensor((b, c, ho, wo), _ident(4)),),
            window=(r, s), name=name,
        )
        return self._add(op, [x], ["bchw"])[0]

    def fc(self, name, x, n, pw=0) -> _Ref:
        lead, k = x.shape[:-1], x.shape[-1]
        L = len(lead)
        op = Operator(
            "FC", x.letters[:-1] + "nk", lead + (n, k),
            inputs=(Tensor(x.shape, _ident(L) + ((L + 1,),)), Tensor((k, n), ((L + 1,), (L,)))),
            outputs=(Tensor(lead + (n,), _ident(L + 1)),),
            gemm=Gemm((), tuple(range(L)), (L,), (L + 1,)), pw=pw, name=name,
        )
        return self._add(op, [x], [x.letters[:-1] + "n"])[0]

    def einsum(self, name, equation, x, y, pw=0, kind="Einsum") -> _Ref:
        lhs, out = equation.split("->")
        in1, in2 = lhs.split(",")
        reduced = "".join(c for c in in1 if c in in2 and c not in out)
        letters = out + reduced
        if set(in1 + in2) != set(letters) or len(set(letters)) != len(letters):
            raise ValueError(f"{name}: unsupported einsum {equation!r}")
        size = {}
        for ref, sub in ((x, in1), (y, in2)):
            if len(ref.shape) != len(sub):
                raise ValueError(f"{name}: operand {ref.shape} does not match {sub!r}")
            for c, n in zip(sub, ref.shape):
                if size.setdefault(c, n) != n:
                    raise ValueError(f"{name}: dimension {c!r} is {size[c]} and {n}")

        def where(sub):
            return tuple(letters.index(c) for c in sub)

        def axes(sub):
            return tuple((letters.index(c),) for c in sub)

        batch = "".join(c for c in out if c in in1 and c in in2)
        m = "".join(c for c in out if c in in1 and c not in in2)
        n = "".join(c for c in out if c in in2 and c not in in1)
        if not m or not n:
            raise ValueError(f"{name}: einsum {equation!r} needs an M and an N dimension")
        op = Operator(
            kind, letters, tuple(size[c] for c in letters),
            inputs=(Tensor(x.shape, axes(in1)), Tensor(y.shape, axes(in2))),
            outputs=(Tensor(tuple(size[c] for c in out), axes(out)),),
            gemm=Gemm(where(batch), where(m), where(n), where(reduced)), pw=pw, name=name,
        )
        return self._add(op, [x, y], [out])[0]

    def embedding(self, name, ids, vocab, width, letter="d") -> _Ref:
        """A one-hot ``(b, s, v)`` times a weight ``(v, d)``: Einsum ``abc,cd->abd``."""
        b, s = ids.shape
        lb, ls = ids.letters
        letters = lb + ls + letter + "v"
        op = Operator(
            "Embedding", letters, (b, s, width, vocab),
            inputs=(Tensor((b, s), ((0,), (1,))), Tensor((vocab, width), ((3,), (2,)))),
            outputs=(Tensor((b, s, width), _ident(3)),),
            gemm=Gemm((), (0, 1), (2,), (3,)), name=name,
        )
        return self._add(op, [ids], [lb + ls + letter])[0]

    def elementwise(self, name, x, y, pw=0) -> _Ref:
        r = len(x.shape)
        op = Operator(
            "Elementwise", x.letters, x.shape,
            inputs=(Tensor(x.shape, _ident(r)), Tensor(y.shape, _ident(r))),
            outputs=(Tensor(x.shape, _ident(r)),), pw=pw, name=name,
        )
        return self._add(op, [x, y], [x.letters])[0]

    def _shape_op(self, kind, name, x, axis) -> _Ref:
        r = len(x.shape)
        op = Operator(
            kind, x.letters, x.shape,
            inputs=(Tensor(x.shape, _ident(r)),), outputs=(Tensor(x.shape, _ident(r)),),
            axes=(axis % r,), name=name,
        )
        return self._add(op, [x], [x.letters])[0]

    def norm(self, name, x, axis) -> _Ref:
        return self._shape_op("Norm", name, x, axis)

    def softmax(self, name, x, axis) -> _Ref:
        return self._shape_op("Softmax", name, x, axis)

    def softmax_xent(self, name, x) -> _Ref:
        r = len(x.shape)
        op = Operator(
            "SoftmaxCrossEntropy", x.letters, x.shape,
            inputs=(Tensor(x.shape, _ident(r)),), outputs=(Tensor(x.shape, _ident(r)),), name=name,
        )
        return self._add(op, [x], [x.letters])[0]

    def reduce_mean(self, name, x, axes) -> _Ref:
        kept = tuple(i for i in range(len(x.shape)) if i not in axes)
        op = Operator(
            "ReduceMean", x.letters, x.shape,
            inputs=(Tensor(x.shape, _ident(len(x.shape))),),
            outputs=(Tensor(tuple(x.shape[i] for i in kept), tuple((i,) for i in kept)),),
            axes=tuple(axes), name=name,
        )
        return self._add(op, [x], ["".join(x.letters[i] for i in kept)])[0]

    def concat(self, name, xs, axis) -> _Ref:
        first = xs[0].shape
        r = len(first)
        for x in xs:
            if len(x.shape) != r or any(x.shape[i] != first[i] for i in range(r) if i != axis):
                raise AssertionError(f"{name}: cannot concatenate {x.shape} to {first}")
        space = first[:axis] + (1,) + first[axis + 1:]
        out = first[:axis] + (sum(x.shape[axis] for x in xs),) + first[axis + 1:]
        op = Operator(
            "Concat", xs[0].letters, space,
            inputs=tuple(Tensor(x.shape, _ident(r)) for x in xs),
            outputs=(Tensor(out, _ident(r)),), never_split=(axis,), axes=(axis,), name=name,
        )
        return self._add(op, list(xs), [xs[0].letters])[0]

    def stack(self, name, xs, letter="s") -> _Ref:
        shape = xs[0].shape
        r = len(shape)
        op = Operator(
            "Stack", letter + xs[0].letters, (1,) + shape,
            inputs=tuple(Tensor(shape, _ident(r, 1)) for _ in xs),
            outputs=(Tensor((len(xs),) + shape, _ident(r + 1)),), never_split=(0,), name=name,
        )
        return self._add(op, list(xs), [letter + xs[0].letters])[0]

    def unstack(self, name, x) -> list[_Ref]:
        n, rest = x.shape[0], x.shape[1:]
        op = Operator(
            "Unstack", x.letters, (1,) + rest,
            inputs=(Tensor(x.shape, _ident(len(x.shape))),),
            outputs=tuple(Tensor(rest, _ident(len(rest), 1)) for _ in range(n)),
            never_split=(0,), name=name,
        )
        return self._add(op, [x], [x.letters[1:]] * n)

    def reshape(self, name, x, shape, letters) -> _Ref:
        """A reshape as two operators: Ravel to a flat tensor, Unravel from it."""
        flat = (prod(x.shape),)
        if flat[0] != prod(shape):
            raise AssertionError(f"{name}: cannot reshape {x.shape} to {shape}")
        ravel = Operator(
            "Ravel", x.letters, x.shape,
            inputs=(Tensor(x.shape, _ident(len(x.shape))),),
            outputs=(Tensor(flat, (tuple(range(len(x.shape))),)),), name=f"{name}/ravel",
        )
        (y,) = self._add(ravel, [x], ["f"])
        unravel = Operator(
            "Unravel", letters, tuple(shape),
            inputs=(Tensor(flat, (tuple(range(len(shape))),)),),
            outputs=(Tensor(tuple(shape), _ident(len(shape))),), name=f"{name}/unravel",
        )
        return self._add(unravel, [y], [letters])[0]

    def lstm(self, name, x, units, layers) -> _Ref:
        b, s, u = x.shape
        if u != units:
            raise AssertionError(f"{name}: input width {u} != {units} units")
        op = Operator(
            "LSTM", "lsbnk", (layers, s, b, units, units),
            inputs=(Tensor(x.shape, ((2,), (1,), (4,))),),
            outputs=(Tensor((b, s, units), ((2,), (1,), (3,))),),
            never_split=(1,), pw=3, name=name,
        )
        return self._add(op, [x], [x.letters])[0]


# -- the five networks -------------------------------------------------------


def _alexnet(batch: int):
    B = _Builder("alexnet", batch, cutoff=4)
    x = B.data((batch, 3, 227, 227), "bchw")
    x = B.conv("conv1", x, 96, 11, stride=4, pw=1)
    x = B.pool("pool1", x, 3, stride=2)
    x = B.conv("conv2", x, 256, 5, pad=2, pw=1)
    x = B.pool("pool2", x, 3, stride=2)
    x = B.conv("conv3", x, 384, 3, pad=1, pw=1)
    x = B.conv("conv4", x, 384, 3, pad=1, pw=1)
    x = B.conv("conv5", x, 256, 3, pad=1, pw=1)
    x = B.pool("pool5", x, 3, stride=2)
    x = B.reshape("flatten", x, (batch, prod(x.shape[1:])), "bk")
    x = B.fc("fc6", x, 4096, pw=1)
    x = B.fc("fc7", x, 4096, pw=1)
    x = B.fc("fc8", x, 1024)
    B.softmax_xent("softmax", x)
    return B.g


def _resnet101(batch: int):
    B = _Builder("resnet101", batch, cutoff=4)
    x = B.data((batch, 3, 227, 227), "bchw")
    x = B.conv("conv1", x, 64, 7, stride=2, pad=3)
    x = B.norm("bn1", x, 0)
    x = B.pool("maxpool", x, 3, stride=2, pad=1)
    inplanes = 64
    for stage, (blocks, planes, stride) in enumerate(
        [(3, 64, 1), (4, 128, 2), (23, 256, 2), (3, 512, 2)], start=1
    ):
        for blk in range(blocks):
            s = stride if blk == 0 else 1
            pre = f"layer{stage}.{blk}"
            y = B.conv(f"{pre}/conv1", x, planes, 1)
            y = B.norm(f"{pre}/bn1", y, 0)
            y = B.conv(f"{pre}/conv2", y, planes, 3, stride=s, pad=1)
            y = B.norm(f"{pre}/bn2", y, 0)
            y = B.conv(f"{pre}/conv3", y, 4 * planes, 1)
            y = B.norm(f"{pre}/bn3", y, 0)
            identity = x
            if blk == 0 and (s != 1 or inplanes != 4 * planes):
                identity = B.conv(f"{pre}/downsample/conv", x, 4 * planes, 1, stride=s)
                identity = B.norm(f"{pre}/downsample/bn", identity, 0)
            x = B.elementwise(f"{pre}/add", y, identity, pw=1)
            if blk == 0:
                inplanes = 4 * planes
    x = B.reduce_mean("avgpool", x, (2, 3))
    x = B.fc("fc", x, 1000)
    B.softmax_xent("softmax", x)
    return B.g


def _inception3(batch: int):
    B = _Builder("inception3", batch, cutoff=4)

    def bc(name, x, n, rs, stride=1, pad=0):
        return B.norm(f"{name}/bn", B.conv(name, x, n, rs, stride=stride, pad=pad), 0)

    def module_a(pre, x, pool_features):
        b1 = bc(f"{pre}/branch1x1", x, 64, 1)
        b5 = bc(f"{pre}/branch5x5_1", x, 48, 1)
        b5 = bc(f"{pre}/branch5x5_2", b5, 64, 5, pad=2)
        b3 = bc(f"{pre}/branch3x3dbl_1", x, 64, 1)
        b3 = bc(f"{pre}/branch3x3dbl_2", b3, 96, 3, pad=1)
        b3 = bc(f"{pre}/branch3x3dbl_3", b3, 96, 3, pad=1)
        bp = B.pool(f"{pre}/branch_pool/pool", x, 3, stride=1, pad=1)
        bp = bc(f"{pre}/branch_pool", bp, pool_features, 1)
        return B.concat(f"{pre}/concat", [b1, b5, b3, bp], 1)

    def module_b(pre, x):
        b3 = bc(f"{pre}/branch3x3", x, 384, 3, stride=2)
        bd = bc(f"{pre}/branch3x3dbl_1", x, 64, 1)
        bd = bc(f"{pre}/branch3x3dbl_2", bd, 96, 3, pad=1)
        bd = bc(f"{pre}/branch3x3dbl_3", bd, 96, 3, stride=2)
        bp = B.pool(f"{pre}/branch_pool", x, 3, stride=2)
        return B.concat(f"{pre}/concat", [b3, bd, bp], 1)

    def module_c(pre, x, c7):
        b1 = bc(f"{pre}/branch1x1", x, 192, 1)
        b7 = bc(f"{pre}/branch7x7_1", x, c7, 1)
        b7 = bc(f"{pre}/branch7x7_2", b7, c7, (1, 7), pad=(0, 3))
        b7 = bc(f"{pre}/branch7x7_3", b7, 192, (7, 1), pad=(3, 0))
        bd = bc(f"{pre}/branch7x7dbl_1", x, c7, 1)
        bd = bc(f"{pre}/branch7x7dbl_2", bd, c7, (7, 1), pad=(3, 0))
        bd = bc(f"{pre}/branch7x7dbl_3", bd, c7, (1, 7), pad=(0, 3))
        bd = bc(f"{pre}/branch7x7dbl_4", bd, c7, (7, 1), pad=(3, 0))
        bd = bc(f"{pre}/branch7x7dbl_5", bd, 192, (1, 7), pad=(0, 3))
        bp = B.pool(f"{pre}/branch_pool/pool", x, 3, stride=1, pad=1)
        bp = bc(f"{pre}/branch_pool", bp, 192, 1)
        return B.concat(f"{pre}/concat", [b1, b7, bd, bp], 1)

    def module_d(pre, x):
        b3 = bc(f"{pre}/branch3x3_1", x, 192, 1)
        b3 = bc(f"{pre}/branch3x3_2", b3, 320, 3, stride=2)
        b7 = bc(f"{pre}/branch7x7x3_1", x, 192, 1)
        b7 = bc(f"{pre}/branch7x7x3_2", b7, 192, (1, 7), pad=(0, 3))
        b7 = bc(f"{pre}/branch7x7x3_3", b7, 192, (7, 1), pad=(3, 0))
        b7 = bc(f"{pre}/branch7x7x3_4", b7, 192, 3, stride=2)
        bp = B.pool(f"{pre}/branch_pool", x, 3, stride=2)
        return B.concat(f"{pre}/concat", [b3, b7, bp], 1)

    def module_e(pre, x):
        b1 = bc(f"{pre}/branch1x1", x, 320, 1)
        b3 = bc(f"{pre}/branch3x3_1", x, 384, 1)
        b3a = bc(f"{pre}/branch3x3_2a", b3, 384, (1, 3), pad=(0, 1))
        b3b = bc(f"{pre}/branch3x3_2b", b3, 384, (3, 1), pad=(1, 0))
        b3 = B.concat(f"{pre}/branch3x3/concat", [b3a, b3b], 1)
        bd = bc(f"{pre}/branch3x3dbl_1", x, 448, 1)
        bd = bc(f"{pre}/branch3x3dbl_2", bd, 384, 3, pad=1)
        bda = bc(f"{pre}/branch3x3dbl_3a", bd, 384, (1, 3), pad=(0, 1))
        bdb = bc(f"{pre}/branch3x3dbl_3b", bd, 384, (3, 1), pad=(1, 0))
        bd = B.concat(f"{pre}/branch3x3dbl/concat", [bda, bdb], 1)
        bp = B.pool(f"{pre}/branch_pool/pool", x, 3, stride=1, pad=1)
        bp = bc(f"{pre}/branch_pool", bp, 192, 1)
        return B.concat(f"{pre}/concat", [b1, b3, bd, bp], 1)

    x = B.data((batch, 3, 299, 299), "bchw")
    x = bc("conv2d_1a_3x3", x, 32, 3, stride=2)
    x = bc("conv2d_2a_3x3", x, 32, 3)
    x = bc("conv2d_2b_3x3", x, 64, 3, pad=1)
    x = B.pool("maxpool1", x, 3, stride=2)
    x = bc("conv2d_3b_1x1", x, 80, 1)
    x = bc("conv2d_4a_3x3", x, 192, 3)
    x = B.pool("maxpool2", x, 3, stride=2)
    x = module_a("mixed_5b", x, 32)
    x = module_a("mixed_5c", x, 64)
    x = module_a("mixed_5d", x, 64)
    x = module_b("mixed_6a", x)
    for pre, c7 in (("mixed_6b", 128), ("mixed_6c", 160), ("mixed_6d", 160), ("mixed_6e", 192)):
        x = module_c(pre, x, c7)
    x = module_d("mixed_7a", x)
    x = module_e("mixed_7b", x)
    x = module_e("mixed_7c", x)
    x = B.reduce_mean("avgpool", x, (2, 3))
    x = B.fc("fc", x, 1000)
    B.softmax_xent("softmax", x)
    return B.g


def _rnnlm(batch: int, width: int):
    vocab, seq, layers = 100000, 256, 2
    B = _Builder("rnnlm", batch, cutoff=1, width=width)
    ids = B.data((batch, seq), "bs")
    x = B.embedding("embed", ids, vocab, width)
    x = B.lstm("lstm", x, width, layers)
    x = B.fc("logits", x, vocab)
    B.softmax_xent("softmax", x)
    return B.g


def _transformer(batch: int, width: int):
    vocab, seq, layers = 50000, 256, 6
    e, k = width, _HEAD_WIDTH
    h, f = width // k, 4 * width
    B = _Builder("transformer", batch, cutoff=1, width=width)
    W = B.data  # every weight is a graph input

    def attention(pre, xs):
        w_qkv = W((3, h, e, k), "shek")
        if len(xs) == 3:
            st = B.stack(f"{pre}/stack", xs)
            qkv = B.einsum(f"{pre}/qkv", "sble,shek->sbhlk", st, w_qkv)
        else:
            qkv = B.einsum(f"{pre}/qkv", "ble,shek->sbhlk", xs[0], w_qkv)
        q, kk, v = B.unstack(f"{pre}/split", qkv)
        kk = kk._replace(letters="bhmk")
        s = B.einsum(f"{pre}/scores", "bhlk,bhmk->bhlm", q, kk)
        s = B.softmax(f"{pre}/softmax", s, 3)
        v = v._replace(letters="bhmk")
        c = B.einsum(f"{pre}/context", "bhlm,bhmk->bhlk", s, v)
        o = B.einsum(f"{pre}/out", "bhlk,hek->ble", c, W((h, e, k), "hek"))
        o = B.elementwise(f"{pre}/residual", xs[0], o)
        return B.norm(f"{pre}/norm", o, -1)

    def feed_forward(pre, x):
        y = B.einsum(f"{pre}/in", "ble,ef->blf", x, W((e, f), "ef"), pw=2)
        y = B.einsum(f"{pre}/out", "blf,fe->ble", y, W((f, e), "fe"))
        y = B.elementwise(f"{pre}/residual", x, y)
        return B.norm(f"{pre}/norm", y, -1)

    pos = W((batch, seq, e), "ble")
    x = B.embedding("enc/embed", W((batch, seq), "bl"), vocab, e, "e")
    x = B.elementwise("enc/pos", x, pos)
    for i in range(layers):
        x = feed_forward(f"enc{i}/ffn", attention(f"enc{i}/attn", [x]))
    enc = x
    x = B.embedding("dec/embed", W((batch, seq), "bl"), vocab, e, "e")
    x = B.elementwise("dec/pos", x, pos)
    for i in range(layers):
        a = attention(f"dec{i}/self", [x])
        x = feed_forward(f"dec{i}/ffn", attention(f"dec{i}/cross", [a, enc, enc]))
    x = B.einsum("logits", "ble,ev->blv", x, W((e, vocab), "ev"))
    B.softmax_xent("softmax", x)
    return B.g


def check_graph_args(name: str, batch: int, width: int | None = None) -> None:
    """Raise ``ValueError`` with a one-line message for a bad graph request."""
    if name not in GRAPHS:
        raise ValueError(f"unknown graph {name!r}; choose one of {', '.join(GRAPHS)}")
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_SIZE:
        raise ValueError(f"batch size must be an integer from 1 to {MAX_SIZE:,}, got {batch!r}")
    if width is None:
        return
    if name not in DEFAULT_WIDTH:
        raise ValueError(f"--model sets the width of rnnlm and transformer only, not {name}")
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_SIZE:
        raise ValueError(f"model width must be an integer from 1 to {MAX_SIZE:,}, got {width!r}")
    if name == "transformer" and width % _HEAD_WIDTH:
        raise ValueError(
            f"transformer width {width} is not a multiple of the head width {_HEAD_WIDTH}"
            f" (heads = width / {_HEAD_WIDTH}); try {max(_HEAD_WIDTH, width // _HEAD_WIDTH * _HEAD_WIDTH)}"
        )


def build_graph(name: str, batch: int = 128, width: int | None = None):
    """Build the named computation graph for ``batch`` samples.

    ``width`` is the model width of ``rnnlm`` (hidden units) and
    ``transformer`` (embedding width; heads = width/64, feed-forward 4*width);
    ``None`` means the reference size.  Raises ``ValueError`` on bad input.
    """
    check_graph_args(name, batch, width)
    if name in DEFAULT_WIDTH:
        w = DEFAULT_WIDTH[name] if width is None else width
        return {"rnnlm": _rnnlm, "transformer": _transformer}[name](batch, w)
    return {"alexnet": _alexnet, "resnet101": _resnet101, "inception3": _inception3}[name](batch)


def operators(g) -> list[Operator]:
    """The operators of a graph in node-id order."""
    return [g.nodes[v]["op"] for v in range(g.number_of_nodes())]
