"""graph.py: the five graphs, operator by operator, against the reference."""

from __future__ import annotations

import pytest

from conftest import GRAPH_NAMES, built, reference
from graph import operators
from models import build_graph, graph_names
from models import MODELS

# The original tool's class names for our operator kinds.
REFERENCE_OP = {"Embedding": "Einsum"}


@pytest.mark.parametrize("name", GRAPH_NAMES)
class TestBuiltinGraphs:
    def test_nodes_and_edges_match_reference(self, name):
        g, ref = built(name), reference(name, 8)
        assert g.number_of_nodes() == ref["n_nodes"]
        assert g.number_of_edges() == ref["n_edges"]
        assert sorted(g.edges()) == sorted((e["src"], e["tgt"]) for e in ref["edges"])
        assert list(g.nodes) == list(range(ref["n_nodes"]))

    def test_every_operator_matches_reference(self, name):
        ref = reference(name, 8)["nodes"]
        for v, op in enumerate(operators(built(name))):
            assert REFERENCE_OP.get(op.kind.name, op.kind.name) == ref[v]["op"], (v, op)
            assert list(op.space) == ref[v]["space"], (v, op)

    def test_operators_are_described(self, name):
        ops = operators(built(name))
        names = [op.name for op in ops]
        assert len(set(names)) == len(names), "operator names must be unique"
        for op in ops:
            assert op.name and len(op.dims) == len(op.space) == len(set(op.dims)), op
            assert "b" in op.dims, op
            assert all(set(a) <= set(op.dims) for t in op.inputs + op.outputs for a in t.axes), op

    def test_edges_join_equal_tensors(self, name):
        g = built(name)
        for u, v, d in g.edges(data=True):
            src, tgt = g.nodes[u]["op"], g.nodes[v]["op"]
            assert src.outputs[d["out"]].shape == tgt.inputs[d["inp"]].shape, (u, v)

    def test_batch_is_the_sample_dimension(self, name):
        for op in operators(build_graph(name, batch=24)):
            assert op.space[op.dims.index("b")] == 24, op


def test_graph_attributes():
    assert built("alexnet").graph == {"name": "alexnet", "batch": 128, "cutoff": 4, "params": {"batch": 128},
                                      "expert": "one_weird_trick", "model_dims": "", "roles": {}}
    assert built("transformer").graph["cutoff"] == 1
    assert built("rnnlm").graph["width"] == 2048
    assert built("transformer").graph["width"] == 512
    assert built("transformer").graph["params"] == {"batch": 128, "width": 512, "seq": 256, "vocab": 50000,
                                                    "layers": 6, "attention": "materialized"}


def test_examples_of_names_and_letters():
    inc = {op.name: op for op in operators(built("inception3"))}
    assert inc["mixed_6b/branch7x7dbl_3"].dims == "bchwrsn"
    assert inc["mixed_6b/branch7x7dbl_3"].space == (128, 128, 17, 17, 1, 7, 128)
    tr = {op.name: op for op in operators(built("transformer"))}
    assert tr["enc3/attn/qkv"].dims == "sbhlke"
    assert tr["dec0/cross/qkv"].dims == "sbhlke"
    assert tr["enc0/attn/out"].dims == "blehk"
    assert operators(built("rnnlm"))[1].dims == "lsbnk"


def test_last_input_of_a_producer_is_the_charged_one():
    g = built("transformer")
    names = {g.nodes[v]["op"].name: v for v in g}
    # scores reads q (input 0) and k (input 1) of the same Unstack
    e = g.edges[names["enc0/attn/split"], names["enc0/attn/scores"]]
    assert (e["out"], e["inp"]) == (1, 1)
    # the cross-attention Stack reads the encoder output twice, at 1 and 2
    e = g.edges[names["enc5/ffn/norm"], names["dec0/cross/stack"]]
    assert e["inp"] == 2


