"""cluster/: the two-level network, latency, presets, cluster files and the
predicted step time; the consistency of the two-level model with the
reference numbers, and a plan it rejects that the flat model prefers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cluster import Cluster
from cluster.config import read_cluster_file, resolve
from conftest import run_cli, GRAPH_NAMES, PROCS, built, reference, rel
from cost_model import CostModel, build_costs, edge_costs, evaluate
from dp_search import search
from graph import GraphBuilder, operators
from kinds import Extents
from kinds.pointwise import Elementwise

W_IN, W_OUT = 5000.0, 20000.0  # 10 TFLOPS at 16 GB/s inside a node and 4 GB/s between nodes
TWO = Cluster(10, 16, inter_bw=4, gpus_per_node=4)


def splits(dims, *configs):
    return Extents(dims, np.array(configs, dtype=float))


class TestHierarchicalAllReduce:
    def test_by_hand(self):
        # FC (b, n, k) split (8, 1, 2) on 16 devices, 4 per node: device = 2 b + k, so the 8 devices
        # sharing k = 0 are 0, 2, ..., 14: 2 in each of 4 nodes
        C = splits("bnk", (8, 1, 2))
        w = 1000.0
        assert TWO.across(C, "b")[0] == 4 and TWO.across(C, "k")[0] == 1
        want = W_IN * 2 * w * (2 - 1) / 2 + W_OUT * 2 * (w / 2) * (4 - 1) / 4
        assert TWO.allreduce(w, C, "b")[0] == pytest.approx(want, rel=1e-12)
        # inside one node: the ring at the intra-node bandwidth
        assert TWO.allreduce(w, C, "k")[0] == pytest.approx(W_IN * w / 2 * 2 * 1, rel=1e-12)

    def test_the_sequence_is_laid_out_outside_the_heads(self):
        """An attention's iteration space names its heads before its
        sequence (bgusd); the layout still puts the sequence's split (context
        parallelism) outside and the heads' (tensor parallelism) inside a
        node, as in every other operator of the block and the frameworks'
        meshes."""
        nodes = Cluster(10, 16, inter_bw=4, gpus_per_node=8)
        qkv = splits("bgusd", (2, 8, 1, 2, 1))  # data 2 x context 2 x tensor 8 on 32 devices, 8 per node
        assert nodes.across(qkv, "g")[0] == 1 and nodes.across(qkv, "s")[0] == 2 and nodes.across(qkv, "b")[0] == 2
        mlp = splits("bsf", (2, 2, 8))
        assert nodes.across(mlp, "f")[0] == 1 and nodes.across(mlp, "s")[0] == 2

    def test_every_member_on_its_own_node(self):
        C = splits("bn", (4, 4))  # n fills each node; the 4 b-groups sit on 4 nodes
        w = 64.0
        assert TWO.allreduce(w, C, "b")[0] == pytest.approx(W_OUT * w / 4 * 2 * 3, rel=1e-12)

    def test_equal_bandwidths_give_the_ring(self):
        same = Cluster(10, 16, inter_bw=16, gpus_per_node=2)
        C = splits("bnk", (8, 2, 2), (4, 1, 1), (2, 8, 1))
        flat = Cluster(10, 16)
        for letters in ("b", "n", "bn", "bnk"):
            np.testing.assert_allclose(same.allreduce(7.0, C, letters), flat.allreduce(7.0, C, letters), rtol=1e-12)

    def test_latency_per_step(self):
        lat = Cluster(10, 16, inter_bw=4, gpus_per_node=4, latency=2.0)  # 2 us = 2e7 FLOP at 10 TFLOPS
        C = splits("bnk", (8, 1, 2))
        extra = lat.allreduce(1000.0, C, "b")[0] - TWO.allreduce(1000.0, C, "b")[0]
        assert extra == pytest.approx(2e7 * (2 * (2 - 1) + 2 * (4 - 1)), rel=1e-12)
        flat = Cluster(10, 16, latency=2.0)
        assert flat.allreduce(1000.0, C, "b")[0] - Cluster().allreduce(1000.0, C, "b")[0] == pytest.approx(
            2e7 * 2 * 7, rel=1e-12)
        assert flat.send(5.0, C, "n")[0] == 0.0  # n is not split: nothing to send, no step


class TestRedistribution:
    """A (16, 8) tensor ``bk`` on 8 devices, 4 per node, written split 8 ways
    by rows: node 0 holds rows 0-7, node 1 rows 8-15."""

    @staticmethod
    def ops():
        B = GraphBuilder("t", cutoff=1)
        x = B.add("a", Elementwise(), B.data((16, 8), "bk"))
        B.add("c", Elementwise(), x)
        return operators(B.graph)

    def test_rows_stay_on_their_node(self):
        a, c = self.ops()
        # read split (2, 4): device 4 i + j holds rows 8 i.., columns 2 j..: the rows of its own node.
        # need = 16 - min(2, 8) * min(8, 2) = 12 words, none across nodes
        m = edge_costs(a, 0, c, 0, [(8, 1)], [(2, 4)], CostModel(TWO))
        assert m[0, 0] == pytest.approx(2 * W_IN * 12, rel=1e-12)

    def test_columns_need_the_other_node(self):
        a, c = self.ops()
        # read split (1, 8): device j needs column j, all 16 rows; it holds 2 of them, the 8 rows
        # of the other node come across: 14 words, 8 of them between nodes
        m = edge_costs(a, 0, c, 0, [(8, 1)], [(1, 8)], CostModel(TWO))
        assert m[0, 0] == pytest.approx(2 * (W_IN * 6 + W_OUT * 8), rel=1e-12)
        flat = edge_costs(a, 0, c, 0, [(8, 1)], [(1, 8)], CostModel())
        assert flat[0, 0] == pytest.approx(2 * W_IN * 14, rel=1e-12)


def _matches_reference(cg, ref):
    worst = 0.0
    for v, node in enumerate(ref["nodes"]):
        ours = dict(zip(map(tuple, cg.configs[v].tolist()), cg.node_costs[v].tolist()))
        for c, x in zip(map(tuple, node["configs"]), node["costs"]):
            worst = max(worst, rel(ours[c], x) if x else abs(ours[c]))
    for e in ref["edges"]:
        m = cg.edge_costs[(e["src"], e["tgt"])]
        for stat in ("sum", "min", "max"):
            worst = max(worst, abs(float(getattr(m, stat)()) - e[stat]) / max(abs(e[stat]), 1.0))
    return worst


@pytest.mark.parametrize("cluster", [Cluster(gpus_per_node=64), Cluster(gpus_per_node=1, inter_bw=16.0)],
                         ids=["one-node", "one-device-per-node-same-bandwidth"])
@pytest.mark.parametrize("g", GRAPH_NAMES)
def test_consistent_with_the_reference(g, cluster):
    """One node (G >= p), or G = 1 with the inter-node bandwidth equal to the
    intra-node one: every cost and the optimum equal the original tool's."""
    for p in PROCS:
        ref = reference(g, p)
        cg = build_costs(built(g), p, CostModel(cluster))
        assert _matches_reference(cg, ref) <= 1e-9, (g, p)
        if p <= 16 or g != "transformer":
            assert rel(search(cg, 0).cost, ref["optimal_cost"]) <= 1e-9, (g, p)


