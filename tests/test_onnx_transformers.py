"""PyTorch's ONNX exports of Hugging Face decoders (tests/data/onnx/, written
by benchmarks/onnx_exports.py): GPT-2 and Llama at 2 layers, width 64,
4 heads (Llama also with 2 key/value heads), vocabulary 1000, feed-forward
256, exported by the TorchScript
exporter and by dynamo (below opset 23, and at opset 23 with its Attention,
RMSNormalization and RotaryEmbedding operators), batch and sequence dynamic,
weights stripped.  Each imports as the graph the same config.json builds:
the same parameters, the same layers of each kind, the same matrix work;
and the patterns that make attention and RMS normalisation, on small
graphs."""

from __future__ import annotations

import json
import os
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import run_cli
from cost_model import CostModel, build_costs, evaluate, model_flops
from dp_search import search
from graph import operators, parameter_count
from models import build_graph
from onnx_models import model

DATA = Path(__file__).resolve().parent / "data" / "onnx"
FAMILIES = ("gpt2", "llama", "llama-gqa")  # llama-gqa: 2 key/value heads for the 4 heads
EXPORTERS = ("torchscript", "dynamo", "dynamo-opset23")
FAMILY = {f"hf-{family}-{exporter}.onnx": family for family in FAMILIES for exporter in EXPORTERS}
FILES = list(FAMILY)
PARAMETERS = {"gpt2": 172_288, "llama": 259_392, "llama-gqa": 251_200}  # as the config.json graphs count them
BATCH, SEQ = 8, 128
H = helper.make_node


@lru_cache(maxsize=None)
def imported(name: str, attention: str | None = None):
    """The file's graph (attention fused unless ``attention`` says)."""
    given = {} if attention is None else {"attention": attention}
    return build_graph(str(DATA / name), batch=BATCH, seq=SEQ, **given)


def config(family: str) -> dict:
    return json.loads((DATA / f"{family}.json").read_text(encoding="utf-8"))


def config_graph(family: str, folder: Path):
    """The graph ``config.json`` builds from the values the export was made of."""
    (folder / family).mkdir(exist_ok=True)
    path = folder / family / "config.json"
    path.write_text(json.dumps(config(family)), encoding="utf-8")
    return build_graph(str(path), batch=BATCH, seq=SEQ)


def layers(g) -> Counter:
    """How many operators of each kind that computes (not the reshapes,
    splits, transposes and elementwise arithmetic around them)."""
    return Counter(op.kind.name for op in operators(g) if op.kind.name in
                   ("Embedding", "Norm", "RMSNorm", "FusedAttention", "Softmax", "SoftmaxCrossEntropy"))


def matrix_weights(g) -> int:
    """Elements of the weights the matrix products (FC, Einsum) read."""
    shared = set(g.graph.get("shared", ()))
    return sum(t.size for v, op in enumerate(operators(g)) if op.kind.name in ("FC", "Einsum")
               for i, t in enumerate(op.inputs) if t.role == "weight" and (v, i) not in shared)


