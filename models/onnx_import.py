"""ONNX graphs: map a model file's nodes to operator kinds.

Reads the file with the ``onnx`` package (no runtime, no weight data: tensors
kept outside the file, as models over 2 GB do, are never opened), runs
ONNX's shape inference on it to validate it, and walks its nodes in order:

* **layers** become operators: ``Conv`` (grouped and depthwise too; 2-D),
  ``Gemm`` and ``MatMul`` with a weight (FC), ``MatMul`` of two activations
  and two-operand ``Einsum`` (Einsum), ``Gather`` of rows of a weight
  (Embedding), ``BatchNormalization`` (Norm over the batch, scale and shift
  per channel), ``LayerNormalization``, ``RMSNormalization`` and
  ``SimplifiedLayerNormalization`` (Norm, RMSNorm over the last axis),
  ``LRN`` (a Norm over the channels without weights), ``MaxPool``,
  ``AveragePool``, ``LpPool`` (Pooling), ``GlobalAveragePool``,
  ``GlobalMaxPool``, ``GlobalLpPool`` and the ``Reduce*`` family
  (ReduceMean), ``Softmax`` and
  ``LogSoftmax``, ``Concat``, ``Split``, ``Slice`` of one contiguous range
  (Split), ``Gather`` of one index of an activation, ``Transpose``,
  ``Reshape``, ``Flatten``, ``Squeeze`` and ``Unsqueeze`` (a reshape: Ravel
  then Unravel, as the original tool does; one that changes nothing
  vanishes), and elementwise arithmetic of two or more activations
  (``Add``, ``Sub``, ``Mul``, ``Div``, ``Sum``, ``Max``, ``Min``, ``Mean``,
  ``Pow``, ``Where``...: Elementwise);
* **activations** (``Relu``, ``Gelu``, ``Sigmoid``, ``Tanh``, ``Erf``,
  ``Clip``...) and elementwise arithmetic of one activation with constants
  (a scale, a mask) add one to the pointwise count of the operator that
  produced the activation, as the built-in graphs count a convolution's
  ReLU; a constant added after a convolution or a matrix product without a
  bias becomes its bias (free, like Conv's and Gemm's own bias inputs).
  Where the producer has no pointwise count (pooling, concatenation, a graph
  input) the activation is an Elementwise operator of its own;
* ``Dropout``, ``Identity`` and ``Cast`` of an activation vanish;
* **constants** are folded away: initializers, ``Constant``,
  ``ConstantOfShape``, ``Shape`` and ``Size`` of any tensor (its shape is
  known), and any node whose inputs are all constant (with ``onnx``'s
  reference implementation when needed).  Arithmetic and reshapes of the
  network's inputs alone (casting ids, building a mask, normalising an
  image) are data preparation: free, like reading the input.

The sample dimension is the leading dimension of the graph's data inputs
(those whose leading dimension is symbolic or the first input's), fixed or
symbolic; ``batch`` sets it (a model exported with batch 1 is
planned at ``batch``, and a reshape whose constant target hard-codes the
exported batch size in its first entry follows).  ``seq`` sets every other
symbolic dimension of the inputs; one left unset is an error naming it.

Training needs a loss: a graph output computed by ``Softmax`` or
``LogSoftmax`` becomes SoftmaxCrossEntropy over the same axis.  When no
output is, the graph ends in logits and the first output gets a
SoftmaxCrossEntropy (``loss``) over its last axis longer than 1 other than
the sample axis (none when there is no such axis).

Operators are named after the ONNX nodes (op type and position in the file
where a node has none), each character that is not printable (a line
break, an escape code) written as an escape such as ``\\x1b``.  Anything
else stops the import before any search: one line listing every
unsupported op type, how many nodes have it and the first one's name.
The configuration cutoff is 4, as for the built-in CNNs; the expert
baseline is "one weird trick".
"""

from __future__ import annotations

import heapq
import math
import os
from dataclasses import dataclass, fields, replace

import numpy as np

from errors import SettingError, printable
from graph import GraphBuilder, Ref
from models.registry import BATCH, check_int
from models.files import ModelFileError, file_identity