def test_a_plan_the_flat_model_prefers_and_two_levels_reject():
    """AlexNet on 16 devices, 8 per node, nodes joined 10x slower: the flat
    optimum keeps the convolutions data parallel over both nodes; on two
    levels that all-reduces their weights across nodes, and the search moves
    the convolutions to one node's 8 devices instead."""
    g = built("alexnet")
    flat, two = CostModel(), CostModel(Cluster(gpus_per_node=8, inter_bw=1.6))
    a = search(build_costs(g, 16, flat), 0)
    b = search(build_costs(g, 16, two), 0)
    by_name = {op.name: (x.config, y.config) for op, x, y in zip(operators(g), a.strategy, b.strategy)}
    assert by_name["conv4"] == ((16, 1, 1, 1, 1, 1, 1), (8, 1, 1, 1, 1, 1, 1))
    assert evaluate(g, a.strategy, two).total > 1.15 * b.cost  # the flat plan, costed on two levels
    assert evaluate(g, b.strategy, flat).total > 1.15 * a.cost  # and the other way round


def test_step_time_is_the_cost_at_the_device_speed():
    from cost_model import make_result

    g = built("alexnet")
    model = CostModel(Cluster(flops=312, bw=300, precision="bf16"))
    sc = evaluate(g, [(1,) * len(op.space) for op in operators(g)], model, 1)
    r = make_result(g, sc, model, 1, "evaluate")
    assert r.step_seconds == pytest.approx(r.total_cost / 312e12, rel=1e-12)
    assert r.communication == 0.0