def test_the_exports_are_there():
    """Nine small files, their weights stripped (the shapes kept), each
    recording the versions that exported it."""
    assert sorted(p.name for p in DATA.glob("hf-*.onnx")) == sorted(FILES)
    for name in FILES:
        assert os.path.getsize(DATA / name) < 150_000, name
        m = onnx.load(str(DATA / name), load_external_data=False)
        versions = json.loads({p.key: p.value for p in m.metadata_props}["exported_with"])
        assert {"torch", "transformers", "onnx", "onnxscript"} <= versions.keys()
        big = [t for t in m.graph.initializer if np.prod(t.dims) > 256]
        assert big and all(t.data_location == TensorProto.EXTERNAL and not t.raw_data for t in big), name
        assert [i.name for i in m.graph.input] == ["input_ids", "attention_mask"]
        dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in m.graph.input]
        assert all(isinstance(d, str) and d for axes in dims for d in axes), (name, dims)  # batch, sequence dynamic
    opsets = {name: next(o.version for o in onnx.load(str(DATA / name), load_external_data=False).opset_import
                         if o.domain in ("", "ai.onnx")) for name in FILES}
    assert {opsets[f"hf-{f}-dynamo-opset23.onnx"] for f in FAMILIES} == {23}
    def op_types(name):
        return {n.op_type for n in onnx.load(str(DATA / name), load_external_data=False).graph.node}

    assert {"Attention", "RMSNormalization", "RotaryEmbedding"} <= op_types("hf-llama-dynamo-opset23.onnx")
    ops = op_types("hf-llama-dynamo.onnx")
    assert {"IsNaN", "Expand", "GatherND", "Where", "Softmax", "ReduceMean"} <= ops and "Attention" not in ops
    assert json.loads((DATA / "llama-gqa.json").read_text(encoding="utf-8"))["num_key_value_heads"] == 2


def test_the_generator_skips_without_torch(tmp_path):
    """benchmarks/onnx_exports.py needs torch and transformers, which the
    project's requirements leave out: without them it says so, writes
    nothing and succeeds."""
    import importlib.util
    import subprocess
    import sys

    if all(importlib.util.find_spec(m) for m in ("torch", "transformers", "onnxscript")):
        pytest.skip("torch, transformers and onnxscript are installed: the generator would export")
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "onnx_exports.py"
    proc = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.startswith("skipped: ") and "not installed" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", FILES)
def test_imports_as_the_config_builds_it(name, tmp_path):
    """The same parameters, norms, embeddings, attention and loss as the
    config.json graph, and the same matrix work (model FLOP, forward and
    backward).  The TorchScript exporter writes GPT-2's tied embedding
    table a second time, transposed, for the LM head (constant folding of
    ``wte.weight.T``): the file has one more weight of vocab x width, which
    nothing in it says is the same table, so it is counted twice."""
    family = FAMILY[name]
    g, ref = imported(name), config_graph(family, tmp_path)
    values = config(family)
    duplicated = values["vocab_size"] * values["n_embd"] if name == "hf-gpt2-torchscript.onnx" else 0
    assert parameter_count(g) == parameter_count(ref) + duplicated
    assert parameter_count(ref) == PARAMETERS[family]
    assert matrix_weights(g) == matrix_weights(ref) + duplicated
    assert layers(g) == layers(ref) == Counter({"Embedding": 2 if family == "gpt2" else 1, "FusedAttention": 2,
                                                "Norm" if family == "gpt2" else "RMSNorm": 5, "SoftmaxCrossEntropy": 1})
    assert model_flops(g, CostModel()) == pytest.approx(model_flops(ref, CostModel()), rel=1e-12)
    if family == "llama-gqa":  # the keys and values repeated for the 2 heads of their group: copies
        assert Counter(op.kind.name for op in operators(g))["Concat"] >= 4
    for op in operators(g):
        if op.kind.name == "FusedAttention":  # (b, heads, s, d, t); the mask is causal
            assert op.kind.causal and op.space == (BATCH, 4, SEQ, 16, SEQ), (op.name, op.space)
        if op.kind.name == "Einsum":  # no matrix product of two activations is left: attention is fused
            assert any(t.role == "weight" for t in op.inputs), op.name
    assert operators(g)[-1].kind.name == "SoftmaxCrossEntropy" and operators(g)[-1].space == (BATCH, SEQ, 1000)
    assert g.graph["params"] == {"batch": BATCH, "seq": SEQ}


@pytest.mark.parametrize("name", FILES)
def test_plans_on_the_command_line(name):
    out = run_cli("-g", DATA / name, "-p", 8, "--batch", 8, "--seq", 128, "-q").stdout
    lines = out.splitlines()
    assert lines[0] == f"PaSE strategy: {name[:-5]}, batch 8, seq 128, p = 8"
    assert f"read from {name}" in lines[1] and lines[-1].startswith("Total cost: ")
    assert float(lines[-1].split()[-1]) > 0