__all__ = ["load_onnx", "SUPPORTED"]

CUTOFF = 4
ACTIVATIONS = {"Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Gelu", "FastGelu", "QuickGelu", "BiasGelu",
               "Sigmoid", "HardSigmoid", "HardSwish", "Swish", "Silu", "Mish", "Tanh", "Erf", "Softplus", "Softsign",
               "Clip", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Sin", "Cos", "Floor", "Ceil", "Round",
               "Sign", "Not", "ThresholdedRelu", "Shrink"}
ARITHMETIC = {"Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Mean", "Pow", "Where", "Mod", "Equal", "Less",
              "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"}
PRODUCTS = {"Mul", "Div", "Pow", "Max", "Min", "Where"}  # whose gradient needs their inputs
VANISH = {"Identity", "Dropout", "Cast", "CastLike"}
RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}
REDUCTIONS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}
POOLS = {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
NORMS = {"BatchNormalization", "LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization", "LRN"}
#: layers: operators even when they read only the network's inputs
COMPUTE = {"Conv", "Gemm", "MatMul", "Einsum", "Softmax", "LogSoftmax"} | NORMS | POOLS | REDUCTIONS
LAYERS = COMPUTE | {"Gather", "Concat", "Split", "Slice", "Transpose"} | RESHAPES
SUPPORTED = LAYERS | ACTIVATIONS | ARITHMETIC | VANISH
FOLDED = {"Constant", "ConstantOfShape", "Shape", "Size", "Range", "Expand"}  # on constants (and any op there)
SMALL = 1 << 16  # constants computed in full up to this many elements (shapes, indices, masks)
_LETTERS = "cdefghijklmnopqrstuwxyza"  # fresh letters ('b' is the sample, 'v' an embedding's vocabulary)
_DATA_LETTERS = {1: "b", 2: "bs", 3: "bse", 4: "bchw"}
_DEFAULT_DOMAINS = ("", "ai.onnx")
_CONTRIB = {"SimplifiedLayerNormalization", "FastGelu", "QuickGelu", "BiasGelu"}  # read from any domain


def _div(a, b):
    q = np.true_divide(a, b)
    return np.trunc(q).astype(np.result_type(a, b)) if np.issubdtype(np.result_type(a, b), np.integer) else q


#: elementwise ops computed with numpy when their inputs are known constants
NUMPY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _div, "Equal": np.equal, "Less": np.less,
         "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
         "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Not": np.logical_not,
         "Neg": np.negative, "Abs": np.abs, "Sqrt": np.sqrt, "Floor": np.floor, "Ceil": np.ceil,
         "Max": np.maximum, "Min": np.minimum, "Sum": np.add, "Where": np.where}


# -- values --------------------------------------------------------------------------


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


# -- small helpers ------------------------------------------------------------------


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
        upto = math.prod(shape[: letters.index("b") + 1])
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


# -- the importer ---------------------------------------------------------------------


