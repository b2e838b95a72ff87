"""Patterns of several nodes that make one operator: attention and RMS normalisation.

Exporters write PyTorch's ``scaled_dot_product_attention`` as its parts,
``softmax(q k^T * scale + mask) v`` (the scale often split as ``sqrt(scale)``
on ``q`` and on ``k^T``, the softmax followed by ``Where(IsNaN(p), 0, p)``,
which zeroes rows a mask leaves empty), and Llama's RMS normalisation as
``w * (x * 1 / sqrt(mean(x^2) + eps))``.  The importer reads such a chain
node by node without mapping it: each node's output is a :class:`Lazy`, the
chain so far.  When the chain completes it becomes one operator
(FusedAttention; RMSNorm); a reader of a partial chain that is not its next
step gets the nodes mapped one by one, as if no pattern had been looked for
(:meth:`Patterns.materialize`), so nothing the file computes is lost.

Whether attention is causal is read from its mask: the nodes that compute
the mask from the network's inputs are run (ONNX's reference
implementation) on a small input, a batch of one sample of a few positions
with every token attended (:meth:`Patterns.probe`); a mask that lets each
position see itself and the positions before it is causal, one that
masks nothing is full attention, anything else (or a mask that cannot be
computed so) is costed as full attention.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from models.onnx.values import (
    _DEFAULT_DOMAINS,
    POISON,
    VANISH,
    Act,
    Unsupported,
    Val,
    _attrs,
    _axis,
    _fresh,
    _has_data,
)

PROBE = 6  # positions (every symbolic non-batch dimension) of the small input a mask is computed on


@dataclass(eq=False)  # compared and hashed by identity
class Lazy:
    """The output of ``node``, part of a pattern not yet complete.

    ``what``: how far the pattern got (``scaled``: an activation times a
    constant scalar, read by a matrix product; ``scores``: ``q k^T`` with
    scales and masks; ``probs``: their softmax; ``square``, ``meansq``,
    ``rms``, ``inverse``, ``normed``: the steps of RMS normalisation).
    ``base``: the activation it started from (``q`` for attention, ``x``
    for a norm); ``keys``: ``k^T`` of the scores; ``masks``: the tensors
    added to (or selecting) the scores, with how they mask."""

    what: str
    node: object
    name: str
    ins: tuple
    shape: tuple
    base: Act | None = None
    keys: Act | None = None
    masks: tuple = ()


def _same(a, b) -> bool:
    return a is b or isinstance(a, Act) and isinstance(b, Act) and a == b


def _scalar(h) -> bool:
    """A constant of one element whose value is known."""
    return isinstance(h, Val) and not h.data and h.tests is None and h.known() and np.size(h.value) == 1


class Patterns:
    """Mixin of :class:`models.onnx.importer.Importer` (see the module docstring)."""

    def materialize(self, h):
        """``h`` as the importer maps it without patterns: a :class:`Lazy`
        becomes its node mapped on its own (once), after the nodes it reads;
        a test of a Lazy (``IsNaN``) a test of that mapped activation."""
        if isinstance(h, Val) and isinstance(h.tests, Lazy):
            return replace(h, tests=self.materialize(h.tests))
        if not isinstance(h, Lazy):
            return h
        if h not in self.made:
            ins = [self.materialize(x) if x is not None else None for x in h.ins]
            current = self.current
            self.made[h] = self.node(h.node, h.name, ins)[0]
            self.current = current
        return self.made[h]

    def match(self, node, op, name, ins) -> list | None:
        """The outputs of ``node`` when it starts or continues a pattern
        (or completes one); ``None`` when it does neither."""
        if node.domain not in _DEFAULT_DOMAINS:
            return None
        lazies = [h for h in ins if isinstance(h, Lazy)]
        if op in VANISH and len(lazies) == 1 and ins[0] is lazies[0]:
            if any(t and t in self.live for t in node.output[1:]):
                return None
            return [ins[0]] + [POISON] * (len(node.output) - 1)
        if op in ("Shape", "Size") and lazies:  # a shape is known without mapping the node
            return [self.shape_of(op, _attrs(node), ins[0])]
        if op in ("IsNaN", "IsInf") and lazies:
            return [Val(tuple(ins[0].shape), tests=ins[0])]
        if op == "Where" and len(ins) == 3:
            guarded = self.guard(ins)
            if guarded is not None:
                return [guarded]
        if len(lazies) > 1:  # q and k^T, each scaled
            if op == "MatMul" and self.fused and all(h.what == "scaled" for h in lazies):
                out = self.scores(node, name, ins)
                return None if out is None else [out]
            return None
        lazy = lazies[0] if lazies else None
        if lazy is None:
            out = self.attention_step(node, op, name, ins, None)
            out = self.norm_step(node, op, name, ins, None) if out is None else out
        elif lazy.what in ("scaled", "scores", "probs"):
            out = self.attention_step(node, op, name, ins, lazy)
        else:
            out = self.norm_step(node, op, name, ins, lazy)
        return None if out is None else [out] + [POISON] * (len(node.output) - 1)

    def guard(self, ins):
        """``Where(IsNaN(x), c, x)`` with a constant ``c``: ``x`` (it only
        replaces the NaN of a row a mask leaves empty)."""
        cond, x, y = ins
        if isinstance(cond, Val) and cond.tests is not None and _same(cond.tests, y) and _scalar(x):
            return y
        return None

    def exclusive(self, last: Lazy) -> bool:
        """Whether the pattern ending in ``last`` is read only by itself and
        by the node being read (which completes it): no node and no graph
        output reads one of its parts, so the parts need not be computed."""
        chain, stack = set(), [last]
        while stack:
            h = stack.pop()
            if isinstance(h, Lazy) and h not in chain:
                chain.add(h)
                stack.extend(h.ins)
            elif isinstance(h, Val) and isinstance(h.tests, Lazy):
                stack.append(h.tests)
        graph = self.model.graph
        for h in chain:
            for t in self.holders.get(h, ()):
                if t in self.outputs:
                    return False
                for i in self.users_at.get(t, ()):
                    if i == self.index:
                        continue
                    for o in graph.node[i].output:
                        held = self.env.get(o) if o else None
                        held = held.tests if isinstance(held, Val) else held
                        if o and held not in chain:
                            return False
        return True

    # -- attention ----------------------------------------------------------------------

    def _act(self, h):
        """An activation, or the activation a ``scaled`` Lazy scales."""
        if isinstance(h, Lazy) and h.what == "scaled":
            return h.base
        return h if isinstance(h, Act) else None

    def attention_step(self, node, op, name, ins, lazy):
        if lazy is None:
            if op in ("Mul", "Div") and self.fused and len(ins) == 2:
                x, c = ins
                if op == "Mul" and isinstance(c, Act):
                    x, c = c, x
                users = self.users.get(node.output[0], ())
                if isinstance(x, Act) and _scalar(c) and len(users) == 1 and users[0].op_type == "MatMul":
                    return Lazy("scaled", node, name, tuple(ins), tuple(x.shape), base=x)
            if op == "MatMul" and self.fused:
                return self.scores(node, name, ins)
            return None
        if lazy.what == "scaled":
            return self.scores(node, name, ins) if op == "MatMul" else None
        if lazy.what == "scores":
            return self.scores_step(node, op, name, ins, lazy)
        if op == "MatMul" and ins[0] is lazy and isinstance(ins[1], Act):  # probs: p v
            return self.context(name, lazy, ins[1])
        return None

    def scores(self, node, name, ins):
        """``q k^T`` of two activations (``q``: ``(..., s, d)``, ``k^T``:
        ``(..., d, t)``, their leading axes alike or 1), the start of attention."""
        q, kt = (self._act(h) for h in ins)
        if q is None or kt is None or len(q.shape) < 3 or len(q.shape) != len(kt.shape):
            return None
        if q.shape[-1] != kt.shape[-2] or any(a != b and 1 not in (a, b) for a, b in zip(q.shape[:-2], kt.shape[:-2])):
            return None
        lead = tuple(max(a, b) for a, b in zip(q.shape[:-2], kt.shape[:-2]))
        return Lazy("scores", node, name, tuple(ins), lead + (q.shape[-2], kt.shape[-1]), base=q, keys=kt)

    def scores_step(self, node, op, name, ins, lazy):
        """Scaling and masking of the scores, then their softmax."""
        others = [(i, h) for i, h in enumerate(ins) if h is not lazy]
        if op == "Softmax" and len(ins) == 1:
            axis = _attrs(node).get("axis", 1 if self.opset < 13 else -1)
            if _axis(axis, len(lazy.shape)) == len(lazy.shape) - 1:
                return replace(lazy, what="probs", node=node, name=name, ins=tuple(ins))
            return None
        if any(not isinstance(h, Val) or h.tests is not None for _, h in others):
            return None
        if op in ("Mul", "Div") and len(others) == 1 and _scalar(others[0][1]) and (op == "Mul" or ins[0] is lazy):
            return replace(lazy, node=node, name=name, ins=tuple(ins))
        masks = ()
        if op == "Add" and len(others) == 1:
            i, m = others[0]
            masks = ((node.input[i], "auto"),)
            shape = m.shape
        elif op == "Where" and len(ins) == 3 and ins[0] is not lazy:
            (_, cond), (_, other) = others
            masks = ((node.input[0], "keep" if ins[1] is lazy else "drop"),)
            shape = np.broadcast_shapes(cond.shape, other.shape)
        else:
            return None
        try:
            if tuple(np.broadcast_shapes(tuple(shape), lazy.shape)) != lazy.shape:
                return None
        except ValueError:
            return None
        return replace(lazy, node=node, name=name, ins=tuple(ins), masks=lazy.masks + masks)

    def context(self, name, probs: Lazy, v: Act):
        """``p v`` of the softmax ``p``: one FusedAttention of ``q``, ``k``
        (``k^T`` transposed back, a free view) and ``v``."""
        from kinds.shape import Transpose

        q, kt = probs.base, probs.keys
        if not self.exclusive(probs):
            return None
        if tuple(v.shape[:-2]) != tuple(kt.shape[:-2]) or v.shape[-2] != kt.shape[-1] or v.shape[-1] != q.shape[-1]:
            return None
        r = len(kt.shape)
        (k,) = self.add(f"{name}/keys", Transpose(tuple(range(r - 2)) + (r - 1, r - 2)), kt.ref)
        return self.fused_attention(name, q, Act(k), v, self.causal(probs.masks))

    def fused_attention(self, name, q: Act, k: Act, v: Act, causal: bool) -> Act:
        """FusedAttention of ``q`` ``(..., heads, s, d)`` against ``k``, ``v``
        ``(..., key/value heads, t, d)``; fewer key/value heads than heads
        (grouped-query attention) by reshapes, ``(..., g, r, s, d)``
        against ``(..., g, 1, t, d)``."""
        from kinds.attention import FusedAttention

        if k.shape != v.shape or len(q.shape) != len(k.shape) or q.shape[-1] != k.shape[-1]:
            raise Unsupported("of queries, keys and values of shapes that do not match")
        shape = tuple(q.shape)
        lead_q, lead_k = shape[:-2], tuple(k.shape[:-2])
        if any(a != b and b != 1 for a, b in zip(lead_q[:-1], lead_k[:-1])):
            raise Unsupported("of keys that do not match the queries")
        grouped = len(shape) >= 4 and lead_q[-1] != lead_k[-1] and lead_k[-1] > 1
        if grouped:
            g = lead_k[-1]
            if lead_q[-1] % g:
                raise Unsupported(f"of {g} key/value heads for {lead_q[-1]} heads")
            q = self.reshape(f"{name}/groups", q, shape[:-3] + (g, lead_q[-1] // g) + shape[-2:])
            k = self.reshape(f"{name}/key_groups", k, k.shape[:-3] + (g, 1) + k.shape[-2:])
            v = self.reshape(f"{name}/value_groups", v, v.shape[:-3] + (g, 1) + v.shape[-2:])
        rq = self.ref(q)
        if "b" not in rq.letters:
            raise Unsupported("of queries without the sample dimension")
        letter = _fresh(set(rq.letters) | {"b", "v"})
        (out,) = self.add(name, FusedAttention(causal=causal, letter=letter), rq, self.ref(k), self.ref(v))
        out = Act(out)
        return self.reshape(f"{name}/heads", out, shape) if grouped else out

    def _Attention(self, a, name, ins):
        """ONNX's Attention (opset 23): queries, keys and values of 4 axes
        ``(b, heads, positions, d)``, or of 3 ``(b, positions, heads * d)``
        with ``q_num_heads`` and ``kv_num_heads``; a mask (boolean: where
        to attend; else added to the scores) and ``is_causal``."""
        from kinds.shape import Transpose

        q, k, v = ins[:3]
        mask = ins[3] if len(ins) > 3 else None
        if any(h is not None for h in ins[4:]):
            raise Unsupported("with a cache of past keys and values")
        if not all(isinstance(h, Act) for h in (q, k, v)):
            raise Unsupported("of queries, keys or values that are not activations")
        if mask is not None and not isinstance(mask, Val):
            raise Unsupported("with a computed mask")
        causal = bool(a.get("is_causal", 0))
        if not causal and mask is not None:
            causal = self.causal(((self.current.input[3], "auto"),))
        if len(q.shape) == 4:
            return [self.fused_attention(name, q, k, v, causal)]
        if len(q.shape) != 3 or "q_num_heads" not in a or "kv_num_heads" not in a:
            raise Unsupported("of queries of 3 axes without their number of heads")
        heads = []
        for tag, h, n in (("queries", q, a["q_num_heads"]), ("keys", k, a["kv_num_heads"]),
                          ("values", v, a["kv_num_heads"])):
            b, s, width = h.shape
            if n < 1 or width % n:
                raise Unsupported(f"of {n} heads that do not divide a width of {width}")
            x = self.reshape(f"{name}/{tag}", h, (b, s, n, width // n))
            (t,) = self.add(f"{name}/{tag}/t", Transpose((0, 2, 1, 3)), x.ref)
            heads.append(Act(t))
        out = self.fused_attention(name, *heads, causal)
        (t,) = self.add(f"{name}/merge/t", Transpose((0, 2, 1, 3)), out.ref)
        return [self.reshape(f"{name}/merge", Act(t), tuple(q.shape[:2]) + (q.shape[2] * v.shape[2] // k.shape[2],))]

    def _IsNaN(self, a, name, ins):
        """A test of an activation: a condition (of ``Where``), never differentiated."""
        return [Val(tuple(ins[0].shape), tests=ins[0])]

    _IsInf = _IsNaN

    # -- the mask ------------------------------------------------------------------------

    def causal(self, masks) -> bool:
        """Whether ``masks`` (``(tensor, how)``: ``auto``, added to the
        scores, or a boolean if it is one; ``keep``, ``drop``: a condition
        selecting the scores or the constant) leave a causal pattern."""
        allowed = None
        for tensor, how in masks:
            m = self.probe(tensor)
            if m is None or m.ndim < 2:
                return False
            if m.dtype == np.bool_:
                keep = m if how != "drop" else ~m
            elif how == "auto" and np.all((m == 0) | (m <= -1e4)):
                keep = m == 0
            else:
                return False
            allowed = keep if allowed is None else np.logical_and(*np.broadcast_arrays(allowed, keep))
        if allowed is None:
            return False
        s, t = allowed.shape[-2:]
        rows = allowed.reshape(-1, s, t)
        if s != t or s < 2 or not all(np.array_equal(r, rows[0]) for r in rows):
            return False
        return bool(np.array_equal(rows[0], np.tril(np.ones((s, t), dtype=bool))))

    def probe(self, tensor: str):
        """``tensor`` computed from the network's inputs at a small size (a
        batch of 1, ``PROBE`` positions for every other symbolic dimension,
        every input 1: each token present), or ``None`` when it cannot be
        (it reads a weight stored outside the file, or an op the reference
        implementation lacks)."""
        if tensor in self.probed:
            return self.probed[tensor]
        self.probed[tensor] = None
        from onnx import helper, numpy_helper
        from onnx.reference import ReferenceEvaluator

        graph = self.model.graph
        inits = {t.name: t for t in graph.initializer}
        inputs = {i.name: i for i in graph.input if i.name not in inits}
        shapes = self.probe_shapes()
        nodes, seen, stack = {}, set(), [tensor]
        while stack:
            t = stack.pop()
            if t in seen or not t:
                continue
            seen.add(t)
            if t in self.producer:
                i = self.producer[t]
                n = graph.node[i]
                if i in nodes:
                    continue
                if n.op_type in ("Shape", "Size") and n.input[0] in shapes:  # the shape, not what has it
                    dims = shapes[n.input[0]]
                    if n.op_type == "Size":
                        value = np.asarray(int(np.prod(dims)), np.int64)
                    else:
                        a, r = _attrs(n), len(dims)
                        start, end = (max(0, min(r, x + r if x < 0 else x)) for x in (a.get("start", 0),
                                                                                        a.get("end", r)))
                        value = np.asarray(dims[start:end], np.int64)
                    nodes[i] = helper.make_node("Constant", [], [t], value=numpy_helper.from_array(value))
                    continue
                nodes[i] = n
                stack.extend(n.input)
            elif t in inits and not _has_data(inits[t]):
                return None
        if len(nodes) > 5000:
            return None
        feeds = {}
        for name, inp in inputs.items():
            if name in seen:
                feeds[name] = np.ones(self.probe_input_shape(inp),
                                      dtype=helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type))
        nodes = [nodes[i] for i in sorted(nodes)]
        used = [inits[t] for t in sorted(seen) if t in inits]
        g = helper.make_graph(nodes, "probe", [inputs[n] for n in feeds],
                              [helper.make_tensor_value_info(tensor, 0, None)], used)
        try:
            (out,) = ReferenceEvaluator(self.submodel(g)).run(None, feeds)
        except Exception:  # the reference implementation's own errors, of many types
            return None
        self.probed[tensor] = np.asarray(out)
        return self.probed[tensor]

    def submodel(self, graph):
        """A model of ``graph`` with the file's opsets and functions."""
        from onnx import helper

        model = helper.make_model(graph, opset_imports=list(self.model.opset_import),
                                  functions=list(self.model.functions))
        model.ir_version = self.model.ir_version
        return model

    @staticmethod
    def probe_input_shape(inp) -> list[int]:
        """The shape of a data input in a probe: a batch of 1, ``PROBE``
        for every other symbolic dimension."""
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in inp.type.tensor_type.shape.dim]
        return [1 if j == 0 else PROBE if d is None else d for j, d in enumerate(dims)]

    def probe_shapes(self) -> dict:
        """The shapes of the tensors of the graph at the probe's input sizes
        (ONNX's shape inference on the graph with those inputs, the large
        weights given as inputs of their shape), once."""
        if self._probe_shapes is not None:
            return self._probe_shapes
        from onnx import TensorProto, helper, shape_inference

        from models.onnx.values import SMALL

        graph = self.model.graph
        inits = {t.name for t in graph.initializer}
        inputs = []
        for inp in graph.input:
            if inp.name not in inits:
                tt = inp.type.tensor_type
                inputs.append(helper.make_tensor_value_info(inp.name, tt.elem_type, self.probe_input_shape(inp)))
        small, large = [], []
        for t in graph.initializer:
            if t.data_location != TensorProto.EXTERNAL and int(np.prod(t.dims)) <= SMALL:
                small.append(t)
            else:
                large.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        g = helper.make_graph(list(graph.node), "shapes", inputs + large, list(graph.output), small)
        self._probe_shapes = {}
        try:
            inferred = shape_inference.infer_shapes(self.submodel(g), data_prop=True)
        except Exception:  # onnx raises several types
            return self._probe_shapes
        for vi in list(inferred.graph.value_info) + list(inferred.graph.input):
            t = vi.type.tensor_type
            if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
                self._probe_shapes[vi.name] = tuple(d.dim_value for d in t.shape.dim)
        return self._probe_shapes

    # -- RMS normalisation ---------------------------------------------------------------

    def norm_step(self, node, op, name, ins, lazy):
        from kinds.pointwise import RMSNorm

        a = _attrs(node)
        if lazy is None:
            if op == "Pow" and isinstance(ins[0], Act) and _scalar(ins[1]) and float(ins[1].value) == 2.0:
                return Lazy("square", node, name, tuple(ins), tuple(ins[0].shape), base=ins[0])
            return None
        x, r = lazy.base, len(lazy.base.shape)

        def nxt(what, shape=lazy.shape):
            return Lazy(what, node, name, tuple(ins), shape, base=x)

        rest = [h for h in ins if h is not lazy]
        if lazy.what == "square" and op == "ReduceMean" and ins[0] is lazy:
            if "axes" in a:
                axes = a["axes"]
            elif len(ins) > 1 and _known_ints(ins[1]) is not None:
                axes = _known_ints(ins[1])
            else:
                return None
            if [_axis(i, r) for i in axes] == [r - 1] and a.get("keepdims", 1):
                return nxt("meansq", tuple(x.shape[:-1]) + (1,))
        elif lazy.what == "meansq" and op == "Add" and len(rest) == 1 and _scalar(rest[0]):
            return nxt("meansq")
        elif lazy.what == "meansq" and op == "Sqrt":
            return nxt("rms")
        elif lazy.what == "rms" and (op == "Reciprocal" or op == "Div" and ins[1] is lazy and _scalar(ins[0])
                                     and float(ins[0].value) == 1.0):
            return nxt("inverse")
        elif (lazy.what == "inverse" and op == "Mul" or lazy.what == "rms" and op == "Div" and ins[1] is lazy) \
                and len(rest) == 1 and _same(rest[0], x):
            return nxt("normed", tuple(x.shape))
        elif lazy.what == "normed" and op == "Mul" and len(rest) == 1:
            w = rest[0]
            if isinstance(w, Val) and not w.data and w.tests is None and [s for s in w.shape if s != 1] == \
                    [x.shape[-1]] and len(w.shape) <= r and w.shape[-1] == x.shape[-1] and self.exclusive(lazy):
                (out,) = self.add(name, RMSNorm(-1), self.ref(x))
                return Act(out)
        return None


def _known_ints(h):
    if isinstance(h, Val) and h.known():
        return [int(v) for v in np.asarray(h.value).reshape(-1)]
    return None
