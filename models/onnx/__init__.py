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

import os

from errors import SettingError, printable
from graph import GraphBuilder
from models.files import ModelFileError, file_identity
from models.onnx.importer import Importer
from models.onnx.reader import _data_inputs, _infer, _live, _parse
from models.onnx.values import CUTOFF, SUPPORTED, Act, Val, _tensor_value
from models.registry import BATCH, check_int

__all__ = ["load_onnx", "SUPPORTED"]


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
    imp = Importer(path, model, inferred, batch, exported, live)
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


def _loss(imp: Importer, graph) -> None:
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
