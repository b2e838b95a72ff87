"""The values the ONNX importer tracks, and the small helpers its modules share.

An ONNX tensor is, to the importer, an :class:`Act` (an activation: the
output of an operator of the graph being built) or a :class:`Val` (a
constant, or a value computed from the network's inputs alone).  The sets of
op types say how each is mapped (see ``models/onnx/__init__.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graph import Ref

CUTOFF = 4
ACTIVATIONS = {"Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Gelu", "FastGelu", "QuickGelu", "BiasGelu",
               "Sigmoid", "HardSigmoid", "HardSwish", "Swish", "Silu", "Mish", "Tanh", "Erf", "Softplus", "Softsign",
               "Clip", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Sin", "Cos", "Floor", "Ceil", "Round",
               "Sign", "Not", "ThresholdedRelu", "Shrink", "RotaryEmbedding"}
ARITHMETIC = {"Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Mean", "Pow", "Where", "Mod", "Equal", "Less",
              "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"}
PRODUCTS = {"Mul", "Div", "Pow", "Max", "Min", "Where"}  # whose gradient needs their inputs
VANISH = {"Identity", "Dropout", "Cast", "CastLike"}
PREDICATES = {"IsNaN", "IsInf"}  # tests of elements: conditions
RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}
REDUCTIONS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}
POOLS = {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
NORMS = {"BatchNormalization", "LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization", "LRN"}
COMPUTE = {"Conv", "Gemm", "MatMul", "Einsum", "Softmax", "LogSoftmax"} | NORMS | POOLS | REDUCTIONS
LAYERS = COMPUTE | {"Gather", "Concat", "Split", "Slice", "Transpose", "Attention", "Expand"} | RESHAPES
SUPPORTED = LAYERS | ACTIVATIONS | ARITHMETIC | VANISH | PREDICATES
FOLDED = {"Constant", "ConstantOfShape", "Shape", "Size", "Range", "Expand", "GatherND", "Trilu"}  # on constants
# (and any op there) or on the network's inputs alone
SMALL = 1 << 16  # constants computed in full up to this many elements (shapes, indices, masks)
_LETTERS = "cdefghijklmnopqrstuwxyza"  # fresh letters ('b' is the sample, 'v' an embedding's vocabulary)
_DATA_LETTERS = {1: "b", 2: "bs", 3: "bse", 4: "bchw"}
_DEFAULT_DOMAINS = ("", "ai.onnx")
_CONTRIB = {"SimplifiedLayerNormalization", "FastGelu", "QuickGelu", "BiasGelu"}  # read from any domain


def _div(a, b):
    q = np.true_divide(a, b)
    return np.trunc(q).astype(np.result_type(a, b)) if np.issubdtype(np.result_type(a, b), np.integer) else q


NUMPY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _div, "Equal": np.equal, "Less": np.less,
         "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
         "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Not": np.logical_not,
         "Neg": np.negative, "Abs": np.abs, "Sqrt": np.sqrt, "Floor": np.floor, "Ceil": np.ceil,
         "Max": np.maximum, "Min": np.minimum, "Sum": np.add, "Where": np.where, "IsNaN": np.isnan}


@dataclass(frozen=True, eq=False)  # no ==: it would compare the elements, arrays
class Val:
    """A tensor that is not an activation: a constant (``data=False``) or
    derived from the network's inputs alone (``data=True``, sample axis
    ``bax``).  ``value``: its elements when known; ``key``: the initializer
    or input it comes from (a weight read twice is counted once)."""

    shape: tuple[int, ...]
    value: object = None  # np.ndarray | None
    data: bool = False
    key: str = ""
    bax: int | None = None
    tests: object = None  # the activation an IsNaN or IsInf tests: a condition, never differentiated

    def known(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class Act:
    """An activation: an output of an operator of the graph being built."""

    ref: Ref

    @property
    def shape(self):
        return self.ref.shape


POISON = object()  # the output of a node the importer cannot map (reported once, at that node)


class Unsupported(Exception):
    """A node the importer cannot map: its op type (and why) go in the summary."""


@dataclass
class _Pending:
    """An operator to add to the graph once every node is read."""

    name: str
    kind: object
    inputs: tuple
    shared: tuple = ()


def _attrs(node) -> dict:
    from onnx import helper

    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _has_data(t) -> bool:
    from onnx import TensorProto

    if t.data_location == TensorProto.EXTERNAL:
        return False
    return bool(t.raw_data or t.float_data or t.int32_data or t.int64_data or t.double_data or t.uint64_data
                or t.string_data) or math.prod(t.dims) == 0


def _tensor_value(t):
    """The elements of a small tensor stored in the file, else ``None``."""
    from onnx import numpy_helper

    if not _has_data(t) or math.prod(t.dims) > SMALL:
        return None
    return numpy_helper.to_array(t)


def _broadcast(*shapes) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in np.broadcast_shapes(*shapes))
    except ValueError:
        raise Unsupported("of shapes that do not broadcast") from None


def _fresh(used) -> str:
    return next(c for c in _LETTERS if c not in used)


def _axis(a: int, r: int) -> int:
    if not -r <= a < r:
        raise Unsupported(f"with axis {a} of a rank-{r} tensor")
    return a % r


def _ints(v) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _reshape_letters(letters: str, shape, new) -> str:
    """Letters of a reshape's output: an axis that lines up with an input
    axis (same size, as many elements before it) keeps its letter; the axis
    holding the sample dimension is ``b``; the others get fresh letters."""
    out = [""] * len(new)
    for j, s in enumerate(new):
        for i, t in enumerate(shape):
            if t == s > 1 and math.prod(shape[:i]) == math.prod(new[:j]) and letters[i] not in out:
                out[j] = letters[i]
    if "b" in letters and "b" not in out:
        bi = letters.index("b")
        start, upto = math.prod(shape[:bi]), math.prod(shape[: bi + 1])
        # the sample axis split in several (a merged batch and sequence unravelled): the samples are the
        # leading factor, where as many elements come before it; else the axis the samples end in
        j = next((j for j in range(len(new)) if math.prod(new[:j]) == start and new[j] > 1 and upto % new[j] == 0
                  and not out[j]), None)
        if j is None:
            j = next((j for j in range(len(new)) if math.prod(new[: j + 1]) >= upto), len(new) - 1)
        out[j] = "b"
    used = set(out) | set(letters) | {"b", "v"}
    for j in range(len(new)):
        if not out[j]:
            out[j] = _fresh(used)
            used.add(out[j])
    return "".join(out)


def _data_letters(x: Val) -> str:
    """Letters of a value read by an operator: ``b`` at the sample axis."""
    if x.data and x.bax == 0 and len(x.shape) in _DATA_LETTERS:
        return _DATA_LETTERS[len(x.shape)]
    used, out = {"b", "v"}, ""
    for i in range(len(x.shape)):
        c = "b" if x.data and i == x.bax else _fresh(used)
        used.add(c)
        out += c
    return out


def _dtype(to: int):
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(to)
