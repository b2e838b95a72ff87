"""--calibrate: the realistic model's constants fitted to measured figures
(matrix products, fused attention, nccl-tests' all_reduce_perf, a measured
step time), printed and saved as a cluster file that --cluster reads."""

from __future__ import annotations

import json
import math

import pytest

from conftest import ROOT, rel, run_cli
from test_calibrate_nccl import cluster_file, model_time

NCCL = ROOT / "tests" / "data" / "calibrate" / "all_reduce_perf.txt"
LLAMA8B = ROOT / "tests" / "data" / "configs" / "llama3-8b"


def _fitted(path) -> dict:
    import tomllib

    return tomllib.loads(path.read_text())


def test_all_reduce_perf_is_parsed():
    from cluster.nccl import collective, runs

    (run,) = runs(NCCL.read_text())
    assert (len(run.ranks), len(run.hosts)) == (8, 1) and len(run.rows) == 5
    first, last = run.rows[0], run.rows[-1]
    assert (first.size, first.seconds, first.busbw) == (8.0, 21.40e-6, 0.00)
    assert (last.size, last.seconds, last.algbw, last.busbw) == (8589934592.0, 43120e-6, 199.21, 348.62)
    assert (first.redop, first.root, first.type) == ("sum", -1, "float")
    assert collective(run, 8) == ("all_reduce", "")  # bus bandwidth 1.75 times the algorithm's, a sum


def test_nccl_gemm_and_attention_fits(tmp_path):
    (tmp_path / "nccl.txt").write_text(NCCL.read_text())
    (tmp_path / "m.toml").write_text(
        'nccl_file = "nccl.txt"\n'
        "gemm = [{m = 8192, n = 8192, k = 8192, tflops = 720.0}, {m = 4096, n = 4096, k = 4096, seconds = 2.2e-4},"
        " {m = 16384, n = 16384, k = 16384, tflops = 700.0}]\n"
        "attention = [{batch = 4, heads = 32, seq = 4096, head_dim = 128, causal = true, seconds = 0.00655}]\n")
    run_cli("--calibrate", tmp_path / "m.toml", "--device", "h100", "--save-cluster", tmp_path / "fit.toml")
    fit = _fitted(tmp_path / "fit.toml")
    # on one node of 8: the model's all-reduce meets the large messages (bandwidth) and the small ones (latency)
    cl = cluster_file(tmp_path / "fit.toml")
    for size, us in ((134217728, 737.1), (8589934592, 43120), (8, 21.40), (1024, 22.10)):
        assert rel(model_time(cl, "all_reduce", size, 8), us * 1e-6) < 0.05
    assert 0.7 < fit["link_eff"] < 0.8 and 1.4 < fit["latency"] < 1.7 and "allreduce_eff" not in fit

    # each product's share of the peak, its tiles' waves over 132 multiprocessors counted
    def share(m, n, k, t):
        tiles = math.ceil(m / 128) * math.ceil(n / 128)
        waves = math.ceil(tiles / 132)
        return 2 * m * n * k / (t * 989.5e12 * (m * n / (waves * 132 * 128 * 128)))

    shares = sorted([share(8192, 8192, 8192, 2 * 8192**3 / 720e12), share(4096, 4096, 4096, 2.2e-4),
                     share(16384, 16384, 16384, 2 * 16384**3 / 700e12)])
    assert rel(fit["matmul_eff"], shares[1]) < 1e-12
    # FlashAttention's count: 4 b h s^2 d forward, 2.5 times that backward, half of it causal
    assert rel(fit["attention_eff"], 3.5 * 4 * 4 * 32 * 4096**2 * 128 * 0.5 / (0.00655 * 989.5e12)) < 1e-12
    # the rest is the preset's
    assert fit["device"] == "h100" and fit["memory_eff"] == 0.8 and fit["flops"] == 989.5


def test_a_measured_step_time_is_met(tmp_path):
    plan = tmp_path / "plan.json"
    run_cli("-g", LLAMA8B, "-p", 8, "--device", "h100", "-b", 8, "--seq", 1024, "--plan", "dp=8,zero=3",
            "--output", plan)
    predicted = json.loads(plan.read_text())["step_seconds"]
    measured = 2.5 * predicted
    (tmp_path / "s.toml").write_text(f'step = {{plan = "plan.json", seconds = {measured!r}}}\n')
    out = run_cli("--calibrate", tmp_path / "s.toml", "--device", "h100", "--save-cluster", tmp_path / "f.toml")
    assert "as measured" in out.stdout
    fit = _fitted(tmp_path / "f.toml")
    factor = fit["matmul_eff"] / 0.75
    assert 0 < factor < 1 / 2.5  # only the compute slows down: it must slow down more than the step
    assert rel(fit["attention_eff"] / 0.45, factor) < 1e-9 and rel(fit["memory_eff"] / 0.8, factor) < 1e-9
    again = tmp_path / "again.json"
    run_cli("--evaluate", plan, "--cluster", tmp_path / "f.toml", "--output", again)
    assert rel(json.loads(again.read_text())["step_seconds"], measured) < 1e-3


