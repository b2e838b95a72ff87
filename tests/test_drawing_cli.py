"""``--draw FILE`` on the command line: each format written by its suffix,
from a search, from a plan file and from ``--search standard --compare``;
bad paths refused in one line before any work, nothing written; and
matplotlib imported only to draw."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_cli
from test_drawing import overlapping

LLAMA = str(ROOT / "tests/data/configs/llama3-8b")
GPT2 = str(ROOT / "tests/data/configs/gpt2")
MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "svg": b"<?xml", "pdf": b"%PDF-"}


@pytest.mark.parametrize("name", ["plan.png", "plan.svg", "plan.PDF"])
def test_each_format_is_written_by_its_suffix(tmp_path, name):
    out = run_cli("-g", "alexnet", "-p", 4, "-q", "--draw", name, cwd=tmp_path).stdout
    assert out.splitlines()[0] == f"Drew the plan (no stages) to {name}"
    data = (tmp_path / name).read_bytes()
    fmt = name.rsplit(".", 1)[1].lower()
    assert data.startswith(MAGIC[fmt])
    if fmt == "svg":
        assert b"<svg" in data[:400]
    assert sorted(os.listdir(tmp_path)) == [name]  # no temporary file left


def test_a_plan_file_is_drawn_as_the_search_drew_it(tmp_path):
    from drawing import figure
    from planner import plan
    from settings import Settings

    run_cli("-g", LLAMA, "--device", "h100", "--pp", 2, "-q", "--output", "plan.json", "--draw", "searched.svg",
            cwd=tmp_path)
    out = run_cli("--evaluate", "plan.json", "--draw", "plan.svg", "-q", cwd=tmp_path).stdout
    assert "Drew the plan (2 stages, 1f1b, 32 micro-batches) to plan.svg" in out
    assert (tmp_path / "plan.svg").read_bytes().startswith(MAGIC["svg"])
    searched = figure(plan(Settings(graph=LLAMA, device="h100", pp=2)))
    read = figure(plan(Settings(evaluate=str(tmp_path / "plan.json"))))
    assert read.timelines[0].lanes == searched.timelines[0].lanes  # the same schedule, box for box
    assert [b.parts for b in read.memory] == [b.parts for b in searched.memory] and read.splits == searched.splits
    assert "plan read from" in read.title and "PaSE plan" in searched.title


def test_a_standard_configuration_is_drawn_beside_the_per_operator_optimum(tmp_path):
    from drawing import figure
    from planner import plan
    from settings import Settings

    p = plan(Settings(graph=GPT2, device="h100", procs=16, search="standard", compare=True))
    fig = figure(p)
    optimum = p.result.baseline("per_operator")
    assert [tl.name for tl in fig.timelines] == [p.result.label, "per-operator optimum"]
    assert fig.timelines[1].step == optimum.step_seconds
    assert [b.label for b in fig.times][0] == "standard" and fig.times[-1].label == "per-operator"
    assert {b.group for b in fig.memory} >= {"standard", "per-operator", "baselines"}
    assert [sorted(v for row in sp.rows for v in row.ids) for sp in fig.splits] == [  # both plans' splits
        list(range(len(p.result.layers))), list(range(len(optimum.layers)))]
    assert [row.options for row in fig.splits[0].rows if row.options][0] == (("zero", 3),)
    assert overlapping(fig) == []
    out = run_cli("-g", GPT2, "--device", "h100", "-p", 16, "--search", "standard", "--compare", "-q", "--draw",
                  "std.png", cwd=tmp_path).stdout
    assert out.startswith("Drew the plan (no stages) to std.png")
    assert (tmp_path / "std.png").read_bytes().startswith(MAGIC["png"])


def _refused(tmp_path, *args, message):
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    proc = run_cli(*args, cwd=tmp_path, ok=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("scheduler.py: error: ") and message in proc.stderr, proc.stderr
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing written or changed
    assert proc.stdout == ""


@pytest.mark.parametrize("args, message", [
    (("--draw", "plan.jpg"), "--draw: 'plan.jpg' must end in .png, .svg or .pdf"),
    (("--draw", "plan"), "--draw: 'plan' must end in .png, .svg or .pdf"),
    (("--draw", ""), "--draw: '' must end in .png, .svg or .pdf"),
    (("--draw", "nowhere/plan.png"), "--draw: directory nowhere does not exist"),
    (("--draw", "/proc/plan.png"), "--draw: cannot write in /proc"),
    (("-p", "4,8", "--draw", "plan.png"), "--draw draws the plan of one run; it cannot be used with a sweep"),
    (("--draw", "plan.png", "--output", "plan.png"), "--draw: plan.png is also where --output writes"),
    (("--draw", "plan.png", "--export", "torchtitan:plan.png"), "--draw: plan.png is also where --export torchtitan writes"),
], ids=["suffix", "no suffix", "empty", "no directory", "unwritable", "sweep", "output", "export"])
def test_bad_paths_are_refused_before_any_work(tmp_path, args, message):
    _refused(tmp_path, "-g", "alexnet", "-p", 4, *args, message=message)


def test_a_directory_is_left_alone(tmp_path):
    (tmp_path / "plan.png").mkdir()
    _refused(tmp_path, "--draw", "plan.png", message="--draw: plan.png is a directory")


@pytest.mark.parametrize("flag, what", [("--evaluate", "the plan file --evaluate reads"),
                                        ("--cluster", "the cluster file --cluster reads")])
def test_a_file_the_run_reads_is_never_drawn_over(tmp_path, flag, what):
    (tmp_path / "input.svg").write_text('{"flops": 10}')
    _refused(tmp_path, flag, "input.svg", "--draw", "input.svg", message=f"--draw: input.svg is {what}")


def test_a_link_to_an_input_is_the_input(tmp_path):
    (tmp_path / "cluster.json").write_text('{"flops": 10}')
    os.symlink("cluster.json", tmp_path / "cluster.png")
    _refused(tmp_path, "--cluster", "cluster.json", "--draw", "cluster.png",
             message="--draw: cluster.png is the cluster file --cluster reads")


def test_calibrate_draws_nothing(tmp_path):
    (tmp_path / "m.toml").write_text("")
    _refused(tmp_path, "--calibrate", "m.toml", "--draw", "fit.png", message="--calibrate fits the cluster")


def test_matplotlib_is_imported_only_to_draw(tmp_path):
    code = ("import sys; sys.argv = ['scheduler.py', '-g', 'alexnet', '-p', '4', '-q'] + sys.argv[1:]; "
            "import scheduler, cli.runner as r; r.main(sys.argv[1:]); "
            "print('matplotlib' in sys.modules, 'drawing' in sys.modules, file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    drawn = subprocess.run([sys.executable, "-c", code, "--draw", "p.png"], capture_output=True, text=True,
                           cwd=tmp_path, env=env)
    assert plain.stderr.split() == ["False", "False"], plain.stderr
    assert drawn.stderr.split() == ["True", "True"], drawn.stderr
    assert (tmp_path / "p.png").exists()