@pytest.mark.parametrize("width, heads", [(256, 4), (1024, 16), (64, 1)])
def test_transformer_width(width, heads):
    ops = {op.name: op for op in operators(build_graph("transformer", 16, width))}
    assert ops["enc0/attn/qkv"].space == (3, 16, heads, 256, 64, width)
    assert ops["enc0/ffn/in"].space == (16, 256, 4 * width, width)


def test_rnnlm_width():
    lstm = operators(build_graph("rnnlm", 16, 512))[1]
    assert lstm.space == (2, 256, 16, 512, 512)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (("vgg", 128), {}, "graph must be one of alexnet, resnet101, inception3, rnnlm, transformer, got 'vgg'"),
        (("alexnet", 0), {}, "batch must be an integer from 1 to 1,000,000,000, got 0"),
        (("alexnet", -3), {}, "batch must be an integer from 1 to 1,000,000,000"),
        (("alexnet", 2.5), {}, "batch must be an integer from 1 to 1,000,000,000"),
        (("alexnet", 128, 512), {}, r"width is not a parameter of alexnet \(it takes batch\)"),
        (("transformer", 128, 100), {}, "width 100 is not a multiple of the head width 64"),
        (("transformer", 128, 0), {}, "width must be an integer from 1 to 1,000,000,000"),
        (("rnnlm", 128, -1), {}, "width must be an integer from 1 to 1,000,000,000"),
        (("rnnlm", 128), {"seq": 0}, "seq must be an integer from 1"),
        (("transformer", 128), {"heads": 4}, "heads is not a parameter of transformer"),
    ],
)
def test_bad_arguments(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_graph(*args, **kwargs)


def test_the_registry_holds_the_reference_models():
    """The registry names exactly the models the reference numbers exist for
    (an independent list: the file names), each builds under its own name
    with the node count of its reference file, and --help lists them."""
    from conftest import REFERENCE

    on_disk = {f.name.split("_p")[0] for f in REFERENCE.glob("*_p*.json.gz")}
    assert set(MODELS) == set(graph_names()) == on_disk
    for name, spec in MODELS.items():
        g = build_graph(name, batch=16)
        assert g.graph["name"] == name and g.graph["cutoff"] == spec.cutoff
        assert g.number_of_nodes() == reference(name, 4)["n_nodes"]
        assert {p.name for p in spec.params} == set(g.graph["params"]) and spec.params[0].name == "batch"


@pytest.mark.parametrize("name, params", [("rnnlm", {"seq": 32, "vocab": 1000, "layers": 3}),
                                          ("transformer", {"seq": 64, "vocab": 800, "layers": 2})])
def test_sequence_model_parameters(name, params):
    ops = {op.name: op for op in operators(build_graph(name, 8, **params))}
    if name == "rnnlm":
        assert ops["embed"].space == (8, 32, 2048, 1000)
        assert ops["lstm"].space == (3, 32, 8, 2048, 2048)
    else:
        assert ops["enc/embed"].space == (8, 64, 512, 800)
        assert "enc1/ffn/norm" in ops and "enc2/ffn/norm" not in ops and "dec1/cross/qkv" in ops
        assert len(ops) == 6 + 2 * (12 + 21)  # embeddings, positions, logits, loss; per layer 12 + 21


def test_parameter_count_of_the_cnns():
    """torchvision's counts (Inception-v3 without its auxiliary classifier)."""
    from graph import parameter_count

    assert parameter_count(built("resnet101")) == 44_549_160
    assert parameter_count(built("inception3")) == 23_834_568


def test_a_shared_weight_is_counted_once():
    from graph import GraphBuilder, parameter_count
    from kinds.gemm import Einsum, Embedding

    B = GraphBuilder("tied", cutoff=1)
    x = B.add("embed", Embedding(100, 8, "e"), B.data((4, 6), "bs"))
    B.add("head", Einsum("bse,ve->bsv"), x, B.weight((100, 8), "ve"), shared=(1,))
    assert parameter_count(B.graph) == 800 and B.graph.graph["shared"] == [(1, 1)]
    with pytest.raises(ValueError, match="input 0 is not a weight"):
        B.add("again", Einsum("bse,ve->bsv"), x, B.weight((100, 8), "ve"), shared=(0,))