class _Importer:
    """Reads the nodes in order and plans the operators (see the module
    docstring); ``pending`` are added to a graph at the end, so that folding
    an activation into its producer is a change of a planned kind."""

    def __init__(self, path: str, model, inferred: dict, batch: int, exported_batch: int | None, live: set):
        self.path = path
        self.model = model
        self.inferred = inferred  # tensor -> shape by ONNX's inference of the file as it is
        self.batch = batch
        self.exported_batch = exported_batch
        self.live = live  # tensors the graph's outputs depend on
        self.opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), 1)
        self.env: dict[str, object] = {}
        self.pending: list[_Pending] = []
        self.names: set[str] = set()
        self.weight_reads: set[str] = set()
        self.unsupported: dict[str, list[str]] = {}
        self.softmax_axis: dict[int, int] = {}  # a planned Softmax's index -> its axis
        self.current = None  # the node being mapped

    # -- planning operators -----------------------------------------------------------
    def add(self, name: str, kind, *inputs: Ref, weights=()) -> tuple[Ref, ...]:
        """Plan an operator; ``weights``: ``(position, key)`` of the weights
        it reads from the file's tensors (one read before is shared).  The
        name is made printable, then unique."""
        name = printable(name)
        base, k = name, 2
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        v = len(self.pending)
        try:
            op, out_letters = kind.build(name, tuple(inputs))
        except ValueError as e:
            raise ModelFileError(f"{self.path}: {e}") from None
        for ref, t in zip(inputs, op.inputs):
            if ref.shape != t.shape:
                raise ModelFileError(f"{self.path}: {name}: input shape {ref.shape} is not the {t.shape} it needs")
        shared = tuple(pos for pos, key in weights if key in self.weight_reads)
        self.weight_reads.update(key for _, key in weights if key)
        self.pending.append(_Pending(name, kind, tuple(inputs), shared))
        return tuple(Ref(v, i, t.shape, letters) for i, (t, letters) in enumerate(zip(op.outputs, out_letters)))

    def ref(self, h) -> Ref:
        """What an operator reads: an activation, or a graph input (data, or
        a weight for a constant)."""
        if isinstance(h, Act):
            return h.ref
        return Ref(None, 0, tuple(h.shape), _data_letters(h), "data" if h.data else "weight")

    def _field(self, v: int, name: str) -> bool:
        return name in {f.name for f in fields(self.pending[v].kind)}

    def pointwise(self, act: Act, name: str) -> Act:
        """One more pointwise operation per element of ``act``: in the count
        of the operator that made it, or an Elementwise of its own."""
        v = act.ref.node
        if self._field(v, "pw"):  # the kinds with a pointwise count have one output
            self.pending[v].kind = replace(self.pending[v].kind, pw=self.pending[v].kind.pw + 1)
            return act
        from kinds.pointwise import Elementwise

        (out,) = self.add(name, Elementwise(), act.ref)
        return Act(out)

    def bias(self, act: Act, val: Val, name: str) -> Act:
        """A constant added to ``act``: the bias of the convolution or
        matrix product that made it, when it has none and the constant lies
        along its output channels; else one more pointwise operation."""
        kind = self.pending[act.ref.node].kind
        if kind.name in ("Conv", "FC") and not kind.bias:
            units, channel = (kind.out, 1) if kind.name == "Conv" else (kind.units, len(act.shape) - 1)
            at = channel - (len(act.shape) - len(val.shape))  # the channel axis in the constant's shape
            if [s for s in val.shape if s != 1] == [units] and 0 <= at < len(val.shape) and val.shape[at] == units:
                self.pending[act.ref.node].kind = replace(kind, bias=True)
                return act
        return self.pointwise(act, name)

    # -- nodes ------------------------------------------------------------------------
    def run(self, nodes) -> None:
        """Map every ``(position, node)``; unsupported ones are collected."""
        for index, node in nodes:
            name = node.name or f"{node.op_type}_{index}"
            ins = [self.env[i] if i else None for i in node.input]
            if any(h is POISON for h in ins):  # after an unsupported node: only an unknown op type is reported
                if node.op_type not in SUPPORTED | FOLDED or node.domain not in _DEFAULT_DOMAINS:
                    self._unsupported(node, name, Unsupported(""))
                results = [POISON] * len(node.output)
            else:
                try:
                    results = self.node(node, name, ins)
                except Unsupported as e:
                    self._unsupported(node, name, e)
                    results = [POISON] * len(node.output)
            for tensor, h in zip(node.output, results):
                if tensor:
                    self.env[tensor] = h

    def _unsupported(self, node, name: str, e: Unsupported) -> None:
        label = node.op_type if node.domain in _DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
        self.unsupported.setdefault(label + (f" {e}" if str(e) else ""), []).append(name)

    def node(self, node, name, ins) -> list:
        op, a = node.op_type, _attrs(node)
        if node.domain not in _DEFAULT_DOMAINS and op not in _CONTRIB:
            raise Unsupported("")
        present = [h for h in ins if h is not None]
        if op == "Constant":
            return [self.constant(node, a)]
        if op in ("Shape", "Size"):
            return [self.shape_of(op, a, ins[0])]
        if not any(isinstance(h, Act) for h in present):
            reads_input = any(h.data for h in present)
            if op in COMPUTE and reads_input or op == "Gather" and not ins[0].data and ins[1].data:
                return self.layer(node, op, a, name, ins)  # a first layer, reading the network's input
            return self.fold(node, op, a, ins)
        return self.layer(node, op, a, name, ins)

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

    # -- layers -----------------------------------------------------------------------
    def layer(self, node, op, a, name, ins) -> list:
        extra = [POISON] * (len(node.output) - 1)  # outputs a training graph does not read
        for i, tensor in enumerate(node.output[1:], start=1):
            if tensor and tensor in self.live and op not in ("Split",):
                raise Unsupported(f"with output {i} in use")
        if op in VANISH:
            return [ins[0]] + extra
        if op in ACTIVATIONS:
            if any(isinstance(h, Act) for h in ins[1:]):
                raise Unsupported("with a computed parameter")
            x = ins[0]
            return [self.pointwise(x, name) if isinstance(x, Act) else self.standalone(name, x)]
        if op in ARITHMETIC:
            return [self.arithmetic(op, name, ins)]
        if op in REDUCTIONS:
            return [self.reduce(a, name, ins)]
        if op in POOLS:
            return [self.pool(op, a, name, ins[0])] + extra
        handler = getattr(self, "_" + op, None)
        if handler is None:
            raise Unsupported("")
        self.current = node
        out = handler(a, name, ins)
        return out if op == "Split" else out + extra

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

    def weight(self, h, what: str) -> Val:
        if not isinstance(h, Val) or h.data:
            raise Unsupported(f"with a computed {what}")
        return h

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

    def values(self, h, what: str) -> list[int]:
        if not isinstance(h, Val) or not h.known():
            raise Unsupported(f"with computed {what}")
        return _ints(h.value)

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

    def _Gemm(self, a, name, ins):
        from kinds.gemm import FC

        x, w = ins[0], ins[1]
        c = ins[2] if len(ins) > 2 and ins[2] is not None else None
        ta, tb = a.get("transA", 0), a.get("transB", 0)
        if isinstance(w, Val) and not w.data and not ta and (c is None or isinstance(c, Val) and not c.data):
            (out,) = self.add(name, FC(w.shape[0] if tb else w.shape[1], bias=c is not None), self.ref(x),
                              weights=[(1, w.key)])
            return [Act(out)]
        y = self.matmul(name, x, w, ta, tb)
        if c is None:
            return [y]
        return [self.arithmetic("Add", f"{name}/bias", [y, c])]

    def _MatMul(self, a, name, ins):
        from kinds.gemm import FC

        x, w = ins
        if len(x.shape) < 2 or len(w.shape) < 2:
            raise Unsupported("of a vector")
        if isinstance(w, Val) and not w.data and len(w.shape) == 2:
            (out,) = self.add(name, FC(w.shape[1]), self.ref(x), weights=[(1, w.key)])
            return [Act(out)]
        return [self.matmul(name, x, w)]

    def matmul(self, name, x, y, tx=0, ty=0) -> Act:
        """``x @ y`` (each transposed when asked) as an Einsum, the batch
        axes broadcast (a size-1 axis against a longer one is squeezed);
        letters follow the operands' where they can."""
        rx, ry = len(x.shape), len(y.shape)
        lx, ly = self.ref(x).letters, self.ref(y).letters
        mx, kx = (rx - 1, rx - 2) if tx else (rx - 2, rx - 1)
        ky, ny = (ry - 1, ry - 2) if ty else (ry - 2, ry - 1)
        if x.shape[kx] != y.shape[ky]:
            raise Unsupported("of shapes that do not match")
        bx, by = x.shape[:rx - 2], y.shape[:ry - 2]
        batch = _broadcast(bx, by)
        sx, sy, used, out = [""] * rx, [""] * ry, set(), []

        def take(*wanted):
            c = next((c for c in wanted if c and c not in used), None) or _fresh(used | {"b", "v"})
            used.add(c)
            return c

        for j, size in enumerate(batch):
            mine = [(j - len(batch) + len(bx), bx, lx, sx), (j - len(batch) + len(by), by, ly, sy)]
            c = take(*[lt[i] for i, shp, lt, _ in mine if i >= 0 and shp[i] == size])
            out.append(c)
            for i, shp, _, s in mine:
                if i >= 0:
                    s[i] = c if shp[i] == size else take()
        sx[mx] = take(lx[mx])
        sx[kx] = sy[ky] = take(lx[kx], ly[ky])
        sy[ny] = take(ly[ny])
        equation = f"{''.join(sx)},{''.join(sy)}->{''.join(out + [sx[mx], sy[ny]])}"
        return self.einsum(name, equation, x, y)

    def einsum(self, name, equation, x, y) -> Act:
        from kinds.gemm import Einsum

        weights = [(i, h.key) for i, h in enumerate((x, y)) if isinstance(h, Val) and not h.data]
        (out,) = self.add(name, Einsum(equation), self.ref(x), self.ref(y), weights=weights)
        return Act(out)

    def _Einsum(self, a, name, ins):
        if len(ins) != 2:
            raise Unsupported(f"of {len(ins)} operands (only 2)")
        eq = a["equation"].replace(" ", "")
        lhs, arrow, rhs = eq.partition("->")
        subs = lhs.split(",")
        if "..." in eq:  # name the broadcast axes with placeholders
            width = max(len(h.shape) - (len(s) - 3) for h, s in zip(ins, subs) if "..." in s)
            dots = [chr(0x100 + i) for i in range(width)]
            subs = [s.replace("...", "".join(dots[width - (len(h.shape) - len(s) + 3):])) for h, s in zip(ins, subs)]
            rhs = rhs.replace("...", "".join(dots))
        if not arrow:  # numpy's implicit output: broadcast axes, then the letters seen once, sorted
            seen = "".join(subs)
            rhs = "".join(sorted({c for c in seen if c >= chr(0x100)})) + \
                "".join(sorted(c for c in set(seen) if c < chr(0x100) and seen.count(c) == 1))
        rename = {}
        for h, s in zip(ins, subs):
            if len(s) != len(h.shape):
                raise Unsupported("whose subscripts do not match its operands")
            letters = self.ref(h).letters
            if "b" in letters:
                rename.setdefault(s[letters.index("b")], "b")
        used = set(rename.values())
        for c in "".join(subs) + rhs:
            if c not in rename:
                rename[c] = _fresh(used | {"b", "v"})
                used.add(rename[c])
        new = ",".join("".join(rename[c] for c in s) for s in subs) + "->" + "".join(rename[c] for c in rhs)
        return [self.einsum(name, new, *ins)]

    def _Gather(self, a, name, ins):
        from kinds.gemm import Embedding

        table, ids = ins
        axis = a.get("axis", 0)
        if isinstance(table, Val) and not table.data:
            if len(table.shape) != 2 or _axis(axis, 2) != 0 or isinstance(ids, Val) and not ids.data:
                raise Unsupported("of a weight that is not an embedding table")
            r = self.ref(ids)
            letter = _fresh(set(r.letters) | {"b", "v"})
            (out,) = self.add(name, Embedding(table.shape[0], table.shape[1], letter), r, weights=[(1, table.key)])
            return [Act(out)]
        if isinstance(table, Act) and isinstance(ids, Val) and ids.known():
            axis = _axis(axis, len(table.shape))
            size = table.shape[axis]
            index = [i + size if i < 0 else i for i in _ints(ids.value)]
            if not index or index != list(range(index[0], index[0] + len(index))):
                raise Unsupported("of indices that are not one range")
            piece = self.slice(name, table, axis, index[0], index[0] + len(index))
            if np.ndim(ids.value) == 0:  # a scalar index drops the axis
                return [self.reshape(f"{name}/squeeze", piece, piece.shape[:axis] + piece.shape[axis + 1:])]
            return [piece]
        raise Unsupported("with computed indices")

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

    # -- constants and data -------------------------------------------------------------
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
        if op == "Gather" and isinstance(ins[1], Val) and not ins[1].data:
            axis = _axis(a.get("axis", 0), len(x.shape))
            shape = x.shape[:axis] + tuple(ins[1].shape) + x.shape[axis + 1:]
            moved = None if bax is None or bax == axis else bax if bax < axis else bax + len(ins[1].shape) - 1
            return shape, moved
        return None

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


