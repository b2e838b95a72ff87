"""Sweeps, plots and breakdowns (studies/ and the command line's lists)."""

from __future__ import annotations

import functools
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from cli.args import parse_args
from planner import plan
from conftest import ROOT, modules_loaded_by_a_plain_run, not_progress, reference, rel, run_cli
from studies.breakdown import against, grouped, layers_frame
from studies.plot import plot

SCHEDULER = str(ROOT / "scheduler.py")


run = functools.partial(run_cli, ok=False, timeout=600)  # each test checks the status and messages itself


def test_a_sweep_equals_its_single_runs(tmp_path):
    out = tmp_path / "sweep.json"
    proc = run("-g", "alexnet,rnnlm", "-p", "4,8,16", "--bw", "16,100", "--jobs", 2, "--output", out)
    assert proc.returncode == 0 and not_progress(proc.stderr) == "", proc.stderr
    rows = json.loads(out.read_text())
    assert [(r["graph"], r["procs"], r["bw"]) for r in rows] == [
        (g, p, bw) for g in ("alexnet", "rnnlm") for p in (4, 8, 16) for bw in (16.0, 100.0)]
    for r in rows:
        single = plan(parse_args(["-g", r["graph"], "-p", str(r["procs"]), "--bw", str(r["bw"])]),
                      baselines=("data_parallel",)).result
        assert r["total_cost"] == single.total_cost  # exactly
        assert r["speedup"] == single.baseline("data_parallel").total_cost / single.total_cost
        assert r["step_seconds"] == single.step_seconds and r["largest_K"] == single.search.largest_K
        if r["bw"] == 16.0:
            assert rel(r["total_cost"], reference(r["graph"], r["procs"])["optimal_cost"]) <= 1e-9
    assert proc.stdout.startswith("PaSE sweep: 12 settings (2 -g x 3 -p x 2 --bw)")


def test_the_order_does_not_depend_on_the_workers(tmp_path):
    tables = []
    for jobs in (1, 2):
        path = tmp_path / f"s{jobs}.csv"
        assert run("-g", "rnnlm,alexnet", "-p", "16,4", "-b", "32,64", "--jobs", jobs, "--output", path).returncode == 0
        tables.append(pd.read_csv(path).drop(columns="search_seconds"))
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert list(tables[0]["graph"]) == ["rnnlm"] * 4 + ["alexnet"] * 4  # as given, the first list slowest
    assert list(tables[0]["procs"][:4]) == [16, 16, 4, 4] and list(tables[0]["batch"][:2]) == [32, 64]


def test_a_failing_setting_is_a_row(tmp_path):
    path = tmp_path / "s.md"
    proc = run("-g", "alexnet", "-p", "8,0,7", "--output", path)
    assert proc.returncode == 0, proc.stderr  # some setting gave a plan
    assert "-p must be an integer from 1 to 1,000,000, got 0" in proc.stdout
    table = path.read_text()
    assert table.count("\n") == 5 and "| error" in table.splitlines()[0]  # header, rule, 3 settings
    mine = tmp_path / "mine.csv"
    mine.write_text("keep me\n")
    none = run("-g", "alexnet", "-p", "0,-1", "--output", mine, "--plans", tmp_path / "none")
    assert none.returncode == 1 and "no setting of the sweep gave a plan" in none.stderr
    assert len(none.stderr.strip().splitlines()) == 1
    assert mine.read_text() == "keep me\n" and not (tmp_path / "none").exists()  # a failed sweep writes nothing
    first_fails = run("-p", "0,4", "--output", tmp_path / "e.csv")
    assert first_fails.returncode == 0
    assert (tmp_path / "e.csv").read_text().splitlines()[0].endswith(",error")  # the error column comes last


def test_a_swept_setting_a_whole_plan_refuses_is_refused_before_any_work(tmp_path):
    """Sweeping --zero or --recompute beside --plan (which sets them) is
    the one-line refusal the single values get, before any row runs and
    before any file is written; a swept setting --plan takes still sweeps."""
    mine = tmp_path / "mine.csv"
    mine.write_text("keep me\n")
    proc = run("-g", "transformer", "-p", 8, "--zero", "0,3", "--plan", "tp=8", "--output", mine)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("scheduler.py: error: --zero 0,3 and --plan tp=8 cannot be given together: the plan "
                           "string sets the ZeRO stages (write zero=STAGE in it)\n")
    assert mine.read_text() == "keep me\n"
    fixed = run("-g", "transformer", "-p", 8, "-b", "64,128", "--plan", "tp=8", "--zero", 3, "--output", mine)
    assert fixed.returncode == 2 and fixed.stdout == "" and fixed.stderr.startswith(
        "scheduler.py: error: --zero 3 and --plan tp=8 cannot be given together")
    assert mine.read_text() == "keep me\n"
    ok = run("-g", "transformer", "-p", 8, "-b", "64,128", "--plan", "tp=8", "-q")
    assert ok.returncode == 0 and "PaSE sweep: 2 settings" in ok.stdout


