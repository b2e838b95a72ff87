"""The memory model and the search within the device memory: hand-worked
memory of operators, parameter counts, the Lagrangian search against brute
force, and the command line."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from cluster import Cluster
from conftest import run_cli, ROOT, built, costed
from cost_model import CostModel, evaluate, op_memory
from models import build_graph
from dp_search import DoesNotFit, generate_seq, search, search_within, solve, within_memory
from graph import operators
from test_dp_search import random_problem


def by_name(g):
    return {op.name: op for op in operators(g)}


class TestOperatorMemory:
    """Per-device elements of (weights, kept activations), worked by hand."""

    def test_convolution(self):
        conv1 = by_name(built("alexnet"))["conv1"]  # (b,c,h,w,r,s,n) = (128,3,55,55,11,11,96), with a bias
        w, a = op_memory(conv1, [(8, 1, 1, 1, 1, 1, 1), (2, 1, 1, 1, 1, 1, 4), (1, 3, 1, 1, 1, 1, 1)])
        filt, bias, image = 96 * 3 * 11 * 11, 96, 128 * 3 * 227 * 227
        assert w.tolist() == [filt + bias, (filt + bias) / 4, filt / 3 + bias]  # held whole by the b splits
        assert a.tolist() == [image / 8, image / 2, image / 3]  # the input image's shard

    def test_fully_connected(self):
        fc6 = by_name(built("alexnet"))["fc6"]  # (b, n, k) = (128, 4096, 9216)
        w, a = op_memory(fc6, [(1, 2, 4), (8, 1, 1), (4, 4, 2)])
        assert w.tolist() == [9216 * 4096 / 8 + 4096 / 2, 9216 * 4096 + 4096, 9216 * 4096 / 8 + 4096 / 4]
        assert a.tolist() == [128 * 9216 / 4, 128 * 9216 / 8, 128 * 9216 / 8]  # input (b, k)

    def test_embedding(self):
        embed = by_name(built("rnnlm"))["embed"]  # (b, s, d, v) = (128, 256, 2048, 100000)
        w, a = op_memory(embed, [(2, 1, 1, 4), (1, 1, 8, 1), (4, 2, 1, 1)])
        table, ids = 100000 * 2048, 128 * 256
        assert w.tolist() == [table / 4, table / 8, table]
        assert a.tolist() == [ids / 2, ids, ids / 8]  # the ids (b, s)

    def test_bytes_by_precision_and_optimizer(self):
        fc6 = by_name(built("alexnet"))["fc6"]
        w, a = op_memory(fc6, [(1, 2, 4)])
        parts = CostModel(Cluster(precision="bf16"), optimizer="adam").memory_bytes(w[0], a[0])
        assert parts == (2 * w[0], 2 * w[0], 12 * w[0], 2 * a[0])  # 4-byte master copy and two moments
        parts = CostModel(optimizer="momentum").memory_bytes(w[0], a[0])
        assert parts == (8 * w[0], 8 * w[0], 8 * w[0], 8 * a[0])  # the original's 8-byte word
        assert CostModel(Cluster(precision="fp32"), optimizer="sgd").memory_bytes(w[0], a[0]) == (
            4 * w[0], 4 * w[0], 0.0, 4 * a[0])


def alexnet_parameters():
    convs = [(96, 3, 11), (256, 96, 5), (384, 256, 3), (384, 384, 3), (256, 384, 3)]
    fcs = [(9216, 4096), (4096, 4096), (4096, 1024)]
    return sum(n * c * k * k + n for n, c, k in convs) + sum(k * n + n for k, n in fcs)


def transformer_parameters(e=512, v=50000, layers=6):
    h, k, f = e // 64, 64, 4 * e
    attention = 3 * h * e * k + h * e * k + 2 * e  # Q/K/V, output, the norm's scale and shift
    ffn = 2 * e * f + 2 * e
    return 2 * v * e + layers * (attention + ffn) + layers * (2 * attention + ffn) + e * v


CONFIGS = ROOT / "tests" / "data" / "configs"


@pytest.mark.parametrize("graph, want", [
    (str(CONFIGS / "gpt2" / "config.json"), 124_439_808),  # the published counts; GPT-2 ties its head
    (str(CONFIGS / "llama3-8b" / "config.json"), 8_030_261_248),
    (str(CONFIGS / "mixtral-8x7b" / "config.json"), 46_702_792_704),
    ("resnet101", 44_549_160),  # torchvision's resnet101
    ("inception3", 23_834_568),  # torchvision's inception_v3 without the auxiliary classifier
    ("alexnet", alexnet_parameters()),
    ("rnnlm", 100000 * 2048 + 2 * (4096 * 8192 + 8192) + 2048 * 100000),
    ("transformer", transformer_parameters()),
])
def test_parameter_count_is_the_sum_of_weight_elements(graph, want):
    g = built(graph) if "/" not in graph else build_graph(graph, batch=1, seq=16)
    ones = [(1,) * len(op.space) for op in operators(g)]
    sc = evaluate(g, ones, CostModel(), 1)
    assert math.fsum(sc.weights) == want  # one device holds every weight whole
    from cost_model import make_result

    assert make_result(g, sc, CostModel(), 1, "evaluate").parameters == want


def brute_force_within(nodes, emats, mems, capacity):
    best = math.inf
    for idx in itertools.product(*(range(len(c)) for c in nodes)):
        if sum(m[i] for m, i in zip(mems, idx)) <= capacity:
            cost = sum(c[i] for c, i in zip(nodes, idx)) + sum(m[idx[u], idx[v]] for (u, v), m in emats.items())
            best = min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_within_memory_against_brute_force(seed):
    nodes, emats = random_problem(seed)
    rng = np.random.default_rng(1000 + seed)
    mems = [rng.uniform(1, 50, size=len(c)) for c in nodes]
    least, most = sum(m.min() for m in mems), sum(m.max() for m in mems)
    order, _ = generate_seq(len(nodes), list(emats))

    def run(costs):
        return solve(costs, emats, order, threads=1)

    for capacity in np.linspace(least, most, 5)[:-1] + 1e-9:
        b = within_memory(nodes, mems, emats, capacity, run)
        want = brute_force_within(nodes, emats, mems, capacity)
        got_mem = sum(m[i] for m, i in zip(mems, b.result.index))
        got = sum(c[i] for c, i in zip(nodes, b.result.index)) + sum(
            m[b.result.index[u], b.result.index[v]] for (u, v), m in emats.items())
        assert got_mem <= capacity * (1 + 1e-12)  # never over the capacity
        assert got == pytest.approx(b.cost, rel=1e-12)
        assert b.lower_bound <= want * (1 + 1e-9) <= got * (1 + 1e-9) + 1e-9  # the bound holds
        if b.status in ("optimal", "unconstrained optimum fits"):
            assert got == pytest.approx(want, rel=1e-9)
        assert got <= b.lower_bound * (1 + b.gap) * (1 + 1e-9)
    with pytest.raises(DoesNotFit, match="the smallest any strategy of this graph needs"):
        within_memory(nodes, mems, emats, least * 0.99, run)


@pytest.mark.parametrize("seed", range(20))
def test_a_second_capacity_starts_from_the_first_solves(seed):
    """relax at a smaller capacity with the first call's solves (memo): its
    bound still holds against brute force, its answer fits, and it solves
    no more than a fresh call."""
    from search.lagrange import relax
    from search.options import Problem

    nodes, emats = random_problem(seed)
    rng = np.random.default_rng(2000 + seed)
    mems = [rng.uniform(1, 50, size=len(c)) for c in nodes]
    least, most = sum(m.min() for m in mems), sum(m.max() for m in mems)
    order, _ = generate_seq(len(nodes), list(emats))
    problem = Problem(nodes, mems, emats)

    def run(costs, edges, groups):
        return solve(costs, emats, order, threads=1)

    first = least + 0.5 * (most - least)
    memo = {}
    relax(problem, first, run, memo=memo)
    for second in (first * 0.97, least + 0.2 * (most - least)):
        warm = relax(problem, second, run, memo=dict(memo))
        cold = relax(problem, second, run)
        want = brute_force_within(nodes, emats, mems, second)
        assert warm.memory <= second * (1 + 1e-12)
        assert warm.lower_bound <= want * (1 + 1e-9) <= warm.cost * (1 + 1e-9) + 1e-9
        assert warm.searches <= cold.searches
        if warm.status == "optimal":
            assert warm.cost == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("graph, p", [("alexnet", 8), ("resnet101", 8), ("transformer", 8), ("rnnlm", 16)])
def test_real_graphs_never_exceed_the_capacity(graph, p):
    cg = costed(graph, p)
    free = search(cg, 0)
    used = sum(cg.memory[v][i] for v, i in enumerate(free.index))
    for share in (1.01, 0.9, 0.6, 0.3):
        capacity = cg.least_memory + share * (used - cg.least_memory)
        b = search_within(cg, capacity)
        assert b.memory <= capacity
        assert sum(cg.memory[v][i] for v, i in enumerate(b.result.index)) == pytest.approx(b.memory, rel=1e-12)
        assert b.cost >= free.cost * (1 - 1e-12) and b.lower_bound <= b.cost
        assert b.cost == pytest.approx(cg.cost_at(b.result.index), rel=1e-12)
        if share > 1:
            assert b.status == "unconstrained optimum fits" and b.cost == free.cost


cli = run_cli


def test_report_and_files_carry_the_memory(tmp_path):
    out = cli("-g", "transformer", "-p", 16, "--device-memory", "2.5", "--precision", "fp32", "--compare",
              "--output", tmp_path / "plan.json").stdout
    data = json.loads((tmp_path / "plan.json").read_text())
    mem = data["memory"]
    assert mem["total"] <= 2.5e9 and mem["fits"] is True and mem["capacity"] == 2.5e9
    parts = [mem[k] for k in ("weights", "gradients", "optimizer_state", "activations")]
    assert sum(parts) == pytest.approx(mem["total"], rel=1e-12)
    assert sum(layer["memory"] for layer in data["layers"]) == pytest.approx(mem["total"], rel=1e-12)
    assert data["optimizer"] == "adam" and data["cluster"]["precision"] == "fp32"
    assert data["search"]["within_memory"]["status"] in ("optimal", "bound")
    assert data["baselines"]["data_parallel"]["memory"]["fits"] is False
    assert "Within 2.5 GB per device: " in out and "fits the 2.5 GB" in out
    assert "  data parallel " in out and "GB!" in out and "! needs more memory than the 2.5 GB of a device" in out
    header = next(line for line in out.splitlines() if line.split()[:2] == ["id", "name"])
    assert header.split()[-1] == "memory"
    run = cli("--evaluate", tmp_path / "plan.json")  # the file's memory setting comes back
    assert "fits the 2.5 GB" in run.stdout
    cli("-g", "rnnlm", "-p", 4, "--output", tmp_path / "plan.csv")
    assert (tmp_path / "plan.csv").read_text().splitlines()[0].endswith(",cost,memory,weights,activations")


def test_without_a_capacity_the_search_is_unchanged():
    free = cli("-g", "resnet101", "-p", 8).stdout
    roomy = cli("-g", "resnet101", "-p", 8, "--device-memory", 1000).stdout
    assert free.splitlines()[-1] == roomy.splitlines()[-1]
    assert "the unconstrained optimum fits (exact)" in roomy and "Within" not in free


@pytest.mark.parametrize("args, message", [
    (["--device-memory", "0.01"], "no strategy fits in 0.01 GB per device: the smallest any strategy of this "
                                  "graph needs at this p is 0.371 GB"),
    (["--device-memory", "0"], "--device-memory: must be a number above 0 and at most 1,000,000, got '0'"),
    (["--device-memory", "nan"], "--device-memory: must be a number above 0 and at most 1,000,000, got 'nan'"),
    (["--device-memory", "1e9"], "--device-memory: must be a number above 0 and at most 1,000,000, got '1e9'"),
    (["--device-memory", "2e6"], "--device-memory: must be a number above 0 and at most 1,000,000, got '2e6'"),
    (["--optimizer", "lion"], "--optimizer must be one of sgd, momentum, adam, got 'lion'"),
    (["--precision", "fp8"], "--precision must be one of fp64, fp32, bf16, fp16, got 'fp8'"),
])
def test_bad_memory_input(args, message):
    proc = cli("-g", "alexnet", "-p", 8, *args, ok=False)
    assert proc.returncode == (1 if "no strategy fits" in message else 2) and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


def test_a_device_preset_bounds_the_search():
    out = cli("-g", "transformer", "-p", 8, "--device", "v100", "--precision", "fp16").stdout
    assert "v100: 125 TFLOPS, 34 GB (fp16)" in out and "Within 32 GB per device" in out  # 2 GB kept free
