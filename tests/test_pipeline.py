"""Pipeline parallelism (pipeline.py): the schedules' formulas, the stages'
cuts and memory, plans written and read back, pp = 1 as before, bad input,
and Megatron-LM's Table 1 (Narayanan et al., SC'21): each small row's
configuration fits in 80 GB, is predicted within 15 % of its published
TFLOP/s, and the search finds a plan at least as fast that fits."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from megatron_table import ROWS
from megatron_table import config as megatron_config
from megatron_table import eq3 as eq3_flops

import pipeline
from pipeline import Schedule, balanced_ranges, parse_schedule, partitions, stage_ranges

def planned(tmp_path, row, *args, name="plan.json"):
    out = tmp_path / name
    run_cli("-g", megatron_config(tmp_path, row), "-p", row["gpus"], "-b", row["batch"], "--device", "a100-80gb",
            "--attention", "materialized", *args, "--output", out)
    return json.loads(out.read_text())


# -- the schedules ---------------------------------------------------------------------


class TestSchedules:
    def test_alpa_eq2_for_gpipe_and_1f1b(self):
        times = [3.0, 5.0, 4.0]
        for name in ("gpipe", "1f1b"):
            assert Schedule(name).time(times, 8) == sum(times) + (8 - 1) * max(times)

    def test_interleaving_divides_the_bubble(self):
        t, pp, m, v = [2.0] * 4, 4, 8, 3
        plain, inter = Schedule("1f1b"), Schedule("interleaved", v)
        assert plain.bubble(t, m) == pytest.approx((pp - 1) / m)
        assert inter.bubble(t, m) == pytest.approx((pp - 1) / (v * m))

    def test_too_few_micro_batches_to_fill_an_interleaved_pipeline(self):
        """With fewer micro-batches than stages, each still runs through
        every stage in turn: one alone takes the stages' sum, chunks or
        not; with enough, interleaving divides the bubble as before."""
        t = [2.0] * 4
        for v in (2, 4, 8):
            inter = Schedule("interleaved", v)
            assert inter.time(t, 1) == sum(t) == Schedule("1f1b").time(t, 1)
            assert inter.time(t, 2) == pytest.approx(sum(t) + 2.0 / v)
            assert inter.time(t, 4) == pytest.approx(4 * 2.0 + 3 * 2.0 / v)

    def test_unequal_chunks_wait_on_the_largest(self):
        """With chunks of unequal blocks the fill and the drain wait on the
        largest chunk: the bubble is its share of the stage, not 1 / V."""
        t, m = [2.0] * 4, 8
        inter = Schedule("interleaved", 2)
        assert pipeline.chunk_share([16, 16], 2) is None and pipeline.chunk_share([16, 15], 2) == 8 / 15
        assert pipeline.chunk_share([3, 2], 2) == 2 / 3 and pipeline.chunk_sizes(15, 2) == [7, 8]
        # the embedding and the loss counted as a block of the end stages (Megatron-LM's split): even chunks
        assert pipeline.chunk_share([15, 16, 15], 8, ends=True) is None
        assert pipeline.chunk_share([15, 16, 15], 8) == 2 / 15
        assert pipeline.chunk_share([7, 8, 7], 8, ends=True) is None
        assert inter.time(t, m) == m * 2.0 + 3 * 2.0 / 2
        assert inter.time(t, m, share=2 / 3) == pytest.approx(m * 2.0 + 3 * 2.0 * 2 / 3)
        assert inter.bubble(t, m, share=2 / 3) == pytest.approx(3 * (2 / 3) / m)

    def test_micro_batches_in_flight(self):
        pp, m = 4, 8
        assert [Schedule("gpipe").in_flight(i, pp, m) for i in range(pp)] == [8] * 4
        assert [Schedule("1f1b").in_flight(i, pp, m) for i in range(pp)] == [4, 3, 2, 1]
        assert Schedule("1f1b").in_flight(0, pp, 2) == 2  # never more than there are
        # interleaved (Megatron-LM): 2 (pp - i - 1) + (v - 1) pp + 1 chunks of 1/v of the stage
        assert Schedule("interleaved", 2).in_flight(0, pp, m) == (2 * 3 + 4 + 1) / 2

    def test_each_chunk_keeps_its_own_micro_batches(self):
        """At the stage's peak (alike chunks) the interleaved schedule's
        chunks hold what ``in_flight`` counts in all; stage 0 of 4 with 8
        micro-batches has run 10 forward chunks to warm up (6 of chunk 0,
        4 of chunk 1) and one more; the last stage has warmed up on its
        first chunk and keeps its last (the head's) for one micro-batch,
        however heavy that chunk; 1F1B and GPipe have one chunk."""
        pp, m = 4, 8
        inter = Schedule("interleaved", 2)
        assert inter.chunk_in_flight(0, pp, m) == (7.0, 4.0)
        assert inter.chunk_in_flight(pp - 1, pp, m) == (4.0, 1.0)
        assert inter.chunk_in_flight(pp - 1, pp, m, weights=(1.0, 100.0)) == (4.0, 1.0)
        for i in range(pp):
            assert sum(inter.chunk_in_flight(i, pp, m)) / 2 == inter.in_flight(i, pp, m)
            assert Schedule("1f1b").chunk_in_flight(i, pp, m) == (Schedule("1f1b").in_flight(i, pp, m),)
        assert Schedule("gpipe").chunk_in_flight(1, pp, m) == (8.0,)

    def test_chunk_ranges(self):
        """A stage's blocks split into its chunks as evenly as they divide
        (15 into 7 and 8: the later chunk, held for fewer micro-batches, takes
        the extra block), what precedes its blocks in the first chunk, what
        follows them in the last; fewer blocks than chunks refused."""
        from dataclasses import dataclass

        from errors import InputError

        @dataclass
        class Chain:
            start: int
            size: int
            count: int

        chain = Chain(start=1, size=3, count=15)  # node 0 before the blocks, 46 to 49 after them
        assert pipeline.chunk_ranges(chain, 0, 50, 2) == [(0, 22), (22, 50)]  # 7 blocks, then 8 and what follows
        assert pipeline.chunk_ranges(chain, 10, 19, 2) == [(10, 13), (13, 19)]  # blocks 3 to 5: 1 and 2
        with pytest.raises(InputError, match="a stage of 3 blocks cannot hold 4 model chunks"):
            pipeline.chunk_ranges(chain, 10, 19, 4)
        # one block fewer than chunks: the embedding's chunk (first stage, first) or the loss's (last stage, last)
        assert pipeline.chunk_ranges(chain, 0, 10, 4) == [(0, 1), (1, 4), (4, 7), (7, 10)]
        assert pipeline.chunk_ranges(chain, 37, 50, 4) == [(37, 40), (40, 43), (43, 46), (46, 50)]
        with pytest.raises(InputError, match="a stage of 2 blocks cannot hold 3 model chunks"):
            pipeline.chunk_ranges(chain, 10, 16, 3)  # in the middle: no embedding, no loss to hold

    @pytest.mark.parametrize("text, want", [("gpipe", ("gpipe", 1)), ("1F1B", ("1f1b", 1)),
                                            ("interleaved", ("interleaved", 2)), ("interleaved:4", ("interleaved", 4))])
    def test_parse(self, text, want):
        s = parse_schedule(text)
        assert (s.name, s.chunks) == want

    @pytest.mark.parametrize("text", ["zb", "gpipe:2", "interleaved:1", "interleaved:x", "interleaved:99"])
    def test_parse_refuses(self, text):
        from errors import InputError

        with pytest.raises(InputError):
            parse_schedule(text)


# -- the cuts --------------------------------------------------------------------------


def test_partitions_share_the_blocks():
    for N, pp in ((24, 4), (80, 8), (105, 35), (7, 3), (5, 1)):
        for counts in partitions(N, pp):
            assert len(counts) == pp and sum(counts) == N and min(counts) >= 0
        assert tuple([N // pp + (i < N % pp) for i in range(pp)]) in partitions(N, pp)


def test_stage_ranges_cut_between_blocks():
    from blocks import find_chains
    from models.hf_config import load_config

    g = load_config(str(Path(__file__).parent / "data" / "configs" / "gpt2" / "config.json"), batch=2, seq=64)
    (chain,) = find_chains(g)
    ranges = stage_ranges(g.number_of_nodes(), chain, (4, 4, 4))
    assert ranges[0][0] == 0 and ranges[-1][1] == g.number_of_nodes()
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert [lo for lo, _ in ranges[1:]] == [chain.start + 4 * chain.size, chain.start + 8 * chain.size]


def test_balanced_ranges_without_blocks():
    assert balanced_ranges([1, 1, 1, 1], 2) == [(0, 2), (2, 4)]
    assert balanced_ranges([10, 1, 1, 1, 1], 2) == [(0, 1), (1, 5)]
    assert balanced_ranges([0, 0, 0, 5], 3) == [(0, 2), (2, 3), (3, 4)]  # each stage holds something
    assert balanced_ranges([1] * 10, 3) == [(0, 4), (4, 7), (7, 10)]


def test_a_cut_sends_every_tensor_that_crosses_it():
    from models import build_graph
    from pipeline_layout import sent_on

    g = build_graph("inception3", batch=4)
    lo, hi = 0, 40
    # every tensor from a node before the cut read by one after it, once per tensor
    want = {(u, d["out"]) for u, v, d in g.edges(data=True) if u < hi <= v}
    assert sent_on(g)(lo, hi) == sum(g.nodes[u]["op"].outputs[o].size for u, o in want)
    assert len(want) > 1  # the inception modules' branches: more than one tensor crosses


# -- planning --------------------------------------------------------------------------


def test_pp_1_is_the_plain_search(tmp_path):
    def report(*more):  # without the search's time, which varies from run to run
        out = run_cli("-g", "transformer", "-p", 16, *more).stdout
        return [line for line in out.splitlines() if not line.startswith("Search: ")]

    assert report() == report("--pp", 1)


@pytest.mark.parametrize("graph, p", [("resnet101", 16), (str(ROOT / "tests/data/configs/gpt2"), 8)])
def test_one_micro_batch_on_one_stage_costs_as_the_plan_itself(tmp_path, graph, p):
    """On a real device, --microbatches 1 (one stage, one micro-batch) is
    the plan without stages: the same cost as the default search's and as
    --pp 1's, and its plan file costs the same with its pipeline record or
    without it (the gradients overlapped operator by operator either way;
    they were once overlapped with the whole stage's backward pass here
    and with each operator's there, ResNet-101's 5.686e12 against
    5.757e12)."""
    def total(*more, cwd=tmp_path):
        out = run_cli("-g", graph, "-p", p, "--device", "h100", "-q", *more, cwd=cwd).stdout
        return float(out.splitlines()[-1].split(": ")[1])

    plain = total()
    assert total("--pp", 1) == plain
    assert total("--microbatches", 1, "--output", "one.json") == pytest.approx(plain, rel=1e-12)
    data = json.loads((tmp_path / "one.json").read_text())
    assert (data["pipeline"]["pp"], data["pipeline"]["m"]) == (1, 1)
    with_record = total("--evaluate", "one.json")
    del data["pipeline"]
    (tmp_path / "bare.json").write_text(json.dumps(data))
    assert with_record == pytest.approx(total("--evaluate", "bare.json"), rel=1e-12)
    assert with_record == pytest.approx(plain, rel=1e-12)


def test_a_pipelined_plan_is_written_and_read_back(tmp_path):
    cfg = Path(__file__).parent / "data" / "configs" / "gpt2" / "config.json"
    path = tmp_path / "pipe.json"
    out = run_cli("-g", cfg, "-p", 16, "-b", 32, "--seq", 256, "--device", "a100-80gb", "--pp", 2,
                  "--microbatches", 8, "--schedule", "1f1b", "--output", path).stdout
    data = json.loads(path.read_text())
    pipe = data["pipeline"]
    assert (pipe["pp"], pipe["m"], pipe["micro"], pipe["schedule"]) == (2, 8, 4, "1f1b")
    assert pipe["stages"][0][0] == 0 and pipe["stages"][-1][1] == len(data["layers"])
    assert [s["in_flight"] for s in pipe["stage_figures"]] == [2, 1]
    assert "Pipeline: 2 stages of 8 devices, 8 micro-batches of 4 samples, 1f1b" in out
    again = run_cli("--evaluate", path).stdout
    assert again.splitlines()[-1] == out.splitlines()[-1]
    assert "Strategy read from" in again


def test_a_pipelined_plan_evaluated_at_another_batch_runs_more_micro_batches(tmp_path):
    """-b with a pipelined plan file keeps the plan's micro-batch and runs
    as many of them as the new batch holds: the cost and the tokens/s both
    the new batch's (tokens/s from the step the report prints), the same
    as the plan at that batch; a batch no whole number of micro-batches
    is refused in one line."""
    cfg = small_gpt(tmp_path)
    path, wide = tmp_path / "pipe.json", tmp_path / "wide.json"
    run_cli("-g", cfg, "-p", 8, "-b", 16, "--seq", 128, "--device", "a100-80gb", "--plan",
            "tp=2,pp=2,dp=2,microbatch=2", "--output", path)
    run_cli("-g", cfg, "-p", 8, "-b", 64, "--seq", 128, "--device", "a100-80gb", "--plan",
            "tp=2,pp=2,dp=2,microbatch=2", "--output", wide)
    out = tmp_path / "again.json"
    text = run_cli("--evaluate", path, "-b", 64, "--output", out).stdout
    assert "Pipeline: 2 stages of 4 devices, 16 micro-batches of 4 samples" in text
    again, planned = json.loads(out.read_text()), json.loads(wide.read_text())
    assert again["pipeline"]["m"] == 16 and again["batch"] == 64
    assert again["step_seconds"] == pytest.approx(planned["step_seconds"], rel=1e-9)
    step = float(re.search(r"Predicted step time: ([\d.]+) ms", text).group(1)) / 1e3
    tokens = float(re.search(r"([\d,]+) tokens/s per device", text).group(1).replace(",", ""))
    assert tokens == pytest.approx(64 * 128 / step / 8, rel=0.01)
    bad = run_cli("--evaluate", path, "-b", 6, ok=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "-b 6 is not a whole number of the pipeline's micro-batches of 4 samples" in bad.stderr


@pytest.mark.parametrize("change, message", [
    ({"pp": 0}, "pp must be a whole number, 1 or more, got 0"),
    ({"pp": "2"}, "pp must be a whole number, 1 or more, got '2'"),
    ({"m": 2.0}, "m must be a whole number, 1 or more, got 2.0"),
    ({"micro": True}, "micro must be a whole number, 1 or more, got True"),
    ({"pp": 4}, "the pipeline record has pp = 4 but 2 stages"),
    ({"m": 3}, "the pipeline's 3 micro-batches of 4 samples are not the plan's batch of 16"),
])
def test_a_pipeline_record_out_of_kilter_is_refused(tmp_path, change, message):
    """A plan file's pipeline record is checked before it is costed: its
    counts whole numbers, as many stages as ``pp``, ``m x micro`` its
    batch; each refused in one line naming the file."""
    cfg = small_gpt(tmp_path)
    path = tmp_path / "pipe.json"
    run_cli("-g", cfg, "-p", 8, "-b", 16, "--seq", 128, "--plan", "tp=2,pp=2,dp=2,microbatch=2", "--output", path)
    data = json.loads(path.read_text())
    data["pipeline"].update(change)
    path.write_text(json.dumps(data))
    bad = run_cli("--evaluate", path, ok=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    assert message in bad.stderr and str(path) in bad.stderr


def small_gpt(tmp_path) -> Path:
    """A small GPT-2-family model whose vocabulary splits (51200, as Megatron-LM's runs)."""
    return megatron_config(tmp_path, {"params_b": 0.02, "heads": 8, "hidden": 256, "layers": 4})


def test_the_stage_memory_counts_the_micro_batches_in_flight(tmp_path):
    cfg = small_gpt(tmp_path)
    figures = {}
    for sched in ("gpipe", "1f1b"):
        path = tmp_path / f"{sched}.json"
        run_cli("-g", cfg, "-p", 8, "-b", 16, "--seq", 128, "--device", "a100-80gb", "--plan",
                f"tp=2,pp=2,microbatch=1,schedule={sched}", "--output", path)
        figures[sched] = json.loads(path.read_text())["pipeline"]["stage_figures"]
    g, f = figures["gpipe"], figures["1f1b"]
    assert [s["in_flight"] for s in g] == [8, 8] and [s["in_flight"] for s in f] == [2, 1]
    # the same plan: memory differs by the activations of the micro-batches no longer in flight
    act0 = (g[0]["memory"] - f[0]["memory"]) / (8 - 2)
    act1 = (g[1]["memory"] - f[1]["memory"]) / (8 - 1)
    assert act0 > 0 and act1 > 0
    assert g[0]["time"] == f[0]["time"]


def test_a_searched_pipeline_no_cut_can_run_says_why(tmp_path):
    """--pp with a schedule no cut of the blocks can run: the error says
    why, not that nothing fits the memory."""
    from conftest import one_line_error, tiny_llama

    proc = run_cli("-g", tiny_llama(tmp_path, 5), "-p", 4, "-b", 8, "--seq", 128, "--device", "h100", "--pp", 2,
                   "--schedule", "interleaved:3", ok=False)
    assert one_line_error(proc).startswith("no pipeline of up to 2 stages: interleaved:3 needs at least 3 blocks in "
                                           "each stage, not 2 of the 5 over 2 stages")


def test_an_interleaved_plan_file_evaluated_takes_its_chunks_as_plan_does(tmp_path):
    """--evaluate of an interleaved plan checks its stages' blocks as --plan
    does: refused, in one line naming the file, when a stage holds fewer
    blocks than chunks (a file edited so); the plan as written evaluates
    to what it recorded."""
    from conftest import one_line_error, tiny_llama

    args = ("-g", tiny_llama(tmp_path, 5), "-p", 4, "-b", 8, "--seq", 128, "--device", "h100")
    run_cli(*args, "--plan", "tp=1,pp=2,microbatch=1,schedule=interleaved:2", "--output", tmp_path / "plan.json")
    run_cli(*args, "--evaluate", "plan.json", "--output", "again.json", cwd=tmp_path)
    first, again = (json.loads((tmp_path / n).read_text())["pipeline"] for n in ("plan.json", "again.json"))
    assert again["stage_figures"] == first["stage_figures"]
    rec = json.loads((tmp_path / "plan.json").read_text())
    (lo, cut), (_, hi) = rec["pipeline"]["stages"]
    block = (cut - lo - 1) // 3  # the first stage: the embedding and 3 blocks
    rec["pipeline"]["stages"] = [[lo, lo + 1 + block], [lo + 1 + block, hi]]  # 1 block, then 4
    (tmp_path / "edited.json").write_text(json.dumps(rec))
    proc = run_cli(*args, "--evaluate", "edited.json", cwd=tmp_path, ok=False)
    assert one_line_error(proc) == ("--evaluate: edited.json: interleaved:2 needs at least 2 blocks in each stage, "
                                    "not 1 of the 5 over 2 stages")


def test_an_interleaved_last_stage_keeps_its_last_chunk_for_one_micro_batch(tmp_path):
    """The last stage of an interleaved pipeline warms up on its first chunk
    and then runs its last chunk (the last block, the final norm, the output
    layer and the loss) forward and backward in turn: at its peak it keeps
    the first chunk's activations for 2 micro-batches and the last chunk's
    for one, where chunks counted alike would keep the logits of a
    32,768-word vocabulary for 1.5."""
    from cli.args import parse_args
    from conftest import tiny_llama
    from planner import plan

    p = plan(parse_args(["-g", str(tiny_llama(tmp_path, 4)), "-p", "2", "-b", "4", "--seq", "128", "--device",
                         "h100", "--plan", "tp=1,pp=2,microbatch=1,schedule=interleaved:2"]))
    pipe = p.result.pipeline
    last = pipe.stages[-1]
    r = last.result
    first = math.fsum(x.memory[3] for x in r.layers if x.name.startswith("layer2/"))
    rest = math.fsum(x.memory[3] for x in r.layers if not x.name.startswith("layer2/"))
    assert pipe.m == 4 and rest > first > 0
    assert Schedule("interleaved", 2).chunk_in_flight(1, 2, 4, (first, rest)) == (2.0, 1.0)
    assert last.memory == pytest.approx(math.fsum(r.memory[:3]) + 2 * first + rest + r.transient, rel=1e-12)
    assert last.memory < math.fsum(r.memory[:3]) + 1.5 * r.memory[3] + r.transient
    assert last.in_flight == pytest.approx((2 * first + rest) / r.memory[3], rel=1e-12)


def test_interleaving_sends_v_times_as_much(tmp_path):
    cfg = small_gpt(tmp_path)
    recs = {}
    for sched in ("1f1b", "interleaved:2"):
        path = tmp_path / f"{sched.replace(':', '')}.json"
        run_cli("-g", cfg, "-p", 8, "-b", 16, "--seq", 128, "--plan", f"tp=2,pp=2,microbatch=1,schedule={sched}",
                "--output", path)
        recs[sched] = json.loads(path.read_text())["pipeline"]
    a, b = recs["1f1b"], recs["interleaved:2"]
    assert a["stage_figures"][0]["sends"] == b["stage_figures"][0]["sends"]
    # the paper's model: a stage's time adds its sends forward and back (2 x sends x W, W = 5000), v times
    sends = a["stage_figures"][0]["sends"]
    extra = b["stage_figures"][0]["time"] - a["stage_figures"][0]["time"]
    assert sends > 0 and extra == pytest.approx(2 * sends * 5000.0, rel=1e-9)
    assert b["bubble"] < a["bubble"]


def test_stages_on_different_nodes_send_over_the_network_between_them(tmp_path):
    """A stage boundary between nodes sends at the network's pace, one
    inside a node at the node's: with 2 devices to a stage, the boundary of
    stages 0 and 1 crosses nodes of 2 and stays inside nodes of 4; the
    paper's model adds ``2 x sends x W`` to stage 0 (W = 5000 FLOP a word
    inside a node, 50000 between at 1.6 GB/s), planned and evaluated."""
    cfg = small_gpt(tmp_path)

    def stage0(per_node, inter, *more):
        path = tmp_path / f"{per_node}-{inter}.json"
        run_cli("-g", cfg, "-p", 4, "-b", 16, "--seq", 128, "--plan", "tp=2,pp=2,microbatch=1",
                "--gpus-per-node", per_node, "--inter-bw", inter, "--output", path, *more)
        return path, json.loads(path.read_text())["pipeline"]["stage_figures"][0]

    _, inside = stage0(4, 1.6)
    _, same = stage0(4, 16)
    assert inside["time"] == same["time"]
    path, between = stage0(2, 1.6)
    assert between["sends"] == inside["sends"] > 0
    assert between["time"] - inside["time"] == pytest.approx(2 * inside["sends"] * (50000.0 - 5000.0), rel=1e-9)
    again = tmp_path / "again.json"
    run_cli("--evaluate", path, "--output", again)
    assert json.loads(again.read_text())["pipeline"]["stage_figures"][0]["time"] == pytest.approx(between["time"])


def test_a_boundary_whose_pairs_straddle_a_node_sends_between_nodes():
    """Device ``j`` of stage ``i`` sends to ``j + q``: with 3 devices to a
    stage on nodes of 8, stage 1 (3-5) sends to 6-8, 5 to 8 across nodes,
    while stage 0 (0-2 to 3-5) stays inside; stages of a node or more
    always cross; the last stage wraps to the first across nodes where
    the stages fill more than a node."""
    from cluster import Cluster

    eight = Cluster(gpus_per_node=8, inter_bw=1.6)
    assert [pipeline._between_nodes(eight, 3, i) for i in range(3)] == [False, True, True]
    assert [pipeline._between_nodes(eight, 2, i) for i in range(3)] == [False, False, False]
    assert pipeline._between_nodes(eight, 2, 3) and pipeline._between_nodes(eight, 8, 0)
    assert not pipeline._between_nodes(Cluster(), 3, 1)
    assert not pipeline._wraps_between_nodes(eight, 2, 4) and pipeline._wraps_between_nodes(eight, 3, 3)


def test_an_interleaved_last_stage_sends_back_to_the_first(tmp_path):
    """Under an interleaved schedule of ``v`` chunks the last stage sends
    each chunk but its last on to the first stage's next: ``v - 1``
    boundaries a micro-batch, forward and back, at the network's pace
    where the stages fill more than a node (the paper's model: W = 5000
    FLOP a word inside a node of 4, 50000 between nodes of 2 at 1.6 GB/s)."""
    cfg = small_gpt(tmp_path)

    def last(per_node, sched):
        path = tmp_path / f"{per_node}-{sched.replace(':', '')}.json"
        run_cli("-g", cfg, "-p", 4, "-b", 16, "--seq", 128, "--plan", f"tp=2,pp=2,microbatch=1,schedule={sched}",
                "--gpus-per-node", per_node, "--inter-bw", 1.6, "--output", path)
        figures = json.loads(path.read_text())["pipeline"]["stage_figures"]
        return figures[0]["sends"], figures[-1]

    boundary, plain = last(4, "1f1b")
    assert plain["sends"] == 0
    for per_node, word in ((4, 5000.0), (2, 50000.0)):
        _, inter = last(per_node, "interleaved:2")
        assert inter["sends"] == boundary / 2  # per chunk: one boundary of two chunks
        assert inter["time"] - plain["time"] == pytest.approx(2 * boundary * word, rel=1e-9)


def test_a_sweep_takes_pp(tmp_path):
    out = run_cli("-g", "transformer", "-p", 8, "--pp", "1,2").stdout
    assert out.count("\n") > 2 and " pp" in out.splitlines()[0] + out.splitlines()[1]


@pytest.mark.parametrize("args, message", [
    (("-g", "transformer", "-p", 8, "--pp", 3), "--pp 3 does not divide the 8 devices"),
    (("-g", "transformer", "-p", 8, "--pp", 2, "--microbatches", 3), "does not divide the batch of"),
    (("-g", "transformer", "-p", 8, "--pp", 0), "--pp"),
    (("-g", "transformer", "-p", 8, "--schedule", "zb"), "schedule must be"),
    (("-g", "transformer", "-p", 8, "--schedule", "gpipe"), "--schedule orders a pipeline's stages: give --pp"),
    (("-g", "transformer", "-p", 8, "--plan", "pp=2,schedule=interleaved:5"), "interleaved:5"),
    (("-g", "alexnet", "-p", 8, "--plan", "pp=2,schedule=interleaved"), "no repeated blocks"),
    ((("-g", Path(__file__).parent / "data" / "configs" / "gpt2" / "config.json", "-p", 8, "--plan", "tp=2")),
     "give the model a vocabulary of 50432"),
    (("-g", "transformer", "-p", 8, "--plan", "tp=4,schedule=gpipe"), "--plan: a gpipe schedule needs pp > 1"),
    (("-g", "transformer", "-p", 8, "--plan", "tp=4,pp=1,schedule=1f1b"), "--plan: a 1f1b schedule needs pp > 1"),
    (("-g", "transformer", "-p", 8, "--plan", "pp=2,schedule=interleaved:"), "schedule must be gpipe, 1f1b"),
    (("-g", "transformer", "-p", 8, "--pp", 2, "--schedule", "interleaved:"), "schedule must be gpipe, 1f1b"),
    (("-g", "transformer", "-p", 8, "--plan", "pp=4,microbatch=64,schedule=interleaved"),
     "an interleaved schedule needs at least as many micro-batches as its 4 stages; micro-batches of 64 make 1 "
     "of the 64"),
    (("-g", "transformer", "-p", 8, "--pp", 4, "--microbatches", 2, "--schedule", "interleaved"),
     "the interleaved schedule needs at least as many micro-batches as the 4 stages, not 2"),
])
def test_bad_pipeline_input(args, message):
    proc = run_cli(*args, ok=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


# -- Megatron-LM, Table 1 ----------------------------------------------------------------

SMALL = ROWS[:5]  # 1.7B to 39.1B: 32 to 512 GPUs, pipeline 1 and 2


@pytest.mark.parametrize("row", SMALL, ids=lambda r: f"{r['params_b']}B")
def test_megatron_row_fits_and_is_predicted_within_15_percent(tmp_path, row):
    """The row's configuration (tensor and pipeline degrees, the rest data
    parallel, micro-batch 1, full recomputation as the paper trained) fits
    in 80 GB, and the TFLOP/s per GPU it implies (eq. 3 over the predicted
    step time) is within 15 % of the published figure, with the A100
    preset's constants as they are."""
    data = planned(tmp_path, row, "--plan", f"tp={row['tp']},pp={row['pp']},recompute=full,microbatch=1")
    assert data["memory"]["fits"] is True and data["memory"]["total"] <= 77e9
    predicted = eq3_flops(row) / data["step_seconds"] / row["gpus"] / 1e12
    assert predicted == pytest.approx(row["tflops_per_gpu"], rel=0.15)
    if row["pp"] > 1:
        assert data["pipeline"]["pp"] == row["pp"]
        assert data["pipeline"]["m"] == row["batch"] // (row["gpus"] // (row["tp"] * row["pp"]))


@pytest.mark.parametrize("row", [ROWS[0], ROWS[1], ROWS[4]], ids=lambda r: f"{r['params_b']}B")
def test_the_search_finds_a_plan_at_least_as_fast_that_fits(tmp_path, row):
    paper = planned(tmp_path, row, "--plan", f"tp={row['tp']},pp={row['pp']},recompute=full,microbatch=1",
                    name="paper.json")
    found = planned(tmp_path, row, "--pp", "auto", "--microbatches", "auto", name="found.json")
    assert found["memory"]["fits"] is True and found["memory"]["total"] <= found["memory"]["capacity"]
    assert found["step_seconds"] <= paper["step_seconds"]
    assert math.isfinite(found["step_seconds"]) and found["step_seconds"] > 0


def test_micro_batches_without_stages_are_reported_as_gradient_accumulation(tmp_path):
    """One stage is no pipeline: the report says the micro-batches run one
    after the other on all the devices, with no stage table and no bubble."""
    out = run_cli("-g", "transformer", "-p", 8, "--microbatches", 4, "-q", cwd=tmp_path).stdout
    assert ("Gradient accumulation: 4 micro-batches of 32 samples, one after the other on all 8 devices, each "
            in out)
    assert "Pipeline:" not in out and "stages" not in out and "bubble" not in out
    assert "Predicted step time:" in out and "gradient synchronisation" in out


def test_a_standard_configurations_micro_batch_is_reported_per_replica_too(tmp_path):
    """--plan's ``microbatch`` counts one data-parallel replica's samples
    (Megatron-LM's --micro-batch-size), as the header says; the pipeline
    and accumulation lines count a micro-batch over all the replicas and
    say each replica's share, so that the two figures agree."""
    staged = run_cli("-g", "transformer", "-p", 8, "-b", 64, "--plan", "dp=4,pp=2,microbatch=2", "-q",
                     cwd=tmp_path).stdout
    assert "dp=4, pp=2 (1f1b, micro-batch 2)" in staged.splitlines()[0]
    assert "Pipeline: 2 stages of 4 devices, 8 micro-batches of 8 samples (2 per data-parallel replica), 1f1b" in staged
    flat = run_cli("-g", "transformer", "-p", 8, "-b", 64, "--plan", "dp=8,microbatch=2", "-q", cwd=tmp_path).stdout
    assert "Gradient accumulation: 4 micro-batches of 16 samples (2 per data-parallel replica), one after" in flat
    run_cli("-g", "transformer", "-p", 8, "-b", 64, "--plan", "dp=4,pp=2,microbatch=2", "-q", "--output", "std.json",
            cwd=tmp_path)
    assert json.loads((tmp_path / "std.json").read_text())["pipeline"]["replicas"] == 4
    again = run_cli("--evaluate", "std.json", "-q", cwd=tmp_path).stdout  # the plan file keeps it
    assert "8 micro-batches of 8 samples (2 per data-parallel replica), 1f1b" in again
    searched = run_cli("-g", "transformer", "-p", 8, "-b", 64, "--pp", 2, "--microbatches", 8, "-q",
                       cwd=tmp_path).stdout
    assert "8 micro-batches of 8 samples, 1f1b" in searched and "per data-parallel replica" not in searched


@pytest.mark.parametrize("settings", [dict(graph="transformer", procs=8, pp="auto"),
                                      dict(graph=str(ROOT / "tests/data/configs/llama3-8b/config.json"), procs=64,
                                           device="h100", batch=64, seq=1024, search="standard", compare=True)],
                         ids=["pp-auto", "standard-compare"])
def test_a_plan_builds_each_of_its_graphs_once(monkeypatch, settings):
    """The planner's job builds the model at each batch it needs (the
    step's, each micro-batch's) once, whichever stage asks: the pipeline
    search, the standard search, the per-operator plan beside it."""
    from collections import Counter

    import models
    import planner
    from settings import Settings

    built = Counter()
    real = models.build_graph

    def counting(source, **params):
        g = real(source, **params)
        built[g.graph["batch"]] += 1
        return g

    monkeypatch.setattr(models, "build_graph", counting)
    planned = planner.plan(Settings(**settings))
    assert len(built) > 2  # micro-batches were asked for
    assert max(built.values()) == 1, built
    assert planned.result.total_cost > 0


def test_an_interleaved_schedule_refused_says_how_the_blocks_fall(tmp_path):
    """Stages of unequal blocks (5 over 2: 3 and 2) split into two chunks
    as evenly as they divide (1 and 2, 1 and 1), as torchtitan and
    Megatron-LM's pipeline layout take them; a stage cannot hold more
    chunks than blocks, and the refusal gives the counts."""
    from conftest import one_line_error, tiny_llama

    g = tiny_llama(tmp_path, 5)
    args = ("-g", g, "-p", 4, "-b", 8, "--seq", 128, "--device", "h100")
    for fw in ("none", "megatron"):
        proc = run_cli(*args, "--plan", "tp=1,pp=2,microbatch=1,schedule=interleaved:2", "--framework", fw)
        assert "interleaved:2" in proc.stdout and "Predicted step time" in proc.stdout
    proc = run_cli(*args, "--plan", "tp=1,pp=2,microbatch=1,schedule=interleaved:3", ok=False)
    assert one_line_error(proc) == "--plan: interleaved:3 needs at least 3 blocks in each stage, not 2 of the 5 over " \
                                   "2 stages"


def test_an_interleaved_schedule_needs_repeated_blocks():
    """A network without repeated blocks has no chunks to interleave:
    --plan says so in one line (pipeline.unblocked_error, which --evaluate
    gives too)."""
    from conftest import one_line_error

    proc = run_cli("-g", "alexnet", "-p", 8, "--plan", "dp=4,pp=2,schedule=interleaved", ok=False)
    assert proc.returncode == 2
    assert one_line_error(proc) == ("--plan: the interleaved schedule splits stages into chunks of blocks; alexnet has "
                                    "no repeated blocks")


def test_one_stage_of_the_whole_batch_is_dropped_by_its_pieces_bound_answer_unchanged(monkeypatch):
    """``--pp auto`` ranks one stage of the whole batch (the plan itself)
    too, whose figure costs as much as the plan's own search: where the
    bound of its pieces (:func:`dp_search.pieces_bound`) already loses to
    the settings ranked before it, it is not worked out, and the answer is
    the one found when every setting is."""
    import dp_search
    from cli.args import parse_args
    from planner import plan

    args = ["-g", str(ROOT / "tests/data/configs/llama3-8b"), "-p", "16", "-b", "16", "--seq", "1024", "--device",
            "h100", "--pp", "auto"]
    real = dp_search.stage_costs
    found = {}
    for name, bound in (("bounded", dp_search.pieces_bound), ("unbounded", lambda costed, **kw: -math.inf)):
        worked = []
        monkeypatch.setattr(dp_search, "pieces_bound", bound)
        monkeypatch.setattr(dp_search, "stage_costs",
                            lambda costed, **kw: worked.append(costed.n) or real(costed, **kw))
        r = plan(parse_args(args)).result
        found[name] = (len(worked), r.total_cost, r.pipeline.pp, r.pipeline.m, r.strategy)
    assert found["bounded"][1:] == found["unbounded"][1:]
    assert found["bounded"][2:4] == (4, 8)  # a pipeline, not the plan without stages
    assert found["bounded"][0] == found["unbounded"][0] - 1  # the whole batch's one stage not worked out


def test_the_plan_without_stages_is_not_searched_where_its_pieces_within_the_memory_lose(monkeypatch):
    """Without a flag the plan without stages is searched beside the
    pipelines. Llama 3 70B on 64 H100s: its unconstrained optimum would beat
    the best pipeline but does not fit, and the Lagrangian bound of its
    pieces within the memory (:func:`dp_search.pieces_within`) already loses
    to the pipeline, so its search within the memory is never run; the
    answer is the one found when it is."""
    import dp_search
    import planner.whole
    from cli.args import parse_args
    from planner import plan

    args = ["-g", str(ROOT / "tests/data/configs/llama3-70b"), "-p", "64", "-b", "64", "--seq", "4096", "--device",
            "h100"]
    real = planner.whole._search
    found = {}
    for name, bound in (("bounded", dp_search.pieces_within), ("unbounded", lambda *a, **kw: -math.inf)):
        searched = []  # the plan without stages searched within the memory, beside the pipelines' answer
        monkeypatch.setattr(dp_search, "pieces_within", bound)
        monkeypatch.setattr(planner.whole, "_search", lambda job, costed, progress, cutoff=None: searched.append(
            cutoff is not None) or real(job, costed, progress, cutoff))
        r = plan(parse_args(args)).result
        found[name] = (sum(searched), r.total_cost, r.pipeline.pp, r.pipeline.m, r.strategy)
    assert found["bounded"][1:] == found["unbounded"][1:]
    assert found["bounded"][2:4] == (8, 64)  # a pipeline, not the plan without stages
    assert found["bounded"][0] == 0 < found["unbounded"][0]


def test_balanced_counts_give_the_ends_what_balances_the_slowest_stage():
    """A chain of 22 identical blocks (cost 1 each) after work worth 8 of
    them and before work worth 3 (a ResNet's early layers, its head): the
    near-even shares leave the first stage the slowest; the balanced
    shares give it one block, and no cut of the blocks has a faster
    slowest stage."""
    from itertools import product

    from pipeline_search import balanced_counts

    N = 22
    c = [float(k) for k in range(1, N + 1)]
    table = ([8 + x for x in c], c, [3 + x for x in c], 33.0)

    def slowest(counts):
        return max([8 + counts[0]] + list(counts[1:-1]) + [3 + counts[-1]])

    counts = balanced_counts(table, N, 4)
    assert sum(counts) == N and min(counts) >= 1 and counts == (1, 9, 9, 3)
    every = [x for x in product(range(1, N), repeat=4) if sum(x) == N]
    assert slowest(counts) == min(map(slowest, every)) == 9
    assert min(slowest(x) for x in partitions(N, 4)) > 9  # what the near-even shares alone reach
    assert balanced_counts(table, N, 2) == (8, 14) and slowest((8, 14)) == 17
    assert balanced_counts(table, 3, 4) is None


@pytest.mark.parametrize("graph, pp", [("transformer", 4), ("inception3", 4), ("resnet101", 4)])
def test_stages_share_the_work_of_a_graph_beyond_its_longest_chain(graph, pp):
    """The built-in transformer's decoder layers (which read the encoder's
    output: no run of repeated blocks) and Inception's short runs are cut
    where the work balances, not lumped whole into the last stage beside
    the encoder's or the longest run's blocks (the transformer's slowest
    stage took 9.6 times its fastest, 463 ms a step against 223 now;
    Inception refused 4 stages for its 2 longest blocks); ResNet-101's
    early layers take the first stage with fewer of layer3's blocks
    (137 ms a step to 118)."""
    from cli.args import parse_args
    from planner import plan

    r = plan(parse_args(["-g", graph, "-p", "8", "--pp", str(pp)])).result
    times = [s.time for s in r.pipeline.stages]
    assert r.pipeline.pp == pp and max(times) < 2.5 * min(times)
    steps = {"transformer": 0.223, "inception3": 0.0700, "resnet101": 0.118}
    assert round(r.step_seconds, 4 if graph == "inception3" else 3) == steps[graph]


def test_the_interleaved_schedule_runs_on_blocks_only():
    """The interleaved schedule's chunks are blocks: a graph without any is
    refused in one line (as --plan refuses it), and one with fewer blocks
    than its stages too; with enough blocks (the transformer's encoder),
    its stages cut between them."""
    from conftest import one_line_error

    proc = run_cli("-g", "alexnet", "-p", 8, "--pp", 2, "--schedule", "interleaved", ok=False)
    assert proc.returncode == 2 and one_line_error(proc) == (
        "the interleaved schedule splits stages into chunks of blocks; alexnet has no repeated blocks")
    proc = run_cli("-g", "transformer", "-p", 8, "--pp", 8, "--schedule", "interleaved", ok=False)
    assert proc.returncode == 2 and one_line_error(proc) == (
        "no pipeline of up to 8 stages: the interleaved schedule splits stages into chunks of blocks; transformer "
        "has 6, fewer than the 8 stages")
    out = run_cli("-g", "transformer", "-p", 8, "--pp", 2, "--schedule", "interleaved", "-q").stdout
    assert "Pipeline: 2 stages of 4 devices, 32 micro-batches of 4 samples, interleaved:2" in out


@pytest.mark.parametrize("flags", [(), ("--device", "h100")])
def test_more_stages_than_operators_says_so(flags):
    """RNNLM's 4 operators cannot make 8 stages: said as such, not as a
    want of micro-batches or of memory."""
    from conftest import one_line_error

    proc = run_cli("-g", "rnnlm", "-p", 8, "--pp", 8, *flags, ok=False)
    assert proc.returncode == 2 and one_line_error(proc) == "8 stages need at least 8 operators; the graph has 4"


def _pp_step(*args):
    from cli.args import parse_args
    from planner import plan

    return plan(parse_args([str(a) for a in args])).result


def test_the_cuts_between_blocks_and_the_cuts_of_the_operator_order_are_ranked_together():
    """ShuffleNet's longest run of blocks holds 41% of its operators: the
    cuts of the operator order (the balanced one, and the one whose
    slowest stage with its sends is the fastest) are ranked beside the
    cuts between the run's blocks, by their stages and their sends alike,
    and the answer is at least as fast as the blocks' cuts (5.89 ms a step
    on 4 stages, 4.46 ms on 2) and far faster than the balanced cut alone
    (15.3 ms on 4)."""
    import onnx

    shufflenet = Path(onnx.__file__).parent / "backend/test/data/light/light_shufflenet.onnx"
    for pp, blocks, step in ((4, 5.89e-3, 5.54e-3), (2, 4.46e-3, 3.80e-3)):
        r = _pp_step("-g", shufflenet, "-p", 8, "--pp", pp)
        assert r.pipeline.pp == pp and r.step_seconds <= blocks and round(r.step_seconds, 5) == step


def test_crossings_count_each_tensor_read_beyond_a_cut_once():
    """What a cut before each operator of the built-in transformer would
    cut (its encoder's output read by every decoder layer), against the
    edges counted one by one."""
    from models import build_graph
    from pipeline_layout import crossings, sent_on

    g = build_graph("transformer", 8)
    n = g.number_of_nodes()
    got = crossings(g)
    assert len(got) == n + 1 and got[0] == 0 and got[n] == 0
    for v in range(n + 1):
        seen = {(u, d["out"]) for u, w, d in g.edges(data=True) if u < v <= w}
        assert got[v] == sum(g.nodes[u]["op"].outputs[o].size for u, o in seen)
    sends = sent_on(g)
    for lo, hi in ((0, 40), (40, 120), (120, n)):
        made = {(u, d["out"]) for u, w, d in g.edges(data=True) if lo <= u < hi <= w}
        assert sends(lo, hi) == sum(g.nodes[u]["op"].outputs[o].size for u, o in made)


@pytest.mark.parametrize("realistic", [False, True])
def test_bottleneck_ranges_find_the_fastest_slowest_stage(realistic):
    """Against every cut of small random problems: the ranges' slowest
    stage (its items' sum with its sends, summed or overlapped) is the
    least any cut reaches."""
    import itertools
    import random

    from pipeline_layout import bottleneck_ranges

    rng = random.Random(7)
    for _ in range(200):
        n, pp = rng.randint(2, 9), rng.randint(1, 4)
        if pp > n:
            continue
        weights = [rng.choice([0.0, rng.random()]) for _ in range(n)]
        crossing = [0.0] + [rng.random() * 3 for _ in range(n - 1)] + [0.0]
        prices = [rng.random() for _ in range(pp)]

        def slowest(bounds):
            worst = 0.0
            for k in range(pp):
                lo, hi = bounds[k], bounds[k + 1]
                work, sends = sum(weights[lo:hi]), crossing[hi] * prices[k] if k < pp - 1 else 0.0
                worst = max(worst, max(work, sends) if realistic else work + sends)
            return worst

        ranges = bottleneck_ranges(weights, crossing, prices, realistic)
        assert len(ranges) == pp and ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(lo < hi for lo, hi in ranges) and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        every = [(0, *c, n) for c in itertools.combinations(range(1, n), pp - 1)]
        assert slowest([lo for lo, _ in ranges] + [n]) == pytest.approx(min(map(slowest, every)), rel=1e-12)


def test_the_balanced_shares_are_tried_where_the_even_ones_do_not_fit():
    """ResNet-101 on 4 stages of 0.52 GB devices: no near-even share of
    layer3's blocks fits (the first stage, with the early layers and the
    most micro-batches in flight, is too large), the balanced one (one
    block there) does; and interleaved, the balanced shares keep each
    stage's chunks (two blocks at least)."""
    r = _pp_step("-g", "resnet101", "-p", 8, "--pp", 4, "--microbatches", 128, "--device-memory", 0.52)
    assert r.memory_bytes <= 0.52e9 and round(r.step_seconds, 3) == 0.545
    r = _pp_step("-g", "resnet101", "-p", 8, "--pp", 4, "--schedule", "interleaved")
    assert str(r.pipeline.schedule) == "interleaved:2" and round(r.step_seconds, 3) == 0.142


@pytest.mark.parametrize("args", [
    ("-g", "alexnet", "-p", 8, "--pp", "auto"),  # its stages (20.2 ms at 4) lose to none
    ("-g", "alexnet", "-p", 4, "--microbatches", "auto"),  # accumulating 128 micro-batches took 43.1 ms
    ("-g", "resnet101", "-p", 8, "--microbatches", "auto"),  # its micro-batches' growth stops before the whole
    ("-g", ROOT / "tests/data/configs/gpt2", "-p", 8, "--device", "h100", "-b", 16, "--seq", 512, "--pp", "auto"),
])
def test_auto_is_never_slower_than_the_whole_batch_at_once(tmp_path, args):
    """--pp auto and --microbatches auto try one stage with the whole
    batch: where it wins, the answer is --pp 1's plan, said so."""
    def step(out):
        return re.search(r"Predicted step time: ([\d.]+ m?s)", out).group(1)

    auto = run_cli(*args, "-q", "--output", "auto.json", cwd=tmp_path).stdout
    flag = args.index("--pp") if "--pp" in args else args.index("--microbatches")
    whole = run_cli(*args[:flag], *args[flag + 2:], "--pp", 1, "-q", "--output", "whole.json", cwd=tmp_path).stdout
    assert step(auto) == step(whole) and "Pipeline:" not in auto and "Gradient accumulation" not in auto
    assert f"{args[flag]} auto searched " in auto and "none was faster than the whole batch at once" in auto
    saved, plain = (json.loads((tmp_path / f).read_text()) for f in ("auto.json", "whole.json"))
    assert "pipeline" not in saved and saved["layers"] == plain["layers"]  # the plan without stages, as --pp 1's
    again = run_cli("--evaluate", "auto.json", "-q", "-b", 64, cwd=tmp_path).stdout  # so it follows -b
    assert "batch 64" in again


def test_given_micro_batches_without_stages_accumulate_on_a_real_device_too():
    out = run_cli("-g", ROOT / "tests/data/configs/gpt2", "-p", 8, "--device", "h100", "-b", 16, "--seq", 512,
                  "--microbatches", 4, "-q").stdout
    assert "Gradient accumulation: 4 micro-batches of 4 samples" in out and "Pipeline:" not in out


def test_given_micro_batches_fewer_than_the_stages_run_1f1b():
    """--search standard may take fewer micro-batches than stages (each
    runs every stage in turn); --pp N --microbatches M costs them too, as
    asked, where the search of micro-batch sizes keeps at least N."""
    qwen = ("-g", ROOT / "tests/data/configs/qwen2-0.5b", "--device", "h100", "-p", 7, "-b", 8, "--seq", 128, "-q")
    std = run_cli(*qwen, "--search", "standard").stdout
    assert "pp=7 (1f1b, micro-batch 4)" in std  # 2 micro-batches on 7 stages
    given = run_cli(*qwen, "--pp", 7, "--microbatches", 2).stdout
    assert "Pipeline: 7 stages of 1 device, 2 micro-batches of 4 samples, 1f1b" in given
    assert re.search(r"\n +0 +embed \.\. \S+ \(\d+\) +0 +\d", given)  # one device: its number, not 0-0

    def step(out):
        return float(re.search(r"Predicted step time: ([\d.]+) ms", out).group(1))

    assert step(given) <= step(std)  # each stage's own plan, searched


def test_evaluate_refuses_an_interleaved_record_at_a_batch_of_fewer_micro_batches_than_stages(tmp_path):
    run_cli("-g", "transformer", "-p", 8, "--pp", 2, "--schedule", "interleaved", "-q", "--output", "ti.json",
            cwd=tmp_path)
    proc = run_cli("--evaluate", "ti.json", "-b", 4, cwd=tmp_path, ok=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "-b 4 makes 1 of the pipeline's micro-batches of 4 samples; its interleaved schedule needs at least as " \
           "many as its 2 stages (ti.json)" in proc.stderr
    assert "interleaved:2" in run_cli("--evaluate", "ti.json", "-b", 8, "-q", cwd=tmp_path).stdout  # 2: enough
