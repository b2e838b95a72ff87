"""scheduler.py, driven as users drive it: in a subprocess."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import GRAPH_NAMES, ROOT, reference, rel, run_cli

SCHEDULER = str(ROOT / "scheduler.py")


run = run_cli


def total_of(stdout: str) -> float:
    last = stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith("Total cost: ")
    value = last.removeprefix("Total cost: ")
    assert value.split(".")[1].isdigit() and len(value.split(".")[1]) == 2
    return float(value)


def test_default_run():
    out = run().stdout
    assert out.startswith("PaSE strategy: alexnet, batch 128, p = 32\n")
    assert total_of(out) == reference("alexnet", 32)["optimal_cost"]
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split() == ["id", "name", "kind", "dims", "config", "cost", "memory"]
    assert [row.split()[0] for row in table[1:]] == [str(i) for i in range(14)]
    assert "conv1" in table[1] and "bchwrsn" in table[1]
    assert all(len(line) <= 80 for line in out.splitlines()), "AlexNet must fit 80 columns"


@pytest.mark.parametrize("graph", GRAPH_NAMES)
def test_each_graph_matches_reference(graph):
    p = 8
    out = run("-g", graph, "-p", p).stdout
    assert rel(total_of(out), reference(graph, p)["optimal_cost"]) <= 1e-9
    rows = out.split("\n\n")[1].splitlines()[1:]
    assert len(rows) == reference(graph, p)["n_nodes"]  # one row per operator
    for row in rows:
        config = next(cell for cell in row.split() if cell.startswith("("))
        assert 1 <= math.prod(json.loads("[" + config[1:-1] + "]")) <= p


def test_search_statistics_in_the_report_and_the_record(tmp_path):
    plan = tmp_path / "plan.json"
    out = run("-g", "transformer", "-p", 64, "--output", plan).stdout
    st = json.loads(plan.read_text())["search"]
    assert (st["order"], st["largest_K"], st["largest_dependent_set"], st["pruned"]) == ("GENERATESEQ", 566, 3, True)
    assert st["largest_K_pruned"] < 566 and st["configurations_kept"] < st["configurations"]
    assert st["work"] < st["work_unpruned"] and st["kernel"] in ("numpy", "fused")
    assert (f"  largest K 566, {st['largest_K_pruned']} after pruning ({st['configurations_kept']:,} of "
            f"{st['configurations']:,} configurations kept)") in out
    assert f"largest dependent set 3, largest table {st['largest_table']:,} entries, {st['work']:,} entries" in out
    small = run("-p", 8).stdout  # AlexNet: nothing worth pruning
    assert "  largest K 28 (not pruned: a small search)" in small


def test_output_json_round_trips_through_evaluate(tmp_path):
    plan = tmp_path / "plan.json"
    out = run("-g", "transformer", "-p", 8, "--output", plan).stdout
    data = json.loads(plan.read_text())
    for key in ("graph", "procs", "batch", "flops", "bw", "algo", "total_cost", "search_seconds", "layers"):
        assert key in data
    assert (data["graph"], data["procs"], data["batch"], data["algo"]) == ("transformer", 8, 128, 0)
    assert [layer["id"] for layer in data["layers"]] == list(range(204))
    assert set(data["layers"][0]) >= {"id", "name", "op", "dims", "space", "config", "cost"}
    assert rel(data["total_cost"], reference("transformer", 8)["optimal_cost"]) <= 1e-9
    ev = run("--evaluate", plan).stdout
    assert "evaluation of a given strategy: transformer" in ev
    assert total_of(ev) == total_of(out)
    # a file with only ids and configs, in another order, evaluates the same
    slim = tmp_path / "slim.json"
    slim.write_text(json.dumps({"layers": [{"id": l["id"], "config": l["config"]} for l in data["layers"][::-1]]}))
    assert total_of(run("--evaluate", slim, "-g", "transformer", "-p", 8).stdout) == total_of(out)


def test_output_csv_rows_equal_the_json_layers(tmp_path):
    run("-g", "rnnlm", "-p", 4, "--output", tmp_path / "plan.csv")
    run("-g", "rnnlm", "-p", 4, "--output", tmp_path / "plan.json")
    rows = list(csv.DictReader((tmp_path / "plan.csv").open()))
    layers = json.loads((tmp_path / "plan.json").read_text())["layers"]
    assert [r["name"] for r in rows] == ["embed", "lstm", "logits", "softmax"]
    assert json.loads(rows[1]["space"]) == [2, 256, 128, 2048, 2048]
    for r, layer in zip(rows, layers):
        assert json.loads(r["config"]) == layer["config"] and int(r["devices"]) == layer["devices"]
        assert float(r["cost"]) == layer["cost"] and float(r["compute"]) == layer["compute"]


def test_dump_graph_writes_dot_pydot_parses(tmp_path):
    import pydot

    out = run("-g", "inception3", "-p", 4, "-d", cwd=tmp_path).stdout
    path = tmp_path / "graph.dot"
    assert f"to {path}" in out
    (dot,) = pydot.graph_from_dot_file(str(path))
    nodes = [n for n in dot.get_nodes() if n.get_name() not in ("node", "edge", "graph")]
    assert len(nodes) == 219 and len(dot.get_edges()) == 253
    assert "mixed_5b/concat" in path.read_text()


def test_profile_prints_top_entries():
    out = run("-g", "resnet101", "-p", 8, "--profile").stdout
    assert "Profile of the search (top 15 by cumulative time)" in out
    assert "Ordered by: cumulative time" in out and "dp_search.py" in out
    assert total_of(out) > 0


def test_measure_prints_mean_min_max():
    out = run("-g", "alexnet", "-p", 8, "--measure").stdout
    line = next(l for l in out.splitlines() if l.startswith("Timed 5 searches (after 2 warm-up)"))
    scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
    mean, lo, hi = (float(line.split(k)[1].split()[0]) * scale[line.split(k)[1].split()[1].rstrip(",")]
                    for k in ("mean ", "min ", "max "))
    assert 0 < lo <= mean <= hi < 5  # really timed, and an AlexNet search is quick
    assert out.rstrip().splitlines()[-1].startswith("Total cost: ")


def test_help_explains_every_flag():
    out = " ".join(run("--help").stdout.split("options:")[1].split())  # one line, whatever the width
    for flag, text in [("-p PROCS, --procs PROCS", "number of devices (default: 32)"),
                       ("-b BATCH, --batch BATCH", "global mini-batch size (default: 128)"),
                       ("-m WIDTH, --model WIDTH", "model width of rnnlm (hidden units, default 2048)"),
                       ("-g NAME, --graph NAME", "(default: alexnet)"),
                       ("--flops FLOPS", "peak TFLOPS per device (default: 10.0, or the --device's)"),
                       ("--bw BW", "bandwidth in GB/s, inside a node (default: 16.0, or the --device's)"),
                       ("--gpus-per-node G", "numbered node-major"), ("--inter-bw GB/s", "between nodes"),
                       ("--latency US", "microseconds per collective step"), ("--device NAME", "a100-80gb"),
                       ("--precision P", "bf16"), ("--cluster FILE", "JSON or TOML"),
                       ("--algo {0,1}", "0 GENERATESEQ, 1 breadth-first (default: 0)"),
                       ("--profile", "cProfile"), ("--measure", "5 searches after 2 warm-up"),
                       ("-d, --dump-graph", "./graph.dot"), ("--output PATH", ".json"),
                       ("--evaluate PATH", "instead of searching"), ("--mem-limit GB", "(default: half"),
                       ("--compare", "Parallax"), ("--sparse-embeddings", "row lookups"),
                       ("--distinct-rows U", "(default: one per token)"),
                       ("--seq SEQ", "sequence length"), ("--vocab VOCAB", "vocabulary size"),
                       ("--layers LAYERS", "(encoder and decoder layers each, default 6)")]:
        assert text in out.split(flag, 1)[1][:120], flag


def test_mem_limit_refuses_before_searching():
    proc = run("-g", "transformer", "-p", 16, "--mem-limit", "0.001", ok=False)
    assert proc.returncode == 1 and "limit is 1 MB" in proc.stderr


# A small launcher runs scheduler.py and reports the child's own peak RSS: a
# child forked straight from pytest would inherit pytest's.
_LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = proc.stderr.read()
_, status, usage = os.wait4(proc.pid, 0)
sys.stderr.write(err.decode())
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""
MEMORY_OVERHEAD = 100e6  # the README's: the interpreter, numpy and networkx beyond --mem-limit


def run_measured(*args):
    """(exit status, peak RSS in bytes, stderr) of one scheduler.py process."""
    proc = subprocess.run([sys.executable, "-c", _LAUNCHER, sys.executable, SCHEDULER, *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    code, maxrss_kb = proc.stdout.split()
    return int(code), int(maxrss_kb) * 1024, proc.stderr


@pytest.mark.parametrize("limit, fits", [(0.2, False), (0.56, True)])
def test_peak_memory_stays_within_the_limit(limit, fits):
    code, rss, err = run_measured("-g", "transformer", "-p", 256, "--mem-limit", limit)
    if fits:
        assert code == 0, err
    else:
        from report import fmt_bytes

        assert code == 1 and f"but the limit is {fmt_bytes(limit * 1e9)}" in err and len(err.splitlines()) == 1, err
    assert rss <= limit * 1e9 + MEMORY_OVERHEAD


def test_cost_arrays_too_large_are_refused_at_once():
    code, rss, err = run_measured("-g", "transformer", "-p", 10**6, "--mem-limit", 2)
    assert code == 1 and "the cost arrays over 1,000,000 devices need " in err and len(err.splitlines()) == 1, err
    assert rss <= MEMORY_OVERHEAD  # nothing was built


def test_breadth_first_on_one_device():
    """Every operator has one configuration: no table, whatever the frontier."""
    out = run("--algo", "1", "-g", "transformer", "-p", 1).stdout
    assert total_of(out) == total_of(run("-g", "transformer", "-p", 1).stdout)
    assert "largest K 1" in out and "largest dependent set 0" in out


BAD = [
    (["-p", "0"], "p must be an integer from 1 to 1,000,000"),
    (["-p", "-4"], "p must be an integer from 1 to 1,000,000"),
    (["-p", "four"], "'four' is not an integer"),
    (["-b", "0"], "-b must be an integer from 1 to 1,000,000,000, got 0"),
    (["-g", "rnnlm", "--seq", "0"], "--seq must be an integer from 1 to 1,000,000,000, got 0"),
    (["-g", "alexnet", "--layers", "3"], "--layers is not a parameter of alexnet (it takes batch)"),
    (["-g", "transformer", "--layers", "1000000000"], "--layers must be an integer from 1 to 1,000, got 1000000000"),
    (["--flops", "0"], "must be a number above 0 and at most 1,000,000,000,000, got '0'"),
    (["--bw", "-16"], "must be a number above 0 and at most 1,000,000,000,000, got '-16'"),
    (["--bw", "nan"], "must be a number above 0 and at most 1,000,000,000,000, got 'nan'"),
    (["-g", "vgg16"], "-g must be one of alexnet, resnet101, inception3, rnnlm, transformer, got 'vgg16'"),
    (["-g", "transformer", "-m", "100"], "not a multiple of the head width 64"),
    (["-g", "alexnet", "-m", "512"], "-m is not a parameter of alexnet (it takes batch)"),
    (["--algo", "2"], "invalid choice: 2"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["-g", "inception3", "-p", "8", "--algo", "1"],
     "operator 203 (mixed_7c/branch3x3dbl_1) has 9 dependent operators"),
    (["--output", "plan.txt"], "--output: 'plan.txt' must end in .json or .csv"),
    (["--output", "nowhere/plan.json"], "--output: directory nowhere does not exist"),
    (["--output", "/proc/plan.json"], "--output: cannot write in /proc"),
    (["--evaluate", "missing.json"], "--evaluate: missing.json: no such file"),
    (["--evaluate", "plan.json", "--measure"], "cannot be used with --evaluate"),
    (["-g", "rnnlm", "--distinct-rows", "0"], "--distinct-rows must be an integer >= 1"),
    (["--mem-limit", "0"], "must be a number above 0 and at most 1,000,000,000,000, got '0'"),
    (["--mem-limit", "1e300"], "must be a number above 0 and at most 1,000,000,000,000, got '1e300'"),
    (["--flops", "1e12", "--bw", "1e-6"], "make one word cost 8e+21 FLOP; the model needs 1e-9 to 1e15"),
    # the realistic model's rates, each named by the flags that make it (not numpy's warnings, then a total of inf)
    (["--device", "h100", "--power", "1e-300"], "error: --matmul-eff and --power make one FLOP of a matrix product "
                                                 "cost 1.33e+300 FLOP at the peak; the model needs 1e-9 to 1e15"),
    (["--device", "h100", "--attention-eff", "1e-300"], "error: --attention-eff and --power make one FLOP of fused "
                                                         "attention cost 1e+300 FLOP"),
    (["--device", "h100", "--mem-bw", "1e-300"], "error: --flops, --mem-bw and --memory-eff make one byte of memory "
                                                  "traffic cost 1.24e+306 FLOP"),
    (["--device", "h100", "--fp8-flops", "1e-300"], "error: --fp8-flops, --matmul-eff and --power make one FP8 FLOP"),
    (["--device", "h100", "--allreduce-eff", "1e-300"], "error: --flops, --bw and --allreduce-eff make one word of "
                                                         "an all-reduce cost 4.4e+303 FLOP"),
    (["--device", "h100", "--link-eff", "1e-300"], "error: --flops, --bw and --link-eff (989.5 TFLOPS, 450 GB/s) "
                                                    "make one word cost 4.4e+303 FLOP"),
    (["-b", str(2**62)], "-b must be an integer from 1 to 1,000,000,000"),
    (["-p", str(10**18)], "p must be an integer from 1 to 1,000,000"),
    (["--evaluate", ""], "--evaluate: : no such file"),
    (["--output", ""], "--output: '' must end in .json or .csv"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_one_line_no_traceback(tmp_path, args, message):
    proc = run(*args, cwd=tmp_path, ok=False)
    # 2: the input is wrong; 1: the run cannot be done (a table that would not fit)
    assert proc.returncode == (1 if "dependent operators" in message else 2)
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr
    assert proc.stderr.startswith("scheduler.py: ")


def test_output_that_is_a_directory_is_left_alone(tmp_path):
    (tmp_path / "out.json").mkdir()
    proc = run("--output", "out.json", cwd=tmp_path, ok=False)
    assert proc.returncode == 2 and "--output: out.json is a directory" in proc.stderr
    assert (tmp_path / "out.json").is_dir()


def good_plan(tmp_path, graph="alexnet", p=4):
    path = tmp_path / "good.json"
    run("-g", graph, "-p", p, "--output", path)
    return json.loads(path.read_text())


def bad_plan(tmp_path, mutate, name="bad.json"):
    data = good_plan(tmp_path)
    mutate(data)
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["layers"].pop(5), "1 of the 14 operators of alexnet have no configuration (5)"),
        (lambda d: d["layers"].append(dict(d["layers"][0])), "layer 0 appears twice"),
        (lambda d: d["layers"][2].update(id=99), "layer id 99 is not a node of alexnet (0..13)"),
        (lambda d: d["layers"][2].update(id="2"), "layers[2] has id '2', not an integer"),
        (lambda d: d["layers"][3].update(config=[1, 1]), "node 3 (pool2): configuration (1, 1) has 2 entries"),
        (lambda d: d["layers"][4].update(config=[3, 1, 1, 1, 1, 1, 1]), "does not divide its space"),
        (lambda d: d["layers"][13].update(config=[2, 0]), "must hold integers >= 1"),
        (lambda d: d["layers"][13].update(config="2,2"), "not a list of integers"),
        (lambda d: d["layers"][0].update(config=[8, 1, 1, 1, 1, 1, 1]), "uses 8 devices but p is 4"),
        (lambda d: d["layers"][6].pop("config"), "layers[6] needs an \"id\" and a \"config\""),
        (lambda d: d.pop("layers"), "has no \"layers\" list"),
        (lambda d: d.update(graph="resnet101"), "231 of the 245 operators of resnet101 have no configuration (14, 15,"),
        (lambda d: d.update(graph="lenet"), "unknown graph 'lenet'"),
    ],
)
def test_bad_strategy_files(tmp_path, mutate, message):
    path = bad_plan(tmp_path, mutate)
    before = path.read_bytes()
    out = tmp_path / "result.json"
    out.write_text("keep me")
    proc = run("--evaluate", path, "--output", out, ok=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr
    assert path.read_bytes() == before and out.read_text() == "keep me"


def test_malformed_strategy_files(tmp_path):
    for text, message in [("{not json", "is not valid JSON (line 1 column 2"), ("[1, 2]", "no \"layers\" list"),
                          (b"\xff\xfe\x00", "is not a text file")]:
        path = tmp_path / "broken.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        proc = run("--evaluate", path, ok=False)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
        assert message in proc.stderr and "Traceback" not in proc.stderr


def test_evaluate_a_directory(tmp_path):
    proc = run("--evaluate", tmp_path, ok=False)
    assert proc.returncode == 2 and "is a directory" in proc.stderr


def test_output_replaces_an_existing_file_whole(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("x" * 100000)
    run("-g", "alexnet", "-p", 4, "--output", path)
    assert json.loads(path.read_text())["procs"] == 4
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary left behind


def test_evaluate_uses_the_files_settings_unless_flags_override(tmp_path):
    plan = tmp_path / "plan.json"
    run("-g", "resnet101", "-p", 16, "--output", plan)
    out = run("--evaluate", plan).stdout
    assert "resnet101, batch 128, p = 16" in out
    out2 = run("--evaluate", plan, "--bw", "32").stdout
    assert total_of(out2) < total_of(out)  # faster network, cheaper communication


def test_import_is_light():
    code = "import sys; sys.argv=['x','--help']; import scheduler; print('numpy' in sys.modules, 'networkx' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.split() == ["False", "False"]


def test_a_closed_pipe_is_not_an_error():
    proc = subprocess.Popen([sys.executable, SCHEDULER, "-g", "resnet101", "-p", "4"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader goes away before the report is written
    _, err = proc.communicate(timeout=300)
    assert b"Traceback" not in err and err == b""


def test_deeply_nested_strategy_file(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100000 + "]" * 100000)
    proc = run("--evaluate", path, ok=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "is nested too deeply" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_failed_run_writes_no_graph_dot(tmp_path):
    (tmp_path / "graph.dot").write_text("mine")
    for args in (["-d", "--mem-limit", "0.000001"], ["-d", "-g", "inception3", "-p", "4", "--algo", "1"],
                 ["-d", "--evaluate", "missing.json"]):
        proc = run(*args, cwd=tmp_path, ok=False)
        assert proc.returncode in (1, 2) and "Wrote the graph" not in proc.stdout
        assert (tmp_path / "graph.dot").read_text() == "mine"


def test_output_keeps_permissions_and_symbolic_links(tmp_path):
    private = tmp_path / "private.json"
    private.write_text("{}")
    private.chmod(0o600)
    run("-p", 4, "--output", private)
    assert private.stat().st_mode & 0o777 == 0o600 and json.loads(private.read_text())["procs"] == 4
    target = tmp_path / "target.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    run("-p", 4, "--output", link)
    assert link.is_symlink() and json.loads(target.read_text())["procs"] == 4


def test_output_through_a_link_to_a_special_file(tmp_path):
    import stat

    sink = tmp_path / "sink.json"
    sink.symlink_to("/dev/null")
    run("-p", 4, "--output", sink)  # written in place: /dev/null stays a device
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and sink.is_symlink()


def test_merged_tables_are_counted_as_they_are_kept(tmp_path):
    """The Transformer at p = 1024: its tables are estimated at 1.34 GB
    before any is computed, but kept merged they take less; under a limit
    of 0.8 GB the search runs, checking each step before it runs, and finds
    the same optimum within the limit.  Under 0.5 GB it stops when a step
    could pass the limit.  (numba loads for these searches: the process
    then ends without the interpreter's teardown, its report and plan file
    whole.)"""
    want = total_of(run("-g", "transformer", "-p", 1024, "-q").stdout)
    code, rss, err = run_measured("-g", "transformer", "-p", 1024, "--mem-limit", 0.8, "-q")
    assert code == 0 and err == "", err
    assert rss <= 0.8e9 + MEMORY_OVERHEAD
    plan = tmp_path / "plan.json"
    proc = run("-g", "transformer", "-p", 1024, "-q", "--mem-limit", 0.8, "--output", plan)
    assert total_of(proc.stdout) == want
    record = json.loads(plan.read_text())
    assert record["search"]["work_computed"] < record["search"]["work"] / 2 and len(record["layers"]) == 204
    code, rss, err = run_measured("-g", "transformer", "-p", 1024, "--mem-limit", 0.5, "-q")
    assert code == 1 and len(err.splitlines()) == 1, err
    assert "the search needs more than the limit of 500 MB: after " in err and "may need" in err
    assert rss <= 0.5e9 + MEMORY_OVERHEAD


def test_a_million_devices_are_refused_at_once_below_the_cost_arrays():
    """At p = 1,000,000 the cost arrays need 10.9 GB at their peak: under
    that the refusal comes before anything is built (above it, the search's
    merged tables fit: benchmarks/large_models.py)."""
    code, rss, err = run_measured("-g", "transformer", "-p", 10**6, "--mem-limit", 10)
    assert code == 1 and "the cost arrays over 1,000,000 devices need 10.9 GB but the limit is 10 GB" in err, err
    assert rss <= MEMORY_OVERHEAD