def test_a_step_run_under_a_framework_is_fitted_from_its_figures(tmp_path):
    """The step's plan file records the framework that ran it (torchtitan
    of December 2024, FlashAttention-2 at 35% of an H100's peak): the one
    factor scales that framework's figures, named on the command line or
    not, and the fitted cluster then meets the measured step."""
    plan = tmp_path / "plan.json"
    run_cli("-g", LLAMA8B, "-p", 8, "--device", "h100", "-b", 8, "--seq", 1024, "--plan", "dp=8,zero=3",
            "--framework", "torchtitan@2024-12", "--output", plan)
    measured = 2.0 * json.loads(plan.read_text())["step_seconds"]
    (tmp_path / "s.toml").write_text(f'step = {{plan = "plan.json", seconds = {measured!r}}}\n')
    fits = []
    for flags in ((), ("--framework", "torchtitan@2024-12")):
        run_cli("--calibrate", tmp_path / "s.toml", "--device", "h100", *flags, "--save-cluster", tmp_path / "f.toml")
        fit = _fitted(tmp_path / "f.toml")
        assert rel(fit["attention_eff"] / 0.35, fit["matmul_eff"] / 0.75) < 1e-9
        fits.append(fit)
        again = tmp_path / "again.json"
        run_cli("--evaluate", plan, "--cluster", tmp_path / "f.toml", "--output", again)
        assert rel(json.loads(again.read_text())["step_seconds"], measured) < 1e-3
    assert fits[0] == fits[1]


def test_without_save_the_cluster_file_is_printed(tmp_path):
    (tmp_path / "m.toml").write_text('nccl_file = "n.txt"\n')
    (tmp_path / "n.txt").write_text(NCCL.read_text())
    out = run_cli("--calibrate", tmp_path / "m.toml", "--device", "h100").stdout
    assert "link_eff 0.8 -> " in out and 'device = "h100"' in out
    assert "     8 GiB    43.12 ms    " in out  # the measured and modelled times, size by size
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.toml", "n.txt"]  # nothing written