@pytest.mark.parametrize("name", FILES)
def test_data_parallel_applies(name):
    """Every operator splits its samples: an unravelled batch x sequence
    keeps the samples on its leading axis (data parallelism is a plan
    --plan and --search standard can give)."""
    from config_space import Decision
    from standard import complete, parse, strategy

    g = imported(name)
    decisions = strategy(g, complete(parse("dp=4"), 4, BATCH))
    assert all(isinstance(d, Decision) for d in decisions)
    split = [d for op, d in zip(operators(g), decisions) if "b" in op.dims]
    assert split and all(d["b"] == 4 for d in split)


@pytest.mark.parametrize("name", ["hf-gpt2-dynamo.onnx", "hf-llama-torchscript.onnx"])
def test_the_search_on_the_fused_graph(name):
    g = imported(name)
    r = search(build_costs(g, 8))
    assert r.cost == pytest.approx(evaluate(g, r.strategy).total, rel=1e-12)


@pytest.mark.parametrize("name", ["hf-gpt2-dynamo.onnx", "hf-llama-torchscript.onnx"])
def test_materialized_attention(name):
    """``--attention materialized`` keeps the scores, the softmax and the
    context as the file has them (the NaN guard still vanishes)."""
    g = imported(name, "materialized")
    kinds = Counter(op.kind.name for op in operators(g))
    assert kinds["FusedAttention"] == 0 and kinds["Softmax"] == 2
    assert parameter_count(g) == parameter_count(imported(name))
    assert model_flops(g, CostModel()) == pytest.approx(model_flops(imported(name), CostModel()), rel=1e-12)
    assert g.graph["params"]["attention"] == "materialized"
    softmax = [v for v, op in enumerate(operators(g)) if op.kind.name == "Softmax"]
    assert all(operators(g)[v + 1].kind.name == "Einsum" for v in softmax)  # the guard left nothing between


def test_the_report_names_a_materialized_attention():
    out = run_cli("-g", DATA / "hf-llama-dynamo.onnx", "-p", 4, "--batch", 4, "--seq", 32, "-q",
                  "--attention", "materialized").stdout
    assert out.splitlines()[0] == "PaSE strategy: hf-llama-dynamo, batch 4, seq 32, attention materialized, p = 4"


def test_the_same_graph_whatever_the_hash_seed():
    from conftest import outputs_under_hash_seeds

    code = ("from models import build_graph\nfrom graph import operators\n"
            f"g = build_graph({str(DATA / 'hf-llama-gqa-torchscript.onnx')!r}, batch=2, seq=8)\n"
            "print([(op.name, op.kind, op.space) for op in operators(g)])")
    assert len(outputs_under_hash_seeds(code)) == 1


def test_other_sizes():
    """The sequence past the position table's 128 rows (planned as asked)
    and a batch of 1: the same operators, other shapes."""
    g = build_graph(str(DATA / "hf-gpt2-dynamo.onnx"), batch=1, seq=300)
    att = [op for op in operators(g) if op.kind.name == "FusedAttention"]
    assert [op.space for op in att] == [(1, 4, 300, 16, 300)] * 2 and all(op.kind.causal for op in att)
    assert parameter_count(g) == 172_288


# -- the patterns on small graphs --------------------------------------------------------------------