def test_plans_never_share_a_file(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d / "gpt2").mkdir(parents=True)
        (tmp_path / d / "gpt2" / "config.json").write_text((ROOT / "tests/data/configs/gpt2/config.json").read_text())
    proc = run("-g", "a/gpt2,b/gpt2", "-p", 4, "--bw", "16,16.0000001", "-b", 8, "--seq", 32, "-q",
               "--plans", "plans", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path / "plans")) == ["gpt2-bw16-2.json", "gpt2-bw16.0000001-2.json",
                                                       "gpt2-bw16.0000001.json", "gpt2-bw16.json"]
    (tmp_path / "plans2").mkdir()
    clash = run("-p", "4,8", "--plans", "plans2", "--output", "plans2/p4.json", cwd=tmp_path)
    assert clash.returncode == 2 and clash.stderr == (
        "scheduler.py: error: --output: plans2/p4.json is also where --plans writes the plan p4.json\n")
    assert os.listdir(tmp_path / "plans2") == []


@pytest.mark.parametrize("plans, message", [
    ("", "--plans: the directory name is empty"),
    ("dangling", "--plans: dangling is a link to "),
    ("file.txt", "--plans: file.txt is not a directory"),
    ("missing/plans", "--plans: directory "),
])
def test_bad_plans_directories_are_refused_before_any_work(tmp_path, plans, message):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    proc = run("-p", "4,8", "--plans", plans, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith(f"scheduler.py: error: {message}"), proc.stderr
    assert proc.stdout == ""


def test_plans_and_plots(tmp_path):
    proc = run("-g", "alexnet", "-p", "4,8", "--bw", "16,100", "--plans", tmp_path / "plans",
               "--plot", tmp_path / "speedup.png")
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path / "plans")) == ["p4-bw100.json", "p4-bw16.json", "p8-bw100.json",
                                                       "p8-bw16.json"]
    again = run("--evaluate", tmp_path / "plans" / "p8-bw100.json")
    assert again.returncode == 0 and "p = 8" in again.stdout
    assert (tmp_path / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_has_a_line_per_series(tmp_path):
    df = pd.DataFrame([{"graph": g, "procs": p, "bw": bw, "step_seconds": p * bw, "speedup": 1.0,
                        "total_cost": 1.0} for g in ("a", "b") for p in (4, 8, 16) for bw in (16, 100)])
    path = tmp_path / "t.svg"
    assert plot(df, str(path), "time", ["graph", "procs", "bw"], "-b 128") == 4  # 2 graphs x 2 bandwidths
    text = path.read_text()
    ET.fromstring(text)  # valid SVG
    shown = re.findall(r"<!-- (.*?) -->", text)  # matplotlib writes each text it draws as a comment
    assert [t for t in shown if ", bw " in t] == ["a, bw 16", "a, bw 100", "b, bw 16", "b, bw 100"]
    assert "devices p" in shown and "-b 128" in shown


def test_a_swept_auto_is_a_series_not_an_axis(tmp_path):
    # --pp 1,auto -p 4,8: the pipeline stages' "auto" cannot be placed on an axis, so -p is the x axis and each
    # value of --pp a line
    df = pd.DataFrame([{"pp": pp, "procs": p, "step_seconds": 1.0 / p, "speedup": 1.0, "total_cost": 1.0}
                       for pp in (1, "auto") for p in (4, 8)])
    path = tmp_path / "t.svg"
    assert plot(df, str(path), "time", ["pp", "procs"]) == 2
    shown = re.findall(r"<!-- (.*?) -->", path.read_text())
    assert "pp 1" in shown and "pp auto" in shown and "devices p" in shown


def test_breakdown_sums_are_the_report_totals():
    r = plan(parse_args(["-g", "resnet101", "-p", "8"]), baselines=("data_parallel",)).result
    df = layers_frame(r)
    for by in ("kind", "group"):
        g = grouped(df, by)
        assert g.loc["total", "compute"] == r.compute
        assert g.loc["total", "communication"] == r.operators_comm
        assert g.loc["total", "edges"] == r.edges_cost
        assert g.loc["total", "total"] == pytest.approx(r.total_cost, rel=1e-15)
        assert math.fsum(g.drop(index="total")["total"]) == pytest.approx(r.total_cost, rel=1e-12)
    assert set(grouped(df, "group").index) >= {"layer1", "layer2", "layer3", "layer4", "conv1", "fc"}
    diff = against(r, r.baseline("data_parallel"))
    assert len(diff) == 10 and diff["difference"].abs().is_monotonic_decreasing
    out = run("-g", "resnet101", "-p", 8, "--breakdown", "--compare", "-q").stdout
    assert "Where the cost goes" in out and "Layers where the plan and data parallel differ most" in out


def test_a_pipelines_breakdown_and_sweep_columns_are_per_step():
    """A pipeline's layers are costed per micro-batch: the breakdown counts
    each for all the micro-batches (so that --compare sets it beside data
    parallel's per step), and a sweep's compute and communication are the
    step's on its critical path, as the report's step line gives them."""
    from report import step_parts
    from studies.sweep import row

    r = plan(parse_args(["-g", "transformer", "-p", "8", "--pp", "2"]), baselines=("data_parallel",)).result
    m = r.pipeline.m
    assert r.pipeline.pp == 2 and m == 32
    df = layers_frame(r)
    g = grouped(df, "kind")
    assert g.loc["total", "compute"] == pytest.approx(m * r.compute, rel=1e-12)
    assert g.loc["total", "total"] == pytest.approx(m * (r.compute + r.operators_comm + r.edges_cost), rel=1e-12)
    dp = layers_frame(r.baseline("data_parallel")).set_index("name")
    ffn = df.set_index("name").loc["enc0/ffn/in"]  # half the devices, every sample: more per step than data parallel
    assert ffn["compute"] == pytest.approx(2 * dp.loc["enc0/ffn/in", "compute"], rel=0.05)
    parts = dict(step_parts(r))
    out = row(r, {"pp": 2})
    assert out["compute"] == parts["compute"] and out["communication"] == parts["exposed communication"]
    assert out["compute"] < r.step_seconds / r.cost_model.cluster.seconds(1.0)  # the critical path's, within the step


@pytest.mark.parametrize("args, message", [
    (["-p", "8,,16"], "'8,,16' has an empty item"),
    (["-p", "8,x"], "'x' is not an integer"),
    (["-p", "8,16,8"], "'8' appears twice in '8,16,8'"),
    (["--bw", "16,1e99"], "must be a number above 0 and at most 1,000,000,000,000, got '1e99'"),
    (["-p", ",".join(map(str, range(1, 41))), "-b", ",".join(map(str, range(1, 41)))],
     "the lists make 1,600 combinations; a sweep runs at most 1,000"),
    (["-p", "4,8", "--output", "s.txt"], "a sweep's table is written as .csv, .json or .md"),
    (["-p", "4,8", "--evaluate", "x.json"], "--evaluate runs one setting; it cannot be used with a sweep"),
    (["-g", "alexnet,rnnlm", "--plot", "x.png"], "--plot: a plot needs a swept numeric setting"),
    (["-p", "4", "--pp", "1,auto", "--plot", "x.png"], "--pp takes values that are not numbers"),
])
def test_bad_lists(tmp_path, args, message):
    proc = run(*args, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


def test_a_plain_run_imports_neither_pandas_nor_matplotlib():
    assert modules_loaded_by_a_plain_run("pandas", "matplotlib", "tabulate") == [False, False, False]


def test_an_interrupted_sweep_keeps_its_rows(tmp_path):
    path = tmp_path / "rows.csv"
    proc = subprocess.Popen([sys.executable, SCHEDULER, "-g", "transformer", "-p", "4,8,16,32,64,128,256,512,1024",
                             "--jobs", "1", "--output", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the table is rewritten after each row: the first one is done
    assert path.exists() and proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and err == "scheduler.py: interrupted\n", err
    rows = pd.read_csv(path)
    assert 1 <= len(rows) < 9 and list(rows["procs"]) == [4, 8, 16, 32, 64, 128, 256, 512, 1024][: len(rows)]
    assert "PaSE sweep: 9 settings" in out


def test_a_quiet_sweep_shows_no_progress(tmp_path):
    """-q shows no progress line, for a sweep as for one plan; without it a
    sweep long enough says how long it took (stderr is not a terminal)."""
    from cli.progress import LINE

    args = ("-g", "transformer", "-p", "256,512,1024", "--output", str(tmp_path / "t.csv"))
    loud = run_cli(*args, cwd=tmp_path)
    assert [line for line in loud.stderr.splitlines() if LINE.match(line)], loud.stderr
    quiet = run_cli(*args, "-q", cwd=tmp_path)
    assert quiet.stderr == "", quiet.stderr
