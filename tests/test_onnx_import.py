"""models/onnx/: real ONNX files written by others (the model-zoo
graphs the onnx package ships without their weights), the built-in CNNs
written as ONNX and read back against the reference numbers, and small
graphs for each mapping rule and each bad input."""

from __future__ import annotations

import os
import re
from functools import lru_cache

import numpy as np
import onnx
import pytest
from onnx import helper

from baselines import data_parallel, expert
from conftest import PROCS, built, reference, rel, run_cli
from cost_model import build_costs, evaluate
from dp_search import search
from graph import operators, parameter_count
from models import build_graph
from onnx_models import export, model

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
ZOO = sorted(f for f in os.listdir(LIGHT) if f.endswith(".onnx"))
#: the published parameter counts (Caffe's BVLC AlexNet; torchvision's ResNet-50, VGG-19, DenseNet-121)
PUBLISHED = {"light_bvlc_alexnet.onnx": 60_965_224, "light_resnet50.onnx": 25_557_032,
             "light_vgg19.onnx": 143_667_240, "light_densenet121.onnx": 7_978_856}
H = helper.make_node


@lru_cache(maxsize=None)
def zoo(name: str, batch: int = 128):
    return build_graph(os.path.join(LIGHT, name), batch=batch)


def kinds(g) -> list[str]:
    return [op.kind.name for op in operators(g)]


def by_name(g):
    return {op.name: op for op in operators(g)}


def test_the_zoo_is_there():
    assert len(ZOO) == 9 and {"light_resnet50.onnx", "light_inception_v2.onnx", "light_zfnet512.onnx"} <= set(ZOO)


@pytest.mark.parametrize("name", ZOO)
class TestModelZoo:
    def test_import(self, name):
        g = zoo(name)
        ops = operators(g)
        assert len(ops) > 10 and ops[-1].kind.name == "SoftmaxCrossEntropy"
        assert all(op.space[op.dims.index("b")] == 128 for op in ops)  # exported at batch 1, planned at 128
        assert g.graph["source"]["file"] == name and g.graph["cutoff"] == 4
        assert all(op.name for op in ops) and len({op.name for op in ops}) == len(ops)
        if name in PUBLISHED:
            assert parameter_count(g) == PUBLISHED[name]

    def test_a_device_plans_it_with_stages_searched(self, name):
        """On a real device the default search (stages and micro-batches
        beside the plan without them) plans every zoo model, never dearer
        than the plan without stages; VGG-19, whose chain is four lone
        convolutions, once failed in the stages' costs."""
        def total(*more):
            out = run_cli("-g", os.path.join(LIGHT, name), "-p", 8, "--device", "h100", "-q", *more).stdout
            return float(out.splitlines()[-1].split(": ")[1])

        assert total() <= total("--pp", 1) * (1 + 1e-12)

    @pytest.mark.parametrize("p, batch", [(8, 128), (64, 256)])
    def test_search_is_never_dearer_than_data_parallel(self, name, p, batch):
        g = zoo(name, batch)
        r = search(build_costs(g, p))
        assert r.cost == pytest.approx(evaluate(g, r.strategy).total, rel=1e-12)
        for strategy in (data_parallel(g, p), expert(g, p)[0]):
            baseline = evaluate(g, strategy, p=p)
            if all(baseline.in_space):
                assert r.cost <= baseline.total * (1 + 1e-12)
        assert all(baseline.in_space) or name == "light_squeezenet.onnx"  # data parallel fits batch / p >= 4