class TestDescriptions:
    def test_presets_and_overrides(self):
        c = resolve({"precision": "bf16"}, device="a100-80gb")
        assert (c.flops, c.bw, c.device_memory, c.word_bytes, c.device) == (312.0, 300.0, 85.0, 2, "a100-80gb")
        c = resolve({"flops": 100.0, "gpus_per_node": 8, "inter_bw": 25.0}, device="h100")
        assert (c.flops, c.bw, c.precision, c.gpus_per_node) == (100.0, 450.0, "bf16", 8)  # the device's precision
        assert resolve({}) == Cluster()

    def test_cluster_files(self, tmp_path):
        toml = tmp_path / "c.toml"
        toml.write_text('device = "a100-40gb"\nprecision = "bf16"\ngpus_per_node = 8\ninter_bw = 25\nlatency = 5\n')
        c = resolve({"latency": 1.0}, file_fields=read_cluster_file(str(toml)))
        assert (c.flops, c.device_memory, c.gpus_per_node, c.inter_bw, c.latency) == (312.0, 42.3, 8, 25.0, 1.0)
        js = tmp_path / "c.json"
        js.write_text(json.dumps({"flops": 50, "bw": 100, "device_memory": 24}))
        c = resolve({}, file_fields=read_cluster_file(str(js)))
        assert (c.flops, c.bw, c.device_memory) == (50.0, 100.0, 24.0)

    @pytest.mark.parametrize("text, name, message", [
        ('{"gpus": 8}', "c.json", "unknown key 'gpus'; the keys are flops, bw"),
        ("{nope", "c.json", "is not valid JSON"),
        ("gpus_per_node = [", "c.toml", "is not valid TOML"),
        ('gpus_per_node = "8"', "c.toml", "gpus_per_node must be an integer"),
        ("[1, 2]", "c.json", "must hold a table of cluster fields"),
    ])
    def test_bad_files(self, tmp_path, text, name, message):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_cluster_file(str(path))

    @pytest.mark.parametrize("kwargs, message", [
        ({"gpus_per_node": 0}, "gpus_per_node must be an integer from 1"),
        ({"latency": -1.0}, "latency must be a number from 0 to 1,000,000, got -1.0"),
        ({"inter_bw": 0.0}, "inter_bw must be a number above 0 and at most 1,000,000,000,000, got 0.0"),
        ({"precision": "int8"}, "precision must be one of fp64, fp32, bf16, fp16"),
    ])
    def test_bad_values(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            Cluster(**kwargs)

    def test_unknown_or_unsupported_device(self):
        with pytest.raises(ValueError, match="'tpu' is not a known device; choose one of v100, a100-40gb"):
            resolve({}, device="tpu")
        with pytest.raises(ValueError, match="bf16 is not supported by v100"):
            resolve({"precision": "bf16"}, device="v100")


cli = run_cli


def test_cli_names_the_cluster_and_predicts_the_step_time(tmp_path):
    out = cli("-g", "resnet101", "-p", 24, "--gpus-per-node", 16, "--inter-bw", 4, "--latency", 2,
              "--output", tmp_path / "plan.json").stdout
    assert "10 TFLOPS; 2 nodes of 16 (the last holds 8), 16 GB/s inside a node, 4 GB/s between nodes, " \
           "2 us per collective step" in out
    data = json.loads((tmp_path / "plan.json").read_text())
    assert {k: v for k, v in data["cluster"].items() if v is not None} == {
        "flops": 10.0, "bw": 16.0, "inter_bw": 4.0, "gpus_per_node": 16, "latency": 2.0, "precision": "fp64",
        "matmul_eff": 1.0, "attention_eff": 1.0, "memory_eff": 1.0, "link_eff": 1.0, "net_eff": 1.0,
        "bucket_mb": 25.0, "overlap": 1.0, "power": 1.0}
    assert data["step_seconds"] == pytest.approx(data["total_cost"] / 10e12, rel=1e-12)
    assert "Predicted step time: " in out
    # the recorded cluster is used again; a flag overrides one field
    again = cli("--evaluate", tmp_path / "plan.json").stdout
    assert again.splitlines()[-1] == out.splitlines()[-1]
    faster = cli("--evaluate", tmp_path / "plan.json", "--latency", 0).stdout
    assert float(faster.splitlines()[-1].split()[-1]) < float(out.splitlines()[-1].split()[-1])


@pytest.mark.parametrize("args, message", [
    (["--gpus-per-node", "0"], "--gpus-per-node: must be an integer from 1 to 1,000,000, got '0'"),
    (["--latency", "-1"], "--latency: must be a number from 0 to 1,000,000, got '-1'"),
    (["--device", "tpu9"], "argument --device: 'tpu9' is not a known device; choose one of v100, a100-40gb, a100-80gb"),
    (["--precision", "int4"], "--precision must be one of fp64, fp32, bf16, fp16, got 'int4'"),
    (["--device", "v100", "--precision", "bf16"], "--precision bf16 is not supported by v100"),
    (["--cluster", "missing.toml"], "--cluster: missing.toml: no such file"),
])
def test_bad_cluster_input(tmp_path, args, message):
    proc = cli(*args, cwd=tmp_path, ok=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


def test_bad_cluster_file_cli(tmp_path):
    (tmp_path / "c.json").write_text('{"gpus_per_node": 8, "nodes": 2}')
    proc = cli("--cluster", "c.json", cwd=tmp_path, ok=False)
    assert proc.returncode == 2 and "--cluster: c.json: unknown key 'nodes'" in proc.stderr


def test_bytes_moved_do_not_depend_on_the_links():
    """The communication volume per device counts elements: the same with
    latency, or with a slow second level, as on one flat network."""
    volumes = set()
    for args in ([], ["--latency", 5], ["--gpus-per-node", 4, "--inter-bw", 1]):
        out = run_cli("-p", 8, "--compare", *args).stdout
        row = next(line for line in out.splitlines() if line.startswith("  data parallel "))
        volumes.add(" ".join(row.split()[-2:]))  # "875 MB"
    assert len(volumes) == 1


@pytest.mark.parametrize("given", [{"network": "nvlink"}, {"network": "NVLink"}])
def test_a_network_as_fast_as_a_node_replaces_the_devices_network(given):
    """``--device h100 --network nvlink``: the nodes are joined as fast as
    inside one, none of the device's InfiniBand figures kept; another
    network brings its own."""
    c = resolve(given, device="h100")
    assert c.network.lower() == "nvlink" and c.inter_bw is None and c.gpus_per_node == 8
    ib = resolve({}, device="h100")
    assert ib.inter_bw == 50.0 and ib.network == "ib-ndr"
    roce = resolve({"network": "roce-400"}, device="h100")
    assert (roce.inter_bw, roce.net_eff, roce.inter_latency) == (50.0, 0.75, 8.0)
    # a step across nodes now costs what it costs inside one
    w = np.array([1e9])
    C = __import__("kinds").Extents("b", np.array([[16.0]]))
    same = resolve({"inter_bw": c.bw, "net_eff": c.link_eff, "inter_latency": c.latency}, device="h100")
    assert c.allreduce(w, C, "b")[0] == pytest.approx(same.allreduce(w, C, "b")[0], rel=1e-12)
    assert c.allreduce(w, C, "b")[0] < ib.allreduce(w, C, "b")[0]