def _attention_op(path, q_heads=4, kv_heads=2, causal=1, three_axes=False, mask=False):
    """ids -> embedding (width 32) -> q (q_heads), k, v (kv_heads) of width 8 -> Attention -> out."""
    e, d, v = 32, 8, 50
    nodes = [H("Gather", ["wte", "ids"], ["x"], name="embed"),
             H("MatMul", ["x", "wq"], ["q0"], name="q"), H("MatMul", ["x", "wk"], ["k0"], name="k"),
             H("MatMul", ["x", "wv"], ["v0"], name="v")]
    inits = [("wte", (v, e)), ("wq", (e, q_heads * d)), ("wk", (e, kv_heads * d)), ("wv", (e, kv_heads * d)),
             ("wo", (q_heads * d, e))]
    ins = ["q0", "k0", "v0"]
    if not three_axes:
        for t, h in (("q", q_heads), ("k", kv_heads), ("v", kv_heads)):
            inits.append((f"{t}_shape", np.array([0, 0, h, d], np.int64)))
            nodes += [H("Reshape", [f"{t}0", f"{t}_shape"], [f"{t}1"], name=f"{t}/heads"),
                      H("Transpose", [f"{t}1"], [f"{t}2"], name=f"{t}/t", perm=[0, 2, 1, 3])]
        ins = ["q2", "k2", "v2"]
    attrs = {"is_causal": causal}
    if three_axes:
        attrs.update(q_num_heads=q_heads, kv_num_heads=kv_heads)
    inputs = [("ids", ["batch", "sequence"])]
    if mask:
        inputs.append(("ids_mask", ["batch", "sequence"]))
        inits += [("axes", np.array([1, 2], np.int64))]
        nodes += [H("Unsqueeze", ["ids_mask", "axes"], ["m4"]), H("Cast", ["m4"], ["keep"], to=TensorProto.BOOL)]
        ins.append("keep")
    nodes.append(H("Attention", ins, ["c"], name="attention", **attrs))
    out = "c"
    if not three_axes:  # (b, heads, s, d) back to (b, s, heads * d)
        inits.append(("merge", np.array([0, 0, q_heads * d], np.int64)))
        nodes += [H("Transpose", ["c"], ["ct"], perm=[0, 2, 1, 3]), H("Reshape", ["ct", "merge"], ["c3"])]
        out = "c3"
    nodes.append(H("MatMul", [out, "wo"], ["y"], name="out"))
    return model(path, nodes, inputs, [("y", None)], inits, opset=23)


class TestAttentionOperator:
    def test_grouped_query_attention(self, tmp_path):
        g = build_graph(_attention_op(tmp_path / "a.onnx"), batch=2, seq=16)
        ops = {op.name: op for op in operators(g)}
        att = ops["attention"]
        assert att.kind.name == "FusedAttention" and att.kind.causal
        assert att.space == (2, 2, 2, 16, 8, 16)  # (b, key/value heads, heads per group, s, d, t)
        assert [t.shape for t in att.inputs] == [(2, 2, 2, 16, 8), (2, 2, 1, 16, 8), (2, 2, 1, 16, 8)]
        assert ops["attention/heads/unravel"].space == (2, 4, 16, 8)
        assert model_flops(g, CostModel()) > 0

    def test_three_axes(self, tmp_path):
        g = build_graph(_attention_op(tmp_path / "a.onnx", 4, 4, three_axes=True), batch=2, seq=16)
        ops = {op.name: op for op in operators(g)}
        assert ops["attention"].space == (2, 4, 16, 8, 16) and ops["attention"].kind.causal
        assert ops["out"].space == (2, 16, 32, 32)

    @pytest.mark.parametrize("causal", [0, 1])
    def test_a_padding_mask_is_not_causal(self, tmp_path, causal):
        """A mask of the padding alone (every token present: nothing masked)
        is full attention; ``is_causal`` makes it causal."""
        g = build_graph(_attention_op(tmp_path / "a.onnx", 4, 4, causal=causal, mask=True), batch=2, seq=16)
        (att,) = [op for op in operators(g) if op.kind.name == "FusedAttention"]
        assert att.kind.causal == bool(causal)

    def test_a_cache_is_not_supported(self, tmp_path):
        path = _attention_op(tmp_path / "a.onnx", 4, 4)
        m = onnx.load(path, load_external_data=False)
        att = next(n for n in m.graph.node if n.op_type == "Attention")
        att.input.extend(["", "k2", "v2"])
        onnx.save(m, path)
        with pytest.raises(ValueError, match="Attention with a cache of past keys and values: 1 node"):
            build_graph(path, batch=2, seq=16)


