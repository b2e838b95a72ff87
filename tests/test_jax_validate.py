"""benchmarks/jax: plans to mesh axes (the jax export's, which the
benchmark runs), the HLO collective parser, the JAX models' shapes against
graph.py, and the validation itself on small sizes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import ROOT, built

# before benchmarks/ is on the path, where the directory benchmarks/jax would pass for the package
HAVE_JAX = importlib.util.find_spec("jax") is not None
sys.path.insert(0, str(ROOT / "benchmarks" / "jax"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from baselines import data_parallel, mesh_tensorflow  # noqa: E402
from dp_search import search  # noqa: E402
from graph import operators  # noqa: E402
from exports.frameworks.jax_mesh import PlanNotExpressible, assign, prime_factors  # noqa: E402

needs_jax = pytest.mark.skipif(not HAVE_JAX, reason="jax is not installed (pip install -r benchmarks/jax/requirements.txt)")


class TestMeshAssignment:
    def test_prime_factors(self):
        assert prime_factors(8) == [2, 2, 2] and prime_factors(12) == [2, 2, 3] and prime_factors(1) == []
        assert prime_factors(7) == [7] and prime_factors(49) == [7, 7] and prime_factors(90) == [2, 3, 3, 5]

    def test_data_parallel_uses_the_whole_mesh_for_b(self):
        g = built("alexnet")
        mp = assign(g, data_parallel(g, 8), 8)
        assert mp.axes == (("m0", 2), ("m1", 2), ("m2", 2))
        for op in operators(g):
            layer = mp.layers[op.name]
            assert layer.dims[op.dims.index("b")] == ("m0", "m1", "m2")
            assert all(d == () for i, d in enumerate(layer.dims) if op.dims[i] != "b")

    def test_a_kept_tensor_keeps_its_mesh_axes(self):
        from conftest import costed

        g = built("alexnet")
        mp = assign(g, search(costed("alexnet", 8), 0).strategy, 8)
        fc6, fc7, fc8 = (mp.layers[n] for n in ("fc6", "fc7", "fc8"))
        # fc6 (b, n, k) = (1, 2, 4) writes (b, n) split n=2; fc7 (1, 4, 2) reads it with k=2
        assert fc6.outputs[0][1] == fc7.inputs[0][1] == fc7.dims[2]
        assert fc7.outputs[0][1] == fc8.inputs[0][1]
        # within one operator the dimensions use disjoint mesh axes
        for layer in mp.layers.values():
            used = [a for d in layer.dims for a in d]
            assert len(used) == len(set(used))

    def test_mesh_tensorflow_specs(self):
        g = built("transformer")
        mp = assign(g, mesh_tensorflow(g, 2, 4), 8)
        qkv = mp.layers["enc0/attn/qkv"]  # (s, b, h, l, k, e)
        assert qkv.dims[1] == ("m0",) and qkv.dims[2] == ("m1", "m2")
        assert qkv.inputs[1] == ((), ("m1", "m2"), (), ())  # weight (s, h, e, k): heads
        assert mp.layers["enc0/attn/split"].outputs[0][1] == qkv.dims[2]

    def test_a_split_the_mesh_cannot_express(self):
        g = built("alexnet")
        strategy = data_parallel(g, 8)
        strategy[0] = (1, 1, 1, 1, 1, 1, 3)  # 3 output-channel groups on a 2 x 2 x 2 mesh
        with pytest.raises(PlanNotExpressible, match=r"conv1: splitting n 3 ways .* 2 x 2 x 2"):
            assign(g, strategy, 8)


class TestCollectiveParser:
    HLO = "\n".join([
        '  %all-reduce.9 = (f32[], f32[24,3,11,11]{3,2,1,0}, f32[1024,2304]{1,0}) all-reduce(%a, %b, %c), '
        "channel_id=1, replica_groups=mesh['axis_0'=8,'axis_1'=1] {'axis_0'}, to_apply=%add, "
        'metadata={op_name="jit(step)/(jvp(softmax)/reduce_sum:transpose(jvp(conv1))/conv:x)"}',
        '  %g1 = f32[24,3,11,11]{3,2,1,0} get-tuple-element(%all-reduce.9), index=1, '
        'metadata={op_name="jit(step)/transpose(jvp(conv1))/conv_general_dilated"}',
        '  %g2 = f32[1024,2304]{1,0} get-tuple-element(%all-reduce.9), index=2, '
        'metadata={op_name="jit(step)/transpose(jvp(fc6))/dot_general"}',
        '  %all-gather = f32[128,9216]{1,0} all-gather(%x), channel_id=2, replica_groups=[1,8]<=[8], '
        'dimensions={1}, metadata={op_name="jit(step)/jvp(fc6)/sharding_constraint"}',
        '  %reduce-scatter = f32[16,4]{1,0} reduce-scatter(%y), replica_groups={{0,1,2,3},{4,5,6,7}}, '
        'dimensions={0}, metadata={op_name="jit(step)/jvp(enc0/attn/out)/dot_general"}',
        '  %collective-permute = f32[10]{0} collective-permute(%z), source_target_pairs={{0,1},{1,0}}',
    ])

    def test_parse_and_attribute(self):
        import hlo as jv

        cs = jv.collectives(self.HLO, 8)
        assert [(c.kind, c.elements, c.group) for c in cs] == [
            ("all-reduce", 1, 8), ("all-reduce", 24 * 3 * 121, 8), ("all-reduce", 1024 * 2304, 8),
            ("all-gather", 128 * 9216, 8), ("reduce-scatter", 64, 4), ("collective-permute", 10, 2)]
        names = ["enc0/attn/out", "softmax", "conv1", "fc6"]
        assert [jv.layer_of(c.op_name, names) for c in cs] == [
            "softmax", "conv1", "fc6", "fc6", "enc0/attn/out", "(other)"]
        traffic = [c.traffic for c in cs]
        assert traffic[2] == pytest.approx(2 * 7 / 8 * 1024 * 2304)  # ring all-reduce
        assert traffic[3] == pytest.approx(7 / 8 * 128 * 9216)  # all-gather: the result is whole
        assert traffic[4] == pytest.approx(3 * 64)  # reduce-scatter: the result is one piece
        assert traffic[5] == 10


    @pytest.mark.parametrize("text, groups", [
        ("replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply", [(0, 1), (2, 3), (4, 5), (6, 7)]),
        ("replica_groups=[4,2]<=[8], to_apply", [(0, 1), (2, 3), (4, 5), (6, 7)]),
        ("replica_groups=[2,4]<=[4,2]T(1,0), to_apply", [(0, 2, 4, 6), (1, 3, 5, 7)]),
        ("replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_1'}, to", [(0, 1), (2, 3), (4, 5), (6, 7)]),
        ("replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}, to", [(0, 2, 4, 6), (1, 3, 5, 7)]),
        ("replica_groups=mesh['axis_0'=1,'axis_1'=2,'axis_2'=4], to", [tuple(range(8))]),
        ("replica_groups={}, to_apply=%add", [tuple(range(8))]),
        ("source_target_pairs={{0,4},{4,0}}, metadata", [(0, 4), (4, 0)]),
    ])
    def test_replica_groups_and_nodes(self, text, groups):
        import hlo as jv

        got = jv.replica_groups("%x = f32[8]{0} all-reduce(%y), " + text, 8)
        assert list(got) == groups
        across = jv.Collective("all-reduce", 8, got, "").across_nodes(4)  # nodes {0..3}, {4..7}
        assert across == any(len({d // 4 for d in grp}) > 1 for grp in groups)
        assert jv.Collective("all-reduce", 8, ((0, 1), (2, 3)), "").across_nodes(4) is False
        assert jv.Collective("all-reduce", 8, ((0, 4),), "").across_nodes(4) is True

    def test_share_of_traffic_between_nodes(self):
        import hlo as jv

        ring = jv.Collective("all-reduce", 8, (tuple(range(8)),), "")
        assert ring.across_share(4) == 2 / 8  # links 3-4 and 7-0 of the ring join the two nodes
        assert jv.Collective("all-reduce", 8, ((0, 2, 4, 6), (1, 3, 5, 7)), "").across_share(4) == 0.5
        assert jv.Collective("all-to-all", 8, ((0, 1, 4, 5),), "").across_share(4) == 8 / 12
        assert jv.Collective("collective-permute", 8, ((0, 4), (1, 2)), "").across_share(4) == 0.5
        assert jv.Collective("all-reduce", 8, ((0, 1, 2, 3),), "").across_share(4) == 0.0


def test_predicted_locality_splits_the_model_words():
    import jax_validate as jv

    g = built("alexnet")
    dp = data_parallel(g, 8)
    total = jv.predicted_words(g, dp)
    split = jv.predicted_locality(g, dp, 4)
    for name, (own, edges) in total.items():
        inside, across = split[name]
        assert inside + across == pytest.approx(own + edges, rel=1e-9, abs=1e-6), name
    # data parallel over two nodes: every weight all-reduce is hierarchical, so some words cross
    assert split["fc6"][1] > 0 and split["fc6"][0] > 0
    one_node = jv.predicted_locality(g, dp, 8)
    assert all(across == pytest.approx(0, abs=1e-6) for _, across in one_node.values())


@needs_jax
@pytest.mark.parametrize("graph", ["alexnet", "transformer"])
def test_jax_models_have_graph_shapes(graph):
    import jax_validate as jv

    params, shapes = jv.model_shapes(graph, small=False)
    ops = operators(built(graph))
    assert set(shapes) == {op.name for op in ops}
    for op in ops:
        for (kind, i), shape in shapes[op.name].items():
            assert shape == (op.inputs if kind == "in" else op.outputs)[i].shape, (op.name, kind, i)
        weights = params.get(op.name)
        if weights is not None and not isinstance(weights, tuple):
            assert weights.shape == op.inputs[1].shape, op.name


def _validate(*args, timeout=600):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "jax_validate.py"), *args],
                          capture_output=True, text=True, timeout=timeout)
    return proc


@needs_jax
def test_small_validation_of_pase_and_data_parallel():
    proc = _validate("--quick")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("numerics: PASS") == 4
    assert proc.stdout.count("between nodes of 4") == 4  # every collective classified by its replica groups
    for title in ("== alexnet, p = 8: PaSE ==", "== alexnet, p = 8: data parallel ==",
                  "== transformer, p = 8: PaSE ==", "== transformer, p = 8: data parallel =="):
        assert title in proc.stdout


@needs_jax
def test_small_validation_of_a_model_parallel_plan(tmp_path):
    g = built("transformer")
    plan = tmp_path / "mesh_tf_2x4.json"
    plan.write_text(json.dumps({"layers": [{"id": i, "config": list(d.config)}
                                           for i, d in enumerate(mesh_tensorflow(g, 2, 4))]}))
    proc = _validate("-g", "transformer", "--plan", str(plan), "--quick")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== transformer, p = 8: mesh_tf_2x4 ==" in proc.stdout and "numerics: PASS" in proc.stdout