def test_zoo_mappings():
    """What the nodes of real files become."""
    alex = by_name(zoo("light_bvlc_alexnet.onnx"))
    assert kinds(zoo("light_bvlc_alexnet.onnx")) == ["Conv", "Norm", "Pooling", "Conv", "Norm", "Pooling", "Conv",
                                                     "Conv", "Conv", "Pooling", "Ravel", "Unravel", "FC", "FC", "FC",
                                                     "SoftmaxCrossEntropy"]
    conv1 = alex["n0"].kind
    assert (conv1.out, conv1.kernel, conv1.stride, conv1.pw, conv1.bias) == (96, (11, 11), (4, 4), 1, True)
    assert alex["n2"].kind.params == 0  # LRN: a normalisation without weights
    assert alex["n14"].kind.pad == (0, 0, 1, 1)  # asymmetric padding
    assert alex["n15/unravel"].space == (128, 9216)  # the hard-coded batch 1 follows -b
    assert alex["n16"].kind.pw == 1 and alex["n22"].kind.pw == 0  # fc6 + ReLU (the Dropout vanishes); fc8
    squeeze = operators(zoo("light_squeezenet.onnx"))
    assert squeeze[-2].kind.keepdims and squeeze[-1].kind.axis == 1  # a loss over (b, classes, 1, 1)
    dense = operators(zoo("light_densenet121.onnx"))
    assert dense[-1].kind.axis == 1 and dense[-2].kind.name == "Conv"  # logits: a loss added
    assert dense[1].kind.name == "Norm" and dense[1].kind.pw == 3  # scale, shift (Mul, Add) and ReLU folded
    shuffle = kinds(zoo("light_shufflenet.onnx"))
    assert shuffle.count("Transpose") == 16 and shuffle.count("Elementwise") == 16  # channel shuffles, residual sums


# -- the built-in CNNs, written as ONNX and read back -----------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cnn")
    graphs = {}
    for name in ("alexnet", "resnet101", "inception3"):
        export(built(name), folder / f"{name}.onnx")
        assert not (folder / "weights.bin").exists()  # the weights are outside the file and nowhere
        graphs[name] = build_graph(str(folder / f"{name}.onnx"), batch=128)
    return graphs


@pytest.mark.parametrize("name", ["alexnet", "resnet101", "inception3"])
def test_round_trip_gives_the_reference_numbers(exported, name):
    g, original = exported[name], built(name)
    ours, theirs = operators(g), operators(original)
    assert [op.name for op in ours] == [op.name for op in theirs]
    for a, b in zip(ours, theirs):  # the same operators (a reshape's letters aside)
        assert a == b or a.kind.name == b.kind.name == "Unravel" and a.space == b.space, (a, b)
    assert sorted(g.edges(data=True)) == sorted(original.edges(data=True))
    assert parameter_count(g) == parameter_count(original)
    for p in PROCS:
        ref = reference(name, p)
        assert g.number_of_nodes() == ref["n_nodes"] and g.number_of_edges() == ref["n_edges"]
        cg = build_costs(g, p)
        for v, node in enumerate(ref["nodes"]):
            mine = dict(zip(map(tuple, cg.configs[v].tolist()), cg.node_costs[v].tolist()))
            want = dict(zip(map(tuple, node["configs"]), node["costs"]))
            assert mine.keys() == want.keys(), (p, v)
            assert max(rel(mine[c], want[c]) if want[c] else abs(mine[c]) for c in want) <= 1e-9, (p, v)
        for e in ref["edges"]:
            m = cg.edge_costs[(e["src"], e["tgt"])]
            assert abs(float(m.sum()) - e["sum"]) <= 1e-9 * max(abs(e["sum"]), 1.0)
        assert rel(search(cg).cost, ref["optimal_cost"]) <= 1e-9, p


# -- mapping rules on small graphs ------------------------------------------------------------


def conv_net(path, *extra_nodes, out="y", opset=17, name="conv", batch=1, inits=()):
    """x (batch, 3, 8, 8) -> Conv 4 3x3 pad 1 (no bias) -> ``extra_nodes``."""
    nodes = [H("Conv", ["x", "w"], ["c"], name=name, kernel_shape=[3, 3], pads=[1, 1, 1, 1]), *extra_nodes]
    return model(path, nodes, [("x", [batch, 3, 8, 8])], [(out, None)], [("w", (4, 3, 3, 3)), *inits], opset)