def _dtype(to: int):
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(to)


# -- reading a file -------------------------------------------------------------------------


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
    return model


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
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
                for d in inp.type.tensor_type.shape.dim]
        out.append((inp.name, dims))
    return out


def load_onnx(path: str, **params):
    """The graph of the ONNX model in ``path`` with ``batch`` (and ``seq``
    when an input has another symbolic dimension)."""
    name = printable(os.path.splitext(os.path.basename(path))[0])
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read it: {e.strerror}") from None
    model = _parse(path, data)
    identity = file_identity(path)
    inferred = _infer(path, model)
    graph = model.graph
    inputs = _data_inputs(path, graph)
    lead = next((dims[0] for _, dims in inputs if dims), None)  # the first input's leading dimension
    sampled = {inp for inp, dims in inputs if dims and (isinstance(dims[0], str) or dims[0] == lead)}
    symbolic = [(inp, i, d) for inp, dims in inputs for i, d in enumerate(dims)
                if isinstance(d, str) and not (i == 0 and inp in sampled)]
    takes = ("batch", "seq") if symbolic else ("batch",)
    stray = [k for k in params if k not in takes]
    if stray:
        raise SettingError(stray[0], f"is not a parameter of {name} (it takes {', '.join(takes)})")
    batch = check_int("batch", params.get("batch", BATCH.default))
    if symbolic and params.get("seq") is None:
        inp, axis, dim = symbolic[0]
        raise SettingError("seq", f"must be given: dimension {dim!r} (axis {axis}) of input {inp!r} of {name} "
                                  "is symbolic")
    seq = check_int("seq", params["seq"]) if symbolic else None
    exported = lead if isinstance(lead, int) else None
    order, live = _live(path, graph)
    given = {t.name for t in graph.initializer} | {inp for inp, _ in inputs}
    written = {o for _, node in order for o in node.output}
    missing = sorted(t for t in live if t not in given and t not in written)
    if missing:
        raise ModelFileError(f"{path}: tensor {missing[0]!r} is read but neither an input, a weight nor written")
    imp = _Importer(path, model, inferred, batch, exported, live)
    for t in graph.initializer:
        imp.env[t.name] = Val(tuple(t.dims), _tensor_value(t), key=t.name)
    for inp, dims in inputs:
        b = inp in sampled
        shape = tuple(batch if i == 0 and b else seq if isinstance(d, str) else d for i, d in enumerate(dims))
        imp.env[inp] = Val(shape, None, True, inp, 0 if b else None)
    imp.run(order)
    if imp.unsupported:
        listed = "; ".join(f"{op}: {len(nodes)} node{'s' * (len(nodes) > 1)}, first {nodes[0]!r}"
                           for op, nodes in sorted(imp.unsupported.items()))
        raise ModelFileError(f"{path}: operators the importer does not support: {listed}")
    _loss(imp, graph)
    if not imp.pending:
        raise ModelFileError(f"{path}: no layer to plan: what the graph computes from its inputs is all "
                             "elementwise data preparation")
    values = {"batch": batch} if seq is None else {"batch": batch, "seq": seq}
    B = GraphBuilder(name, CUTOFF, params=values, expert="one_weird_trick", batch=batch, source=identity)
    for p in imp.pending:
        B.add(p.name, p.kind, *p.inputs, shared=p.shared)
    return B.graph


def _loss(imp: _Importer, graph) -> None:
    """Output softmaxes become the loss; without one, a loss after the
    first output (the logits)."""
    from kinds.pointwise import SoftmaxCrossEntropy

    acts = [h for h in (imp.env.get(o.name) for o in graph.output) if isinstance(h, Act)]
    softmaxes = [h.ref.node for h in acts if h.ref.node in imp.softmax_axis]
    for v in softmaxes:
        imp.pending[v].kind = SoftmaxCrossEntropy(imp.softmax_axis[v])
    if softmaxes or not acts:
        return
    x = acts[0]
    classes = [i for i, s in enumerate(x.shape) if s > 1 and x.ref.letters[i] != "b"]
    if classes:
        imp.add("loss", SoftmaxCrossEntropy(classes[-1]), x.ref)