def _decoder_block(path, guard=True, scale_on_product=False, mask="causal", read_probabilities=False):
    """ids -> embedding -> q, k, v (4 heads of 8) -> the exporters' attention: scaled q and k^T (or a scaled
    product), a mask added, softmax, the NaN guard, p v -> out."""
    e, h, d, v = 32, 4, 8, 50
    nodes = [H("Gather", ["wte", "ids"], ["x"], name="embed")]
    inits = [("wte", (v, e)), ("heads", np.array([0, 0, h, d], np.int64)),
             ("half", np.array(d ** -0.25, np.float32)), ("zero", np.array(0.0, np.float32)),
             ("merge", np.array([0, 0, e], np.int64)), ("wo", (e, e))]
    for t in "qkv":
        inits.append((f"w{t}", (e, e)))
        nodes += [H("MatMul", ["x", f"w{t}"], [f"{t}0"], name=t), H("Reshape", [f"{t}0", "heads"], [f"{t}1"]),
                  H("Transpose", [f"{t}1"], [f"{t}2"], perm=[0, 2, 3, 1] if t == "k" else [0, 2, 1, 3])]
    if scale_on_product:
        nodes += [H("MatMul", ["q2", "k2"], ["s0"], name="scores"), H("Mul", ["s0", "half"], ["s1"]),
                  H("Mul", ["s1", "half"], ["s"])]
    else:
        nodes += [H("Mul", ["q2", "half"], ["qs"]), H("Mul", ["k2", "half"], ["ks"]),
                  H("MatMul", ["qs", "ks"], ["s"], name="scores")]
    # the mask, from the input's shape alone: 0 where a position may attend, -1e9 elsewhere
    nodes += [H("Shape", ["ids"], ["shape"]), H("Gather", ["shape", "one"], ["n"]),
              H("Range", ["izero", "n", "ione"], ["pos"]), H("Unsqueeze", ["pos", "ax1"], ["row"]),
              H("Unsqueeze", ["pos", "ax0"], ["col"])]
    inits += [("one", np.array(1, np.int64)), ("izero", np.array(0, np.int64)), ("ione", np.array(1, np.int64)),
              ("ax0", np.array([0], np.int64)), ("ax1", np.array([1], np.int64)),
              ("big", np.array(-1e9, np.float32))]
    if mask == "causal":
        nodes.append(H("LessOrEqual", ["col", "row"], ["keep"]))
    else:  # a window: no more than 2 positions back
        inits.append(("two", np.array(2, np.int64)))
        nodes += [H("LessOrEqual", ["col", "row"], ["past"]), H("Sub", ["row", "two"], ["low"]),
                  H("GreaterOrEqual", ["col", "low"], ["near"]), H("And", ["past", "near"], ["keep"])]
    nodes += [H("Where", ["keep", "zero", "big"], ["mask"]), H("Add", ["s", "mask"], ["sm"]),
              H("Softmax", ["sm"], ["p"], name="softmax", axis=-1)]
    if guard:
        nodes += [H("IsNaN", ["p"], ["nan"]), H("Where", ["nan", "zero", "p"], ["pg"])]
    nodes += [H("MatMul", ["pg" if guard else "p", "v2"], ["c"], name="context"),
              H("Transpose", ["c"], ["ct"], perm=[0, 2, 1, 3]), H("Reshape", ["ct", "merge"], ["c3"]),
              H("MatMul", ["c3", "wo"], ["y"], name="out")]
    outputs = [("y", None)]
    if read_probabilities:  # another reader of the softmax: its mean, a second output
        nodes.append(H("ReduceMean", ["p"], ["pm"], name="mean", axes=[-1], keepdims=0))
        outputs.append(("pm", None))
    return model(path, nodes, [("ids", ["batch", "sequence"])], outputs, inits, opset=17)


