"""The importer: reads an ONNX graph's nodes in order and plans the
operators, each op type's mapping in the module of its family."""

from __future__ import annotations

from dataclasses import fields, replace

from errors import printable
from graph import Ref
from models.files import ModelFileError
from models.onnx.conv import Convolutions
from models.onnx.elementwise import Elementwise
from models.onnx.folding import Folding
from models.onnx.matmul import Products
from models.onnx.norms import Normalisations
from models.onnx.patterns import Lazy, Patterns
from models.onnx.shapes import Shapes
from models.onnx.values import (
    _CONTRIB,
    _DEFAULT_DOMAINS,
    ACTIVATIONS,
    ARITHMETIC,
    COMPUTE,
    FOLDED,
    POISON,
    POOLS,
    REDUCTIONS,
    SUPPORTED,
    VANISH,
    Act,
    Unsupported,
    Val,
    _attrs,
    _data_letters,
    _ints,
    _Pending,
)


class Importer(Elementwise, Convolutions, Normalisations, Products, Shapes, Folding, Patterns):
    """Reads the nodes in order and plans the operators (see
    ``models/onnx/__init__.py``); ``pending`` are added to a graph at the
    end, so that folding an activation into its producer is a change of a
    planned kind.  ``order``: the ``(position, node)`` pairs it will read;
    ``attention``: ``fused`` (attention patterns become FusedAttention) or
    ``materialized``."""

    def __init__(self, path: str, model, inferred: dict, batch: int, exported_batch: int | None, live: set,
                 order=(), attention: str = "fused"):
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
        self.fused = attention == "fused"
        self.initializers = {t.name for t in model.graph.initializer}
        self.producer = {t: i for i, n in enumerate(model.graph.node) for t in n.output if t}
        self.users: dict[str, list] = {}  # tensor -> the nodes read that read it
        self.users_at: dict[str, list[int]] = {}  # tensor -> their positions in the file
        for i, n in order:
            for t in dict.fromkeys(n.input):
                if t:
                    self.users.setdefault(t, []).append(n)
                    self.users_at.setdefault(t, []).append(i)
        self.outputs = {o.name for o in model.graph.output}
        self.holders: dict[object, list[str]] = {}  # a Lazy -> the tensors holding it (or a test of it)
        self.index = None  # the position of the node being read
        self.made: dict[Lazy, object] = {}  # a pattern's node mapped on its own, once
        self.probed: dict[str, object] = {}  # a mask tensor computed on a small input (or None)
        self._probe_shapes = None  # the tensors' shapes at the probe's input sizes

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
        for i, ref in enumerate(inputs):
            self._check_sizes(name, f"input {i}", ref.shape)
        try:
            op, out_letters = kind.build(name, tuple(inputs))
        except ValueError as e:
            raise ModelFileError(f"{self.path}: {e}") from None
        for i, t in enumerate(op.outputs):
            self._check_sizes(name, f"output {i}", t.shape)
        self._check_sizes(name, "iteration space", op.space)
        for ref, t in zip(inputs, op.inputs):
            if ref.shape != t.shape:
                raise ModelFileError(f"{self.path}: {name}: input shape {ref.shape} is not the {t.shape} it needs")
        shared = tuple(pos for pos, key in weights if key in self.weight_reads)
        self.weight_reads.update(key for _, key in weights if key)
        self.pending.append(_Pending(name, kind, tuple(inputs), shared))
        return tuple(Ref(v, i, t.shape, letters) for i, (t, letters) in enumerate(zip(op.outputs, out_letters)))

    def _check_sizes(self, name: str, what: str, shape) -> None:
        """Refuse an operator's tensor with an empty dimension, or one beyond
        the bound the flags have (:data:`models.registry.MAX_SIZE`)."""
        from models.registry import MAX_SIZE

        for s in shape:
            if s < 1:
                raise ModelFileError(f"{self.path}: node {name!r}: {what} {tuple(shape)} has a dimension of size {s}")
            if s > MAX_SIZE:
                raise ModelFileError(f"{self.path}: node {name!r}: {what} has a dimension of {s:,}; the tool plans "
                                     f"at most {MAX_SIZE:,}")

    def ref(self, h) -> Ref:
        """What an operator reads: an activation, or a graph input (data, or
        a weight for a constant)."""
        if isinstance(h, Act):
            return h.ref
        if h.tests is not None:
            raise Unsupported("reading a test of an activation")
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

    def run(self, nodes) -> None:
        """Map every ``(position, node)``; unsupported ones are collected."""
        for index, node in nodes:
            name = node.name or f"{node.op_type}_{index}"
            self.index = index
            ins = [self.env[i] if i else None for i in node.input]
            if any(h is POISON for h in ins):  # after an unsupported node: only an unknown op type is reported
                if node.op_type not in SUPPORTED | FOLDED or node.domain not in _DEFAULT_DOMAINS:
                    self._unsupported(node, name, Unsupported(""))
                results = [POISON] * len(node.output)
            else:
                try:
                    results = self.match(node, node.op_type, name, ins) if any(
                        isinstance(h, (Act, Lazy)) or isinstance(h, Val) and h.tests is not None for h in ins) else None
                    if results is None:
                        results = self.node(node, name, [self.materialize(h) for h in ins])
                except Unsupported as e:
                    self._unsupported(node, name, e)
                    results = [POISON] * len(node.output)
            for tensor, h in zip(node.output, results):
                if tensor:
                    self.env[tensor] = h
                    held = h if isinstance(h, Lazy) else h.tests if isinstance(h, Val) else None
                    if isinstance(held, Lazy):
                        self.holders.setdefault(held, []).append(tensor)

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
        if op == "Gather" and self.position_rows(a, ins):
            return self.positions(name, *ins)
        if not any(isinstance(h, Act) for h in present):
            reads_input = any(h.data for h in present)
            if op in COMPUTE and reads_input or op == "Gather" and not ins[0].data and ins[1].data:
                return self.layer(node, op, a, name, ins)  # a first layer, reading the network's input
            return self.fold(node, op, a, ins)
        return self.layer(node, op, a, name, ins)

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

    def weight(self, h, what: str) -> Val:
        if not isinstance(h, Val) or h.data:
            raise Unsupported(f"with a computed {what}")
        return h

    def values(self, h, what: str) -> list[int]:
        if not isinstance(h, Val) or not h.known():
            raise Unsupported(f"with computed {what}")
        return _ints(h.value)