class TestFolding:
    def test_activations_and_bias_fold_into_the_producer(self, tmp_path):
        path = conv_net(tmp_path / "m.onnx", H("Add", ["c", "bias"], ["c1"]), H("Relu", ["c1"], ["c2"]),
                        H("Mul", ["c2", "half"], ["c3"]), H("Dropout", ["c3"], ["c4"]), H("Identity", ["c4"], ["y"]),
                        inits=[("bias", np.zeros((1, 4, 1, 1), np.float32)), ("half", np.array(0.5, np.float32))])
        (conv, loss) = operators(build_graph(path, batch=16))
        assert (conv.kind.bias, conv.kind.pw) == (True, 2)  # the bias, then ReLU and the scale
        assert loss.kind.name == "SoftmaxCrossEntropy" and loss.kind.axis == -1 and loss.name == "loss"
        assert loss.space == (16, 4, 8, 8)  # classes: the last axis longer than 1 (here w)

    def test_an_activation_without_a_pointwise_count_is_an_operator(self, tmp_path):
        path = conv_net(tmp_path / "m.onnx", H("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                        H("Relu", ["p"], ["r"]), H("GlobalAveragePool", ["r"], ["g"]), H("Flatten", ["g"], ["f"]),
                        H("Gemm", ["f", "fc", "fcb"], ["y"], transB=1),
                        inits=[("fc", (10, 4)), ("fcb", (10,))])
        g = build_graph(path)
        assert kinds(g) == ["Conv", "Pooling", "Elementwise", "ReduceMean", "Ravel", "Unravel", "FC",
                            "SoftmaxCrossEntropy"]
        names = [op.name for op in operators(g)]
        assert names[:3] == ["conv", "MaxPool_1", "Relu_2"]  # op type and position where a node has no name
        assert operators(g)[6].kind.bias and parameter_count(g) == 4 * 3 * 9 + 10 * 4 + 10

    def test_constant_subgraphs_are_folded(self, tmp_path):
        """The target shape of a reshape computed from Shape, Gather, Concat."""
        nodes = [H("Shape", ["c"], ["s"]), H("Gather", ["s", "zero"], ["n"], axis=0),
                 H("Unsqueeze", ["n", "axes"], ["n1"]), H("Concat", ["n1", "minus1"], ["t"], axis=0),
                 H("Cast", ["t"], ["t1"], to=onnx.TensorProto.INT64), H("Reshape", ["c", "t1"], ["y"])]
        path = conv_net(tmp_path / "m.onnx", *nodes, inits=[("zero", np.array(0, np.int64)),
                                                           ("axes", np.array([0], np.int64)),
                                                           ("minus1", np.array([-1], np.int64))])
        g = build_graph(path, batch=6)
        assert kinds(g) == ["Conv", "Ravel", "Unravel", "SoftmaxCrossEntropy"]
        assert operators(g)[2].space == (6, 256) and operators(g)[2].dims[0] == "b"

    def test_a_shared_weight_counts_once(self, tmp_path):
        """A language model whose head reads the embedding table, transposed."""
        nodes = [H("Gather", ["wte", "ids"], ["x"]), H("Transpose", ["wte"], ["wt"], perm=[1, 0]),
                 H("MatMul", ["x", "wt"], ["y"])]
        path = model(tmp_path / "lm.onnx", nodes, [("ids", ["batch", "seq"])], [("y", None)], [("wte", (50, 8))])
        g = build_graph(path, batch=4, seq=6)
        assert kinds(g) == ["Embedding", "FC", "SoftmaxCrossEntropy"]
        assert parameter_count(g) == 400 and g.graph["shared"] == [(1, 1)]
        assert g.graph["params"] == {"batch": 4, "seq": 6}


def fc_net(path, *extra_nodes, out="y", inits=()):
    """x (1, 16) -> MatMul by the weight w (16, 10), named fc -> ``extra_nodes``."""
    nodes = [H("MatMul", ["x", "w"], ["h"], name="fc"), *extra_nodes]
    return model(path, nodes, [("x", [1, 16])], [(out, None)], [("w", (16, 10)), *inits])


class TestConstantArrays:
    """Constants of more than one element folded (numpy arrays are never
    compared with ``==``), and the command line plans the result."""

    @pytest.mark.parametrize("stored", [(True, True), (True, False), (False, False)])
    def test_a_sum_of_weights_is_a_weight(self, tmp_path, stored):
        w1, w2 = (np.full((16, 10), 0.5, np.float32) if known else (16, 10) for known in stored)
        nodes = [H("Add", ["w1", "w2"], ["w"]), H("MatMul", ["x", "w"], ["y"], name="fc")]
        path = model(tmp_path / "m.onnx", nodes, [("x", [1, 16])], [("y", None)], [("w1", w1), ("w2", w2)])
        g = build_graph(path, batch=8)
        assert kinds(g) == ["FC", "SoftmaxCrossEntropy"] and by_name(g)["fc"].space == (8, 10, 16)
        assert parameter_count(g) == 16 * 10
        run_cli("-g", path, "-p", 4, "-q")

    def test_a_product_of_constant_vectors_scales(self, tmp_path):
        ones = np.ones(10, np.float32)
        path = fc_net(tmp_path / "m.onnx", H("Mul", ["s1", "s2"], ["s"]), H("Mul", ["h", "s"], ["y"]),
                      inits=[("s1", ones), ("s2", 2 * ones)])
        g = build_graph(path, batch=8)
        assert kinds(g) == ["FC", "SoftmaxCrossEntropy"] and by_name(g)["fc"].kind.pw == 1
        run_cli("-g", path, "-p", 4, "-q")

    def test_a_shape_chosen_by_where_sets_a_reshape(self, tmp_path):
        """PyTorch's export of a view: ``Where(Equal(Shape(m), -1s), 1s, Shape(m))``."""
        nodes = [H("Shape", ["m"], ["sm"]), H("Equal", ["sm", "minus1"], ["eq"]),
                 H("Where", ["eq", "ones", "sm"], ["t"]), H("Reshape", ["h", "t"], ["y"], name="view")]
        path = fc_net(tmp_path / "m.onnx", *nodes, inits=[("m", (1, 2, 5)), ("minus1", np.full(3, -1, np.int64)),
                                                          ("ones", np.ones(3, np.int64))])
        g = build_graph(path, batch=8)
        assert kinds(g) == ["FC", "Ravel", "Unravel", "SoftmaxCrossEntropy"]
        assert by_name(g)["view/unravel"].space == (8, 2, 5)  # the exported batch 1 follows -b
        run_cli("-g", path, "-p", 4, "-q")


class TestNames:
    BAD = "n\x1b[31m\u00e9\u202e\n"  # an escape code, é, a bidirectional override, a line break
    SHOWN = "n\\x1b[31m\u00e9\\u202e\\n"  # BAD made printable: é kept

    def model(self, path):
        """Three FC layers named BAD, SHOWN (BAD's printable form) and BAD."""
        nodes = [H("MatMul", ["x", "w"], ["h"], name=self.BAD), H("MatMul", ["h", "w2"], ["h2"], name=self.SHOWN),
                 H("MatMul", ["h2", "w2"], ["y"], name=self.BAD)]
        return model(path, nodes, [("x", [1, 16])], [("y", None)], [("w", (16, 10)), ("w2", (10, 10))])

    def test_layer_names_are_printable_and_unique(self, tmp_path):
        g = build_graph(self.model(tmp_path / "m\t\x1b.onnx"))
        assert [op.name for op in operators(g)] == [self.SHOWN, self.SHOWN + "_2", self.SHOWN + "_3", "loss"]
        assert g.graph["name"] == "m\\t\\x1b"

    def test_the_report_has_one_line_per_layer(self, tmp_path):
        path = self.model(tmp_path / "m.onnx")
        out = run_cli("-g", path, "-p", 4, "-d", "--output", "plan.csv", cwd=tmp_path).stdout
        assert all(c.isprintable() or c == "\n" for c in out)
        lines = out.splitlines()
        start = lines.index(next(line for line in lines if line.startswith("id name")))
        rows = lines[start + 1: lines.index("", start)]
        assert [row.split()[:2] for row in rows] == [["0", self.SHOWN], ["1", self.SHOWN + "_2"],
                                                     ["2", self.SHOWN + "_3"], ["3", "loss"]]
        for written in ("plan.csv", "graph.dot"):
            text = (tmp_path / written).read_text(encoding="utf-8")
            assert all(c.isprintable() or c == "\n" for c in text), written
        assert len((tmp_path / "plan.csv").read_text(encoding="utf-8").splitlines()) == 1 + 4


def attention_block(path, opset=17):
    """Self-attention and a GELU MLP over ids (batch, seq): embeddings,
    layer norm, fused q/k/v, heads by Reshape and Transpose, batched
    MatMul, a scaled softmax, residuals."""
    e, h, d, f, v = 32, 4, 8, 64, 100
    nodes = [
        H("Gather", ["wte", "ids"], ["x"], name="embed"),
        H("LayerNormalization", ["x", "g1", "b1"], ["n"], name="ln1", axis=-1),
        H("MatMul", ["n", "w_qkv"], ["qkv0"], name="qkv"), H("Add", ["qkv0", "b_qkv"], ["qkv"], name="qkv_bias"),
        H("Split", ["qkv", "splits"], ["q", "k", "vv"], name="split", axis=2),
        *[x for t in "q k vv".split() for x in (
            H("Reshape", [t, "heads"], [t + "4"], name=f"{t}/heads"),
            H("Transpose", [t + "4"], [t + "T"], name=f"{t}/t", perm=[0, 2, 3, 1] if t == "k" else [0, 2, 1, 3]))],
        H("MatMul", ["qT", "kT"], ["s"], name="scores"), H("Div", ["s", "scale"], ["s1"], name="scale"),
        H("Softmax", ["s1"], ["p"], name="softmax", axis=-1), H("MatMul", ["p", "vvT"], ["c"], name="context"),
        H("Transpose", ["c"], ["cT"], name="merge/t", perm=[0, 2, 1, 3]),
        H("Reshape", ["cT", "width"], ["c3"], name="merge"), H("MatMul", ["c3", "w_o"], ["o"], name="out"),
        H("Add", ["x", "o"], ["r"], name="residual"),
        H("LayerNormalization", ["r", "g2", "b2"], ["n2"], name="ln2", axis=-1),
        H("MatMul", ["n2", "w_up"], ["u"], name="up"), H("Gelu", ["u"], ["u1"], name="gelu"),
        H("MatMul", ["u1", "w_down"], ["dn"], name="down"), H("Add", ["r", "dn"], ["r2"], name="residual2"),
        H("MatMul", ["r2", "w_head"], ["logits"], name="head"),
    ]
    inits = [("wte", (v, e)), ("g1", (e,)), ("b1", (e,)), ("w_qkv", (e, 3 * e)), ("b_qkv", (3 * e,)),
             ("splits", np.array([e] * 3, np.int64)), ("heads", np.array([0, 0, h, d], np.int64)),
             ("scale", np.array(np.sqrt(d), np.float32)), ("width", np.array([0, 0, e], np.int64)),
             ("w_o", (e, e)), ("g2", (e,)), ("b2", (e,)), ("w_up", (e, f)), ("w_down", (f, e)), ("w_head", (e, v))]
    return model(path, nodes, [("ids", ["batch", "sequence"])], [("logits", ["batch", "sequence", v])], inits,
                 opset=opset)


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    """The block with its attention as the file writes it: scores, softmax, context."""
    return build_graph(attention_block(tmp_path_factory.mktemp("att") / "block.onnx", opset=20), batch=8, seq=16,
                       attention="materialized")


class TestAttention:
    @pytest.fixture
    def g(self, block):
        return block

    def test_operators(self, g):
        ops = by_name(g)
        assert ops["embed"].kind.name == "Embedding" and ops["embed"].space == (8, 16, 32, 100)
        assert ops["ln1"].kind.name == "Norm" and ops["ln1"].kind.axis == 2 and ops["ln1"].kind.params == 2
        assert ops["qkv"].kind.name == "FC" and ops["qkv"].kind.bias
        assert ops["split"].kind.name == "Split" and ops["q/heads/unravel"].space == (8, 16, 4, 8)
        scores = ops["scores"]
        assert scores.kind.name == "Einsum" and scores.kind.pw == 1  # the scaling folded
        assert scores.space == (8, 4, 16, 16, 8) and scores.dims[0] == "b"
        assert ops["context"].space == (8, 4, 16, 8, 16)  # (b, heads, positions, head width; key positions)
        assert ops["up"].kind.pw == 1 and ops["residual"].kind.name == "Elementwise"
        assert ops["loss"].space == (8, 16, 100)
        assert parameter_count(g) == 100 * 32 + 4 * 32 + 32 * 96 + 96 + 32 * 32 + 2 * 32 * 64 + 32 * 100

    def test_search(self, g):
        r = search(build_costs(g, 8))
        assert r.cost == pytest.approx(evaluate(g, r.strategy).total, rel=1e-12)
        assert r.cost <= evaluate(g, data_parallel(g, 8)).total

    def test_fused_by_default(self, tmp_path, g):
        """Scores, scaling, softmax and context: one FusedAttention (no mask:
        not causal), the keys transposed back to ``(b, heads, t, d)``."""
        fused = build_graph(attention_block(tmp_path / "block.onnx", opset=20), batch=8, seq=16)
        ops = by_name(fused)
        assert "scores" not in ops and "softmax" not in ops and "scale" not in ops
        att = ops["context"]
        assert att.kind.name == "FusedAttention" and not att.kind.causal
        assert att.space == (8, 4, 16, 8, 16) and [t.shape for t in att.inputs] == [(8, 4, 16, 8)] * 3
        assert ops["context/keys"].kind.name == "Transpose"
        assert fused.graph["params"] == {"batch": 8, "seq": 16}
        assert parameter_count(fused) == parameter_count(g)
        r = search(build_costs(fused, 8))
        assert r.cost == pytest.approx(evaluate(fused, r.strategy).total, rel=1e-12)

    def test_slices_and_gathers_of_activations_are_splits(self, tmp_path):
        nodes = [H("Gather", ["wte", "ids"], ["x"]),
                 H("Slice", ["x", "starts", "ends", "axes"], ["s"], name="window"),
                 H("Gather", ["s", "first"], ["cls"], name="cls", axis=1),
                 H("MatMul", ["cls", "w"], ["y"], name="classify")]
        path = model(tmp_path / "m.onnx", nodes, [("ids", ["batch", 12])], [("y", None)],
                     [("wte", (50, 8)), ("starts", np.array([2], np.int64)), ("ends", np.array([10], np.int64)),
                      ("axes", np.array([1], np.int64)), ("first", np.array(0, np.int64)), ("w", (8, 3))])
        g = build_graph(path, batch=4)
        ops = by_name(g)
        assert ops["window"].kind.sizes == (2, 8, 2) and ops["cls"].kind.sizes == (1, 7)
        assert ops["cls/squeeze/unravel"].space == (4, 8) and ops["classify"].space == (4, 3, 8)

    def test_einsum_nodes(self, tmp_path):
        nodes = [H("Gather", ["wte", "ids"], ["x"]), H("Einsum", ["x", "w"], ["y"], equation="ij k,kl->ijl")]
        path = model(tmp_path / "m.onnx", nodes, [("ids", ["batch", 5])], [("y", None)],
                     [("wte", (50, 8)), ("w", (8, 6))])
        op = operators(build_graph(path, batch=4))[1]
        assert op.kind.name == "Einsum" and op.space == (4, 5, 6, 8) and op.dims[0] == "b"


class TestInputs:
    def test_symbolic_batch_and_sequence(self, tmp_path):
        path = attention_block(tmp_path / "m.onnx")
        with pytest.raises(ValueError, match="seq must be given: dimension 'sequence' \\(axis 1\\) of input 'ids'"):
            build_graph(path, batch=8)
        assert build_graph(path, batch=2, seq=4).graph["params"] == {"batch": 2, "seq": 4}

    def test_parameters_a_model_does_not_take(self, tmp_path):
        path = conv_net(tmp_path / "m.onnx", H("Relu", ["c"], ["y"]))
        with pytest.raises(ValueError, match=r"seq is not a parameter of m \(it takes batch, attention\)"):
            build_graph(path, seq=16)
        with pytest.raises(ValueError, match="batch must be an integer from 1"):
            build_graph(path, batch=0)

    def test_an_input_without_the_sample_dimension(self, tmp_path):
        """``shift`` (4,) has no batch: its leading dimension is not the first input's."""
        nodes = [H("MatMul", ["x", "w"], ["h"], name="fc"), H("Add", ["h", "shift"], ["h1"]),
                 H("Gemm", ["h1", "h1", "c"], ["y"], name="outer", transB=1)]
        path = model(tmp_path / "m.onnx", nodes, [("x", [1, 8]), ("shift", [4])], [("y", None)],
                     [("w", (8, 4)), ("c", np.array(1.0, np.float32))])
        ops = by_name(build_graph(path, batch=16))
        assert ops["fc"].space == (16, 4, 8) and ops["fc"].kind.pw == 1  # the shift: one more pointwise op
        outer = ops["outer"]  # a Gemm of two activations: an Einsum, its constant C one more pointwise op
        assert outer.kind.name == "Einsum" and outer.space == (16, 16, 4) and outer.kind.pw == 1

    def test_a_fixed_batch_is_replaced(self, tmp_path):
        path = conv_net(tmp_path / "m.onnx", H("Relu", ["c"], ["y"]), batch=32)
        assert operators(build_graph(path, batch=8))[0].space[0] == 8

    def test_a_huge_dimension_plans(self, tmp_path):
        """Splits of a dimension of 3 * 2**28, near the bound the flags have
        (1e9; beyond it a file is refused), are looked for up to p only, in the
        search and in the baselines."""
        nodes = [H("MatMul", ["x", "w"], ["y"], name="fc")]
        path = model(tmp_path / "m.onnx", nodes, [("x", ["N", 3 * 2**28])], [("y", None)], [("w", (3 * 2**28, 4))])
        assert by_name(build_graph(path, batch=8))["fc"].space == (8, 4, 3 * 2**28)
        out = run_cli("-g", path, "-p", 4, "-q", "--compare", timeout=120).stdout
        assert out.splitlines()[-1].startswith("Total cost: ")


class TestBadFiles:
    def test_unsupported_operators_are_listed_in_one_line(self, tmp_path):
        nodes = [H("TopK", ["c", "k"], ["t", "i"], name="top1"), H("NonZero", ["c"], ["nz"], name="nz"),
                 H("TopK", ["t", "k"], ["y", "i2"], name="top2"), H("Relu", ["y"], ["r"])]
        path = conv_net(tmp_path / "m.onnx", *nodes, out="r", inits=[("k", np.array([2], np.int64))])
        with pytest.raises(ValueError) as e:
            build_graph(path)
        message = str(e.value)
        assert "\n" not in message and message.startswith(f"{path}: operators the importer does not support: ")
        assert message.endswith("TopK: 2 nodes, first 'top1'")  # the second reads the first's output
        assert "NonZero" not in message  # not needed for the output

    def test_unsupported_uses_of_known_operators(self, tmp_path):
        dilated = conv_net(tmp_path / "d.onnx", H("Conv", ["c", "w2"], ["y"], name="dil", dilations=[2, 2],
                                                  kernel_shape=[3, 3]), inits=[("w2", (4, 4, 3, 3))])
        with pytest.raises(ValueError, match="Conv with dilation: 1 node, first 'dil'"):
            build_graph(dilated)
        padded = conv_net(tmp_path / "p.onnx", H("Conv", ["c", "w2"], ["y"], name="odd", auto_pad="WHATEVER",
                                                 kernel_shape=[3, 3]), inits=[("w2", (4, 4, 3, 3))])
        with pytest.raises(ValueError, match=r"Conv with auto_pad 'WHATEVER' \(ONNX knows NOTSET, SAME_UPPER, "
                                             r"SAME_LOWER and VALID\): 1 node, first 'odd'"):
            build_graph(padded)

    @pytest.mark.parametrize("content, message", [
        (b"definitely not a model", "not an ONNX model"),
        (b"", "not an ONNX model (no graph of nodes in it)"),
    ])
    def test_not_onnx(self, tmp_path, content, message):
        path = tmp_path / "m.onnx"
        path.write_bytes(content)
        with pytest.raises(ValueError, match="^" + str(path) + ": " + message.replace("(", r"\(").replace(")", r"\)")):
            build_graph(str(path))

    def test_truncated(self, tmp_path):
        data = open(os.path.join(LIGHT, "light_resnet50.onnx"), "rb").read()
        path = tmp_path / "cut.onnx"
        path.write_bytes(data[: len(data) // 3])
        with pytest.raises(ValueError, match="not an ONNX model \\(cannot parse it"):
            build_graph(str(path))

    @pytest.mark.parametrize("old, new, last, message", [
        (b"Relu", b"R\xdelu", False, r"the operator type or a name of node \d+"),
        (b"data_0", b"dat\xa1_0", True, "the name of a graph input"),
        (b"SAME_UPPER", b"SAME\x86UPPER", False, r"attribute 'auto_pad' of node 1 \(Conv\)"),
    ])
    def test_damaged_text_is_refused_in_one_line(self, tmp_path, old, new, last, message):
        """A byte of a name or of a string attribute damaged (the file still
        parses: ONNX's strings are not checked on reading) is refused in one
        line, from the CLI too, not an internal error."""
        if old == b"SAME_UPPER":
            data = open(conv_net(tmp_path / "padded.onnx", H("Conv", ["c", "w"], ["y"], kernel_shape=[3, 3],
                                                             auto_pad="SAME_UPPER")), "rb").read()
        else:
            data = open(os.path.join(LIGHT, "light_bvlc_alexnet.onnx"), "rb").read()
        at = data.rfind(old) if last else data.find(old)
        assert at >= 0 and len(old) == len(new)
        path = tmp_path / "damaged.onnx"
        path.write_bytes(data[:at] + new + data[at + len(old):])
        pattern = f"{re.escape(str(path))}: {message} is not UTF-8 text \\(a damaged file\\?\\)"
        with pytest.raises(ValueError) as e:
            build_graph(str(path))
        assert re.fullmatch(pattern, str(e.value))
        out = run_cli("-g", path, "-p", 4, "-q", ok=False)
        assert out.returncode == 2 and re.fullmatch(f"scheduler.py: error: {pattern}\n", out.stderr)

    def test_an_attribute_of_no_type_is_refused(self, tmp_path):
        model = onnx.load(os.path.join(LIGHT, "light_bvlc_alexnet.onnx"))
        at, conv = next((i, n) for i, n in enumerate(model.graph.node) if n.op_type == "Conv")
        next(a for a in conv.attribute if a.name == "strides").type = onnx.AttributeProto.UNDEFINED
        path = tmp_path / "untyped.onnx"
        onnx.save(model, str(path))
        said = rf"attribute 'strides' of node {at} \(Conv\) has no type \(a damaged file\?\)$"
        with pytest.raises(ValueError, match=said):
            build_graph(str(path))

    def test_shape_inference_fails(self, tmp_path):
        path = conv_net(tmp_path / "m.onnx", H("Add", ["c", "odd"], ["y"]), inits=[("odd", (5, 7))])
        with pytest.raises(ValueError, match="shape inference fails: "):
            build_graph(path)

    def test_an_endless_file_is_refused(self, tmp_path):
        """A link to /dev/zero named like a model: not a regular file, refused
        unread, in one line with a non-zero exit."""
        os.symlink("/dev/zero", tmp_path / "x.onnx")
        proc = run_cli("-g", tmp_path / "x.onnx", "-p", 4, ok=False, timeout=120)
        assert proc.returncode != 0 and proc.stdout == "" and "Traceback" not in proc.stderr
        assert proc.stderr.count("\n") == 1 and "x.onnx is a device, not a regular file" in proc.stderr

    def test_a_file_over_2_gb_is_refused_unread(self, tmp_path):
        """A regular file is refused by its size (sparse here: nothing is on
        the disk, and nothing is read)."""
        path = tmp_path / "big.onnx"
        with open(path, "wb") as f:
            f.truncate((2 << 30) + 1)
        with pytest.raises(ValueError, match=r"big.onnx is larger than 2048 MB: not a protobuf ONNX model \(one"):
            build_graph(str(path))

    def test_external_weights_are_not_read(self, tmp_path):
        nodes = [H("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3]), H("Relu", ["c"], ["y"])]
        m = onnx.load(model(tmp_path / "dense.onnx", nodes, [("x", [1, 3, 8, 8])], [("y", None)],
                            [("w", np.ones((4, 3, 3, 3), np.float32))]))
        onnx.save(m, str(tmp_path / "big.onnx"), save_as_external_data=True, location="big.data", size_threshold=0)
        os.remove(tmp_path / "big.data")  # a model over 2 GB without its weight file still plans
        assert kinds(build_graph(str(tmp_path / "big.onnx"))) == ["Conv", "SoftmaxCrossEntropy"]


def test_every_mapped_op_type_is_named_in_the_docs():
    """The module docstring (and so the README's list) names what is supported."""
    import models.onnx as onnx_import
    from models.onnx.values import LAYERS

    doc = " ".join(onnx_import.__doc__.split())
    missing = [op for op in sorted(LAYERS | {"Relu", "Gelu", "Sigmoid", "Tanh", "Erf", "Dropout",
                                                          "Identity", "Sum", "Where"})
               if op not in doc and not op.startswith("Reduce")]
    assert not missing, missing