class TestAttentionPattern:
    @pytest.mark.parametrize("guard", [True, False])
    @pytest.mark.parametrize("scale_on_product", [True, False])
    def test_fused(self, tmp_path, guard, scale_on_product):
        g = build_graph(_decoder_block(tmp_path / "b.onnx", guard, scale_on_product), batch=2, seq=16)
        kinds = [op.kind.name for op in operators(g)]
        assert kinds.count("FusedAttention") == 1 and "Softmax" not in kinds
        assert "Elementwise" not in kinds  # the scales went into the fused operator
        att = next(op for op in operators(g) if op.kind.name == "FusedAttention")
        assert att.name == "context" and att.kind.causal and att.space == (2, 4, 16, 8, 16)

    def test_a_window_is_not_causal(self, tmp_path):
        g = build_graph(_decoder_block(tmp_path / "b.onnx", mask="window"), batch=2, seq=16)
        (att,) = [op for op in operators(g) if op.kind.name == "FusedAttention"]
        assert not att.kind.causal  # costed as the whole score matrix

    def test_probabilities_read_elsewhere_stay_materialized(self, tmp_path):
        """The softmax has another reader: the file's products and softmax,
        each once, as without the pattern."""
        path = _decoder_block(tmp_path / "b.onnx", read_probabilities=True)
        g = build_graph(path, batch=2, seq=16)
        kinds = Counter(op.kind.name for op in operators(g))
        assert kinds["FusedAttention"] == 0 and kinds["Softmax"] == 1 and kinds["Einsum"] == 2
        materialized = build_graph(path, batch=2, seq=16, attention="materialized")
        assert sorted(op.name for op in operators(g)) == sorted(op.name for op in operators(materialized))


