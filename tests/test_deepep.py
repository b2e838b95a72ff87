"""DeepEP's dispatch (``--deepep``, Megatron-LM's ``--moe-token-dispatcher-type
flex --moe-flex-dispatcher-backend deepep``): a mixture of experts' token
crosses once to each other node that holds one of its experts, and is
forwarded inside it, where the all-to-all sends each of its copies.  The
traffic against the hypergeometric chance, the switch's refusals and
records, the export, and the held-out Model Zoo run it brings within a few
percent."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import ROOT, bash_array, export_text, one_line_error, run_cli

MIXTRAL = str(ROOT / "tests" / "data" / "configs" / "mixtral-8x7b" / "config.json")
QWEN3_MOE = str(ROOT / "tests" / "data" / "families" / "qwen3_moe" / "config.json")  # 128 experts
LLAMA = str(ROOT / "tests" / "data" / "configs" / "llama3-8b" / "config.json")
ZOO = json.loads((ROOT / "tests" / "data" / "published" / "megatron_moe_modelzoo.json").read_text())


def test_a_token_crosses_once_to_each_node_holding_its_experts():
    """Between nodes, a device sends a token to each other node of its
    expert group that holds any of its k experts, once: with 32 devices on
    4 nodes and 128 experts, top-8, 2.72 tokens where the all-to-all sends
    6 of its 8 copies across; inside a node, the copies for the node's
    other devices and those forwarded from other nodes.  One expert per
    token (k = 1) crosses as often as the all-to-all's copy; a group inside
    one node is unchanged."""
    from cluster import Cluster
    from kinds import Extents

    cheap = Cluster(gpus_per_node=8, inter_bw=2.0)  # a device's link to other nodes 8 times dearer
    C = Extents("xb", np.array([[32.0, 1.0], [8.0, 4.0]]))  # experts over 4 nodes; over one node
    words = 8.0 * 1000  # 1,000 tokens' 8 copies
    missed = math.comb(128 - 32, 8) / math.comb(128, 8)  # a node holds none of a token's 8 experts
    between = 1000 * 3 * (1 - missed)
    inside = words * 7 / 32 + words * 24 / 32 * 7 / 8
    got = cheap.alltoall(words, C, "x", once=(8, 128))
    step, inter_step = cheap.step_cost, cheap.inter_step_cost
    assert between == pytest.approx(2721.8, abs=0.05)
    assert got[0] == pytest.approx(cheap.word * inside + step + cheap.inter_word * between + inter_step, rel=1e-12)
    assert got[1] == pytest.approx(cheap.alltoall(words, C, "x")[1], rel=1e-12)  # one node: as before
    plain = cheap.alltoall(words, C, "x")[0]
    assert plain == pytest.approx(cheap.word * words * 7 / 32 + step + cheap.inter_word * words * 24 / 32 + inter_step)
    assert between / (words * 24 / 32) == pytest.approx(0.4536, abs=1e-4) and got[0] < 0.6 * plain
    one = cheap.alltoall(1000.0, C, "x", once=(1, 128))[0] - cheap.word * (1000 * 7 / 32 + 1000 * 24 / 32 * 7 / 8)
    assert one == pytest.approx(cheap.alltoall(1000.0, C, "x")[0] - cheap.word * 1000 * 7 / 32, rel=1e-12)


DEEPSEEK_V3 = ROOT / "tests" / "data" / "families" / "deepseek_v3" / "config.json"  # 256 experts, 8 groups, 4 chosen


def test_node_limited_routing_crosses_to_the_nodes_of_the_chosen_groups():
    """DeepSeek-V3's node-limited routing (256 experts in 8 groups, a
    token's top-8 from 4 of them): on 8 nodes, a group each, a token
    crosses to each other node whose group is chosen, half of them,
    ``1 - C(7, 4) / C(8, 4)``, where 8 experts chosen freely reach 66% of
    the nodes; on 4 nodes of two groups, ``1 - C(6, 4) / C(8, 4)``; on 16
    nodes, half a group each, a node is reached when its group is chosen
    and one of the token's 2 experts there falls on it.  Inside a node,
    as without the limit."""
    from cluster import Cluster
    from kinds import Extents

    cheap = Cluster(gpus_per_node=8, inter_bw=2.0)
    words = 8.0 * 1000  # 1,000 tokens' 8 copies
    for q, hit in ((64, 1 - math.comb(7, 4) / math.comb(8, 4)), (32, 1 - math.comb(6, 4) / math.comb(8, 4)),
                   (128, 4 / 8 * (1 - math.comb(16, 2) / math.comb(32, 2)))):
        C = Extents("xb", np.array([[float(q), 1.0]]))
        nodes = q // 8
        inside, between = cheap.alltoall_words(words, C, "x", once=(8, 256, 8, 4))
        free_inside, free_between = cheap.alltoall_words(words, C, "x", once=(8, 256))
        assert between[0] == pytest.approx(1000 * (nodes - 1) * hit, rel=1e-12), q
        assert inside[0] == pytest.approx(free_inside[0], rel=1e-12)
        if q == 64:
            free = 1 - math.comb(256 - 32, 8) / math.comb(256, 8)
            assert free_between[0] == pytest.approx(1000 * 7 * free, rel=1e-12)
            assert free == pytest.approx(0.662, abs=1e-3)
            assert between[0] < 0.77 * free_between[0]


def test_deepseek_v3_s_node_limited_routing_shortens_its_dispatch(tmp_path):
    """DeepSeek-V3 read from its config (``n_group`` 8, ``topk_group`` 4)
    over 8 nodes of expert parallelism with DeepEP: its dispatch and
    combine cross between nodes less than the same model routed over all
    its groups (``topk_group`` 8, as a config without the key reads), the
    compute the same; ``topk_method`` ``greedy`` ignores the groups;
    without DeepEP the limit changes nothing; a ``topk_group`` beyond
    ``n_group`` is refused in one line."""
    from cli.args import parse_args
    from planner import plan

    cfg = json.loads(DEEPSEEK_V3.read_text())
    assert (cfg["n_group"], cfg["topk_group"]) == (8, 4)
    free = tmp_path / "free"
    free.mkdir()
    (free / "config.json").write_text(json.dumps({**cfg, "topk_group": 8}))
    unset = tmp_path / "unset"
    unset.mkdir()
    (unset / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "topk_group"}))
    base = ["-p", "256", "-b", "256", "--seq", "4096", "--device", "h100", "--framework", "megatron", "--plan",
            "pp=4,ep=64,dp=64,zero=1,microbatch=1,recompute=full"]

    def run(graph, *more):
        return plan(parse_args(["-g", str(graph), *base, *more])).result

    limited, routed = run(DEEPSEEK_V3, "--deepep"), run(free, "--deepep")
    assert limited.compute == pytest.approx(routed.compute, rel=1e-12)
    assert limited.step_seconds < 0.97 * routed.step_seconds
    assert run(unset, "--deepep").total_cost == routed.total_cost
    (unset / "config.json").write_text(json.dumps({**cfg, "topk_method": "greedy"}))  # any group: no limit
    assert run(unset, "--deepep").step_seconds > limited.step_seconds
    assert run(DEEPSEEK_V3).total_cost == run(free).total_cost
    (free / "config.json").write_text(json.dumps({**cfg, "topk_group": 9}))
    proc = run_cli("-g", free, *base, ok=False)
    assert proc.returncode == 2 and "topk_group 9 is more than the 8 groups (n_group)" in one_line_error(proc)


def test_the_switch_needs_megatron_and_the_report_says_it(tmp_path):
    """``--deepep`` is Megatron-LM's switch: refused in one line under
    another framework or none; under Megatron the report's header names
    it, and the plan file records it for ``--evaluate``; a cluster file
    may carry it."""
    out = tmp_path / "plan.json"
    for framework in (("--framework", "torchtitan"), ()):
        proc = run_cli("-g", MIXTRAL, "-p", 64, "-b", 256, "--seq", 4096, "--device", "h100", *framework, "--plan",
                       "tp=2,ep=8,sp=1,zero=3", "--deepep", "--output", out, ok=False, cwd=tmp_path)
        assert proc.returncode == 2 and one_line_error(proc) == \
            "--deepep needs --framework megatron (--moe-flex-dispatcher-backend deepep)"
        assert list(tmp_path.iterdir()) == []  # nothing written
    args = ("-g", QWEN3_MOE, "-p", 64, "-b", 64, "--seq", 4096, "--device", "h100", "--framework", "megatron",
            "--plan", "tp=2,ep=16,etp=1,sp=1,zero=1")
    assert "Framework: Megatron-LM (sequence parallel, DeepEP dispatch)" in run_cli(*args, "--deepep").stdout
    assert "DeepEP" not in run_cli(*args).stdout.split("\n\n")[0]


def test_deepep_round_trips_through_files(tmp_path):
    """The plan file records --deepep and ``--evaluate`` costs it again; a
    cluster file may give it; under another framework the record is
    dropped, not refused.  The step shrinks with it, and the elements a
    device moves (the plan file's ``comm_bytes_per_device``) count DeepEP's
    copies: fewer between nodes, more forwarded inside them."""
    args = ("-g", QWEN3_MOE, "-p", 64, "-b", 64, "--seq", 4096, "--device", "h100", "--framework", "megatron",
            "--plan", "tp=2,ep=16,etp=1,sp=1,zero=1")

    def record(*more):
        out = tmp_path / "again.json"
        run_cli(*more, "--output", out, "-q", cwd=tmp_path)
        return json.loads(out.read_text())
    first = record(*args, "--deepep")
    (tmp_path / "plan.json").write_text(json.dumps(first))
    assert first["framework"]["deepep"] is True
    again = record("-g", QWEN3_MOE, "--evaluate", tmp_path / "plan.json")
    assert again["step_seconds"] == first["step_seconds"]
    plain = record(*args)
    assert plain["step_seconds"] > first["step_seconds"]
    assert plain["comm_bytes_per_device"] != first["comm_bytes_per_device"]
    cluster = tmp_path / "cluster.toml"
    cluster.write_text('framework = "megatron"\ndeepep = true\n')
    filed = record("-g", QWEN3_MOE, "-p", 64, "-b", 64, "--seq", 4096, "--device", "h100", "--cluster", cluster,
                   "--plan", "tp=2,ep=16,etp=1,sp=1,zero=1")
    assert filed["step_seconds"] == first["step_seconds"]
    other = record("-g", QWEN3_MOE, "--evaluate", tmp_path / "plan.json", "--framework", "torchtitan")
    assert other["framework"]["name"] == "torchtitan" and other["framework"]["deepep"] is False


def test_the_megatron_export_names_the_dispatcher_the_plan_costs():
    """A mixture of experts' Megatron-LM arguments name the grouped
    product and the dispatcher the plan is costed with: the all-to-all
    (Megatron Core's default, ``allgather``, moves the tokens otherwise),
    or DeepEP through the flex dispatcher; a dense model's name neither."""
    kw = dict(batch=256, seq=4096, device="h100", framework="megatron", plan="tp=2,ep=8,sp=1,zero=1")
    plain = bash_array(export_text("megatron", MIXTRAL, 64, **kw), "PASE_PARALLEL_ARGS")
    deepep = bash_array(export_text("megatron", MIXTRAL, 64, deepep=True, **kw), "PASE_PARALLEL_ARGS")
    assert " ".join(plain).endswith("--bf16 --moe-grouped-gemm --moe-token-dispatcher-type alltoall")
    assert " ".join(deepep).endswith("--moe-grouped-gemm --moe-token-dispatcher-type flex "
                                     "--moe-flex-dispatcher-backend deepep")
    dense = bash_array(export_text("megatron", LLAMA, 8, batch=16, seq=1024, device="h100", framework="megatron",
                                   plan="tp=2,sp=1,zero=1"), "PASE_PARALLEL_ARGS")
    assert not any(w.startswith("--moe") for w in dense)


def test_the_model_zoos_cross_node_run_with_deepep():
    """Held out: the Megatron-MoE Model Zoo's Qwen3-235B-A22B on 256 H100s,
    TP 2 x PP 8 (VP 4) x EP 32 (4 nodes to an expert group), DeepEP, 19.7
    s a step: within 5% as it ran (``--deepep``, the table's flags, and the
    row's recomputation of the norms and the experts' activation), where
    every copy sent across nodes was 22% slow."""
    from planner import plan
    from settings import Settings

    r = dict(zip(ZOO["columns"], ZOO["rows"][0]))
    spec = ZOO["models"][r["model"]]
    cfg = {**json.loads((ROOT / "tests" / "data" / spec["base"] / "config.json").read_text()), **spec["changes"]}
    assert ZOO["flags"] == ["--overlap", "1", "--deepep"]

    def step(deepep: bool) -> float:
        from tempfile import TemporaryDirectory

        with TemporaryDirectory() as tmp:
            graph = f"{tmp}/config.json"
            with open(graph, "w") as f:
                json.dump(cfg, f)
            p = plan(Settings(graph=graph, procs=r["gpus"], batch=r["batch"], seq=r["seq"], device=r["device"],
                              framework="megatron", plan=r["plan"], overlap=1.0, deepep=deepep,
                              recompute_modules=ZOO["row_flags"][r["label"]][1]))
        return p.result.step_seconds
    assert abs(r["step_seconds"] / step(True) - 1) < 0.05
    assert r["step_seconds"] / step(False) - 1 < -0.18
