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
  (Split), ``Gather`` of one index of an activation, ``Expand`` of an
  activation (a copy: Concat of the copies), ``Transpose``,
  ``Reshape``, ``Flatten``, ``Squeeze`` and ``Unsqueeze`` (a reshape: Ravel
  then Unravel, as the original tool does; one that changes nothing
  vanishes), and elementwise arithmetic of two or more activations
  (``Add``, ``Sub``, ``Mul``, ``Div``, ``Sum``, ``Max``, ``Min``, ``Mean``,
  ``Pow``, ``Where``...: Elementwise);
* **attention** becomes one FusedAttention (with ``attention="fused"``,
  the default; ``"materialized"`` keeps the matrix products and the
  softmax as they are): ONNX's ``Attention`` (opset 23; 4-axis or 3-axis
  queries, grouped-query keys and values by reshapes), and the pattern
  PyTorch's exporters write for ``scaled_dot_product_attention``,
  ``MatMul(q, k^T)`` scaled by constants (on the product or on ``q`` and
  ``k^T``), masked by tensors of the network's inputs (added, or chosen by
  ``Where``), ``Softmax`` over the last axis, a ``Where(IsNaN(p), 0, p)``
  guard, ``MatMul(p, v)`` (``models/onnx/patterns.py``).  It is causal when
  its mask, computed on a small input with every token present, is;
* **RMS normalisation** written as its parts, ``w * (x * 1 / sqrt(mean(x^2)
  + eps))`` (``Pow``, ``ReduceMean``, ``Add``, ``Sqrt``, ``Reciprocal`` or
  ``Div``, ``Mul``), is one RMSNorm; a ``Gather`` of consecutive rows of a
  weight at indices ``(1, s)`` that do not depend on the input (a learned
  position table read at positions ``0 ... s-1``) is an Embedding read at
  the positions of every sample;
* **activations** (``Relu``, ``Gelu``, ``Sigmoid``, ``Tanh``, ``Erf``,
  ``Clip``, ``RotaryEmbedding``...) and elementwise arithmetic of one activation with constants
  (a scale, a mask) add one to the pointwise count of the operator that
  produced the activation, as the built-in graphs count a convolution's
  ReLU; a constant added after a convolution or a matrix product without a
  bias becomes its bias (free, like Conv's and Gemm's own bias inputs).
  Where the producer has no pointwise count (pooling, concatenation, a graph
  input) the activation is an Elementwise operator of its own;
* ``Dropout``, ``Identity`` and ``Cast`` of an activation vanish; so does
  ``Where(IsNaN(x), c, x)`` (``IsNaN`` and ``IsInf`` of an activation are
  conditions, never differentiated);
* **constants** are folded away: initializers, ``Constant``,
  ``ConstantOfShape``, ``Shape`` and ``Size`` of any tensor (its shape is
  known), and any node whose inputs are all constant (with ``onnx``'s
  reference implementation when needed).  Arithmetic, reshapes and
  gathers of the network's inputs alone (casting ids, building a mask with
  ``Range``, ``Expand``, ``Trilu``, ``GatherND``..., normalising an image)
  are data preparation: free, like reading the input.

The file is read whole, at most 2 GB (a protobuf holds no more; a larger
model keeps its weights in files of their own, which are never read).

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

from errors import InputError, SettingError, printable
from graph import GraphBuilder
from models.files import ModelFileError, file_identity
from models.onnx.importer import Importer
from models.onnx.patterns import Lazy
from models.onnx.reader import _data_inputs, _infer, _live, _parse
from models.onnx.values import CUTOFF, SUPPORTED, Act, Val, _tensor_value
from models.registry import ATTENTION_KINDS, BATCH, check_choice, check_int

__all__ = ["load_onnx", "SUPPORTED", "MAX_ONNX_BYTES"]

MAX_ONNX_BYTES = 2 << 30  # a protobuf message holds at most 2 GB


def load_onnx(path: str, **params):
    """The graph of the ONNX model in ``path`` with ``batch`` (and ``seq``
    when an input has another symbolic dimension, ``attention``: ``fused``
    or ``materialized``)."""
    from readers import read_bytes

    name = printable(os.path.splitext(os.path.basename(path))[0])
    try:
        data = read_bytes(path, MAX_ONNX_BYTES, "protobuf ONNX model (one holds at most 2 GB; a larger model "
                                                "keeps its weights in files of their own)")
    except InputError as e:
        raise ModelFileError(str(e)) from None
    model = _parse(path, data)
    identity = file_identity(path, data)
    inferred = _infer(path, model)
    graph = model.graph
    inputs = _data_inputs(path, graph)
    lead = next((dims[0] for _, dims in inputs if dims), None)  # the first input's leading dimension
    sampled = {inp for inp, dims in inputs if dims and (isinstance(dims[0], str) or dims[0] == lead)}
    symbolic = [(inp, i, d) for inp, dims in inputs for i, d in enumerate(dims)
                if isinstance(d, str) and not (i == 0 and inp in sampled)]
    takes = ("batch", "seq", "attention") if symbolic else ("batch", "attention")
    stray = [k for k in params if k not in takes]
    if stray:
        raise SettingError(stray[0], f"is not a parameter of {name} (it takes {', '.join(takes)})")
    batch = check_int("batch", params.get("batch", BATCH.default))
    if symbolic and params.get("seq") is None:
        inp, axis, dim = symbolic[0]
        raise SettingError("seq", f"must be given: dimension {dim!r} (axis {axis}) of input {inp!r} of {name} "
                                  "is symbolic")
    seq = check_int("seq", params["seq"]) if symbolic else None
    attention = check_choice("attention", params.get("attention", "fused"), ATTENTION_KINDS)
    exported = lead if isinstance(lead, int) else None
    order, live = _live(path, graph)
    given = {t.name for t in graph.initializer} | {inp for inp, _ in inputs}
    written = {o for _, node in order for o in node.output}
    missing = sorted(t for t in live if t not in given and t not in written)
    if missing:
        raise ModelFileError(f"{path}: tensor {missing[0]!r} is read but neither an input, a weight nor written")
    imp = Importer(path, model, inferred, batch, exported, live, order, attention)
    for t in graph.initializer:
        imp.env[t.name] = Val(tuple(t.dims), _tensor_value(t), key=t.name)
    for inp, dims in inputs:
        b = inp in sampled
        shape = tuple(batch if i == 0 and b else seq if isinstance(d, str) else d for i, d in enumerate(dims))
        imp.env[inp] = Val(shape, None, True, inp, 0 if b else None)
    imp.run(order)
    for o in graph.output:  # a pattern left incomplete at an output: its nodes mapped one by one
        if not imp.unsupported and isinstance(imp.env.get(o.name), Lazy):
            imp.env[o.name] = imp.materialize(imp.env[o.name])
    if imp.unsupported:
        listed = "; ".join(f"{op}: {len(nodes)} node{'s' * (len(nodes) > 1)}, first {nodes[0]!r}"
                           for op, nodes in sorted(imp.unsupported.items()))
        raise ModelFileError(f"{path}: operators the importer does not support: {listed}")
    _loss(imp, graph)
    if not imp.pending:
        raise ModelFileError(f"{path}: no layer to plan: what the graph computes from its inputs is all "
                             "elementwise data preparation")
    values = {"batch": batch} if seq is None else {"batch": batch, "seq": seq}
    if "attention" in params:
        values["attention"] = attention
    B = GraphBuilder(name, CUTOFF, params=values, expert="one_weird_trick", batch=batch, source=identity,
                     defaults={"attention": "fused"})
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