def _rms_block(path, weight=True, axis=-1, eps_first=False):
    """ids -> embedding -> the exporters' RMS normalisation -> a projection."""
    e, v = 16, 30
    nodes = [H("Gather", ["wte", "ids"], ["x"], name="embed"), H("Pow", ["x", "two"], ["sq"]),
             H("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             H("Add", ["eps", "ms"] if eps_first else ["ms", "eps"], ["mse"]), H("Sqrt", ["mse"], ["rms"]),
             H("Reciprocal", ["rms"], ["inv"]), H("Mul", ["x", "inv"], ["xn"], name="scaled")]
    if weight:
        nodes.append(H("Mul", ["w", "xn"], ["xw"], name="norm"))
    nodes.append(H("MatMul", ["xw" if weight else "xn", "proj"], ["y"], name="proj"))
    inits = [("wte", (v, e)), ("two", np.array(2.0, np.float32)), ("axes", np.array([axis], np.int64)),
             ("eps", np.array(1e-6, np.float32)), ("w", (e,)), ("proj", (e, v))]
    return model(path, nodes, [("ids", ["batch", "sequence"])], [("y", None)], inits, opset=18)


class TestRMSNormPattern:
    @pytest.mark.parametrize("eps_first", [False, True])
    def test_one_operator(self, tmp_path, eps_first):
        g = build_graph(_rms_block(tmp_path / "r.onnx", eps_first=eps_first), batch=2, seq=8)
        assert [op.kind.name for op in operators(g)] == ["Embedding", "RMSNorm", "FC", "SoftmaxCrossEntropy"]
        assert operators(g)[1].name == "norm" and parameter_count(g) == 30 * 16 + 16 + 16 * 30

    @pytest.mark.parametrize("weight, axis", [(False, -1), (True, 1)])
    def test_other_chains_map_node_by_node(self, tmp_path, weight, axis):
        """Without the weight, or a mean over another axis: the parts, as
        without the pattern (the reduction, elementwise operators)."""
        g = build_graph(_rms_block(tmp_path / "r.onnx", weight=weight, axis=axis), batch=2, seq=8)
        kinds = [op.kind.name for op in operators(g)]
        assert "RMSNorm" not in kinds and "ReduceMean" in kinds and "Elementwise" in kinds


def test_a_position_table_is_an_embedding(tmp_path):
    """GPT-2's ``wpe(arange(s)[None])`` added to the token embedding: an
    Embedding of the table at every sample's positions, and its weight."""
    nodes = [H("Gather", ["wte", "ids"], ["x"], name="embed"), H("Shape", ["ids"], ["shape"]),
             H("Gather", ["shape", "one"], ["n"]), H("Range", ["zero", "n", "one"], ["pos"]),
             H("Unsqueeze", ["pos", "ax0"], ["pos1"]), H("Gather", ["wpe", "pos1"], ["p"], name="positions"),
             H("Add", ["x", "p"], ["h"], name="add"), H("MatMul", ["h", "head"], ["y"], name="head")]
    inits = [("wte", (50, 8)), ("wpe", (32, 8)), ("head", (8, 50)), ("one", np.array(1, np.int64)),
             ("zero", np.array(0, np.int64)), ("ax0", np.array([0], np.int64))]
    path = model(tmp_path / "m.onnx", nodes, [("ids", ["batch", "sequence"])], [("y", None)], inits)
    ops = {op.name: op for op in operators(build_graph(path, batch=4, seq=10))}
    assert ops["positions"].kind.name == "Embedding" and ops["positions"].space == (4, 10, 8, 32)
    assert ops["add"].kind.name == "Elementwise" and len(ops["add"].inputs) == 2
    assert parameter_count(build_graph(path, batch=4, seq=10)) == 50 * 8 + 32 * 8 + 8 * 50


def test_a_nan_guard_on_an_activation_vanishes(tmp_path):
    nodes = [H("MatMul", ["x", "w"], ["h"], name="fc"), H("Softmax", ["h"], ["p"], name="softmax"),
             H("IsNaN", ["p"], ["nan"]), H("Where", ["nan", "zero", "p"], ["g"]),
             H("MatMul", ["g", "w2"], ["y"], name="fc2")]
    path = model(tmp_path / "m.onnx", nodes, [("x", [1, 16])], [("y", None)],
                 [("w", (16, 10)), ("w2", (10, 4)), ("zero", np.array(0.0, np.float32))])
    assert [op.kind.name for op in operators(build_graph(path, batch=8))] == ["FC", "Softmax", "FC",
                                                                               "SoftmaxCrossEntropy"]


def test_an_expanded_activation_is_copied(tmp_path):
    """``Expand`` of an activation (keys repeated for the heads of their
    group): a Concat of the copies along each axis that grows, after an
    ``Unsqueeze`` of the leading axes it adds."""
    nodes = [H("MatMul", ["x", "w"], ["h"], name="fc"), H("Reshape", ["h", "shape"], ["h4"], name="heads"),
             H("Expand", ["h4", "to"], ["e"], name="repeat"), H("MatMul", ["e", "w2"], ["y"], name="fc2")]
    path = model(tmp_path / "m.onnx", nodes, [("x", [1, 16])], [("y", None)],
                 [("w", (16, 8)), ("w2", (4, 4)), ("shape", np.array([1, 2, 1, 4], np.int64)),
                  ("to", np.array([2, 1, 1, 3, 1], np.int64))])
    ops = {op.name: op for op in operators(build_graph(path, batch=8))}
    assert ops["repeat/axes/unravel"].space == (1, 8, 2, 1, 4)
    assert ops["repeat/0"].kind.name == "Concat" and len(ops["repeat/0"].inputs) == 2
    assert ops["repeat"].kind.name == "Concat" and len(ops["repeat"].inputs) == 3
    assert ops["fc2"].space[:4] == (2, 8, 2, 3)