def test_older_all_reduce_perf_columns(tmp_path):
    """nccl-tests before the root column: the same figures, read from the end of each line."""
    lines = []
    for line in NCCL.read_text().splitlines():
        parts = line.split()
        lines.append(" ".join(parts[:4] + parts[5:]) if parts and not line.startswith("#") else line)
    (tmp_path / "n.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "m.toml").write_text('nccl_file = "n.txt"\n')
    run_cli("--calibrate", tmp_path / "m.toml", "--device", "h100", "--save-cluster", tmp_path / "f.toml")
    (tmp_path / "new.txt").write_text(NCCL.read_text())
    (tmp_path / "new.toml").write_text('nccl_file = "new.txt"\n')
    run_cli("--calibrate", tmp_path / "new.toml", "--device", "h100", "--save-cluster", tmp_path / "g.toml")
    fit, same = _fitted(tmp_path / "f.toml"), _fitted(tmp_path / "g.toml")
    assert fit["link_eff"] == same["link_eff"] and fit["latency"] == same["latency"] and fit["link_eff"] != 0.8


def test_the_measurements_are_never_overwritten(tmp_path):
    (tmp_path / "m.toml").write_text('nccl_file = "n.txt"\n')
    (tmp_path / "n.txt").write_text(NCCL.read_text())
    for target, why in (("m.toml", "one of the measurements' files"), ("n.txt", "must end in .toml")):
        proc = run_cli("--calibrate", tmp_path / "m.toml", "--device", "h100", "--save-cluster", tmp_path / target,
                       ok=False)
        assert proc.returncode == 2 and why in proc.stderr
    assert (tmp_path / "m.toml").read_text() == 'nccl_file = "n.txt"\n' and (tmp_path / "n.txt").read_text() == \
        NCCL.read_text()


@pytest.mark.parametrize("target", ["fit.json", "fit"])
def test_the_fitted_cluster_is_saved_only_where_cluster_reads_it_as_toml(tmp_path, target):
    """The fitted cluster is TOML: a --save-cluster path that --cluster
    would read as JSON (any other ending) is refused before any fit, and
    nothing is written there."""
    (tmp_path / "m.toml").write_text('nccl_file = "n.txt"\n')
    (tmp_path / "n.txt").write_text(NCCL.read_text())
    proc = run_cli("--calibrate", tmp_path / "m.toml", "--device", "h100", "--save-cluster", tmp_path / target,
                   ok=False)
    assert proc.returncode == 2 and proc.stderr == (
        f"scheduler.py: error: --save-cluster: {tmp_path / target} must end in .toml: the fitted cluster is written "
        "as TOML, and --cluster reads a file as TOML by that ending\n")
    assert not (tmp_path / target).exists()
    run_cli("--calibrate", tmp_path / "m.toml", "--device", "h100", "--save-cluster", tmp_path / "fit.TOML")
    run_cli("-g", "alexnet", "-p", 8, "--cluster", tmp_path / "fit.TOML", "-q")  # read back as TOML


@pytest.mark.parametrize("text, args, message", [
    ("gemm = [{m = 1, n = 1, k = 1}]\n", ("--device", "h100"), "needs seconds or tflops"),
    ("gemm = [{m = 1, n = 1, seconds = 1.0}]\n", ("--device", "h100"), "lacks k"),
    ("gemm = [{m = -1, n = 1, k = 1, seconds = 1.0}]\n", ("--device", "h100"),
     "gemm[0].m must be a whole number of 1 or more, got -1"),
    ("gemm = [{m = 8192.5, n = 1, k = 1, seconds = 1.0}]\n", ("--device", "h100"),
     "gemm[0].m must be a whole number of 1 or more, got 8192.5"),
    ("gemm = [{m = inf, n = 1, k = 1, seconds = 1.0}]\n", ("--device", "h100"),
     "gemm[0].m must be a whole number of 1 or more, got inf"),
    ("gemm = [{m = 64, n = 64, k = 64, seconds = -1.0}]\n", ("--device", "h100"), "must be a positive number"),
    ("gemm = [{m = 64, n = 64, k = 64, seconds = 1.0, colour = 3}]\n", ("--device", "h100"),
     "gemm[0] has an unknown key 'colour'; its keys are m, n, k, seconds, tflops"),
    ("attention = [{batch = 1, heads = 1, seq = 64, head_dim = 64, causal = true, mask = 1, seconds = 1.0}]\n",
     ("--device", "h100"), "attention[0] has an unknown key 'mask'; its keys are batch, heads, seq, head_dim, "
                           "causal, seconds, tflops"),
    ("speed = 1\n", ("--device", "h100"), "unknown key 'speed'"),
    ("gpus = 8\n", ("--device", "h100"), "has no measurements"),
    ("gemm = [{m = 1, n = 1, k = 1, seconds = 1.0}]\n", (), "give a real --device"),
    ("nccl = 'nothing here'\n", ("--device", "h100"), "no size lines"),
    ("step = {plan = 'missing.json', seconds = 1.0}\n", ("--device", "h100"), "step.plan"),
    ("gemm = [\n", ("--device", "h100"), "not valid TOML"),
    ("gemm = [{m = 64, n = 64, k = 64, seconds = 1e-30}]\n", ("--device", "h100"), "times the peak"),
    ("attention = [{batch = 1, heads = 1, seq = 64, head_dim = 64, causal = 'no', seconds = 1.0}]\n",
     ("--device", "h100"), "causal must be true or false"),
])
def test_bad_measurements(tmp_path, text, args, message):
    (tmp_path / "m.toml").write_text(text)
    proc = run_cli("--calibrate", tmp_path / "m.toml", *args, ok=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_save_cluster_needs_calibrate(tmp_path):
    proc = run_cli("--save-cluster", tmp_path / "x.toml", ok=False)
    assert proc.returncode == 2 and "--calibrate" in proc.stderr and not (tmp_path / "x.toml").exists()


@pytest.mark.parametrize("args, was", [(("--device", "h100", "--link-eff", "1", "--inter-bw", "400"),
                                        "inter_latency 5 -> "),
                                       (("--mem-bw", "2000", "--bw", "450", "--gpus-per-node", "8", "--inter-bw",
                                         "400"), "inter_latency 0 -> ")])  # no latency between nodes: --latency's
def test_across_nodes_the_network_is_fitted(tmp_path, args, was):
    """Told that the ranks spanned two nodes, the fit goes through the
    model's hierarchical all-reduce: inside the nodes as the cluster has it,
    the network's efficiency and latency fitted."""
    (tmp_path / "n.txt").write_text(NCCL.read_text())
    (tmp_path / "m.toml").write_text('nccl_file = "n.txt"\ngpus = 16\nnodes = 2\n')
    out = run_cli("--calibrate", tmp_path / "m.toml", *args, "--save-cluster", tmp_path / "f.toml").stdout
    assert was in out and "all_reduce_perf, 16 ranks on 2 nodes of 8" in out
    fit, cl = _fitted(tmp_path / "f.toml"), cluster_file(tmp_path / "f.toml")
    assert 0 < fit["net_eff"] < 1 and fit["inter_latency"] > 0
    # the latency between nodes over the model's own steps: 2 (q_out - 1) = 2, beside 2 (q_in - 1) = 14 inside
    assert "(all_reduce_perf's 2 from 8 B to 1 KiB), 2 steps each" in out
    assert rel(model_time(cl, "all_reduce", 8, 16), 21.40e-6) < 0.05
    for size, us in ((134217728, 737.1), (8589934592, 43120)):
        assert rel(model_time(cl, "all_reduce", size, 16), us * 1e-6) < 0.1
