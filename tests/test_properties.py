"""Property-based tests of the command line and of strategy files (Hypothesis):
whatever the arguments or the file, the tool ends in a report, or in one
line on stderr and a non-zero exit, never a traceback, and a failed run
leaves every existing file as it was.  In-process, for speed; bounded so that
the whole suite stays short."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cli
from conftest import GRAPH_NAMES, not_progress

KEEP = "keep me\n"


def run_main(argv, cwd):
    """(status, stdout, stderr) of ``cli.main(argv)`` run in ``cwd``."""
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main(argv)
            except SystemExit as e:  # argparse's own exits
                status = e.code
    finally:
        os.chdir(old)
    return status, out.getvalue(), err.getvalue()


def check(status, out, err, files):
    """A report, or one line on stderr and a non-zero status; on failure
    every file as it was."""
    assert "Traceback" not in err and "Traceback" not in out
    if status == 0:
        assert not_progress(err) == "" and out.rstrip("\n").splitlines()[-1].startswith("Total cost: "), (out, err)
        return
    assert status in (1, 2), (status, err)
    err = not_progress(err)  # the progress of steps finished before the error may precede it
    assert len(err.strip().splitlines()) == 1 and err.startswith("scheduler.py: "), err
    for path, before in files.items():
        assert path.read_text() == before, path


# -- command lines ----------------------------------------------------------------------------

junk = st.sampled_from(["", "-", "x", "1e400", "nan", "-inf", "0", "-1", "١٢", "8_0", "0x10", " 8", "9" * 40])
ints = st.one_of(st.integers(-3, 70).map(str), junk)
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.floats(0.01, 1e4).map(str), junk)
VALUE_FLAGS = {
    "-p": st.one_of(st.sampled_from(["1", "2", "3", "4", "7", "8", "16"]), ints),
    "-b": st.one_of(st.sampled_from(["1", "3", "16", "128"]), ints),
    "-g": st.one_of(st.sampled_from(GRAPH_NAMES), junk, st.text(max_size=8)),
    "-m": st.one_of(st.sampled_from(["64", "100", "512"]), ints),
    "--seq": ints, "--vocab": ints, "--layers": st.one_of(st.sampled_from(["1", "2"]), ints),
    "--flops": floats, "--bw": floats, "--inter-bw": floats, "--latency": floats, "--device-memory": floats,
    "--gpus-per-node": ints, "--mem-limit": floats, "--distinct-rows": ints,
    "--device": st.one_of(st.sampled_from(["v100", "a100-80gb", "h100", "paper"]), junk),
    "--precision": st.one_of(st.sampled_from(["fp64", "fp32", "bf16", "fp16"]), junk),
    "--optimizer": st.one_of(st.sampled_from(["sgd", "momentum", "adam"]), junk),
    "--algo": st.sampled_from(["0", "1", "2", "x"]),
    "--output": st.sampled_from(["out.json", "out.csv", "out.txt", "sub", "missing/out.json", ""]),
    "--evaluate": st.sampled_from(["plan.json", "garbage.json", "missing.json", "sub", "out.json"]),
    "--cluster": st.sampled_from(["cluster.toml", "garbage.json", "missing.toml"]),
}
SWITCHES = ["--compare", "-q", "--sparse-embeddings", "-d", "--measure", "--frobnicate"]
argvs = st.lists(st.one_of(st.tuples(st.sampled_from(sorted(VALUE_FLAGS)), st.none()), st.sampled_from(SWITCHES)),
                 max_size=6).flatmap(
    lambda items: st.tuples(*[VALUE_FLAGS[i[0]].map(lambda v, f=i[0]: [f, v]) if isinstance(i, tuple)
                              else st.just([i]) for i in items]))


@contextlib.contextmanager
def workspace():
    """A directory with the files the arguments may name."""
    with tempfile.TemporaryDirectory(prefix="pase-prop-") as name:
        yield _fill(Path(name))


def _fill(d: Path) -> Path:
    (d / "sub").mkdir()
    (d / "out.json").write_text(KEEP)
    (d / "graph.dot").write_text(KEEP)
    (d / "garbage.json").write_text("{not json")
    (d / "cluster.toml").write_text("gpus_per_node = 2\ninter_bw = 4\n")
    (d / "plan.json").write_text(json.dumps({"graph": "alexnet", "procs": 4, "layers": [
        {"id": v, "config": c} for v, c in enumerate(PLAN)]}))
    return d


PLAN = [[4, 1, 1, 1, 1, 1, 1], [4, 1, 1, 1], [4, 1, 1, 1, 1, 1, 1], [4, 1, 1, 1], [4, 1, 1, 1, 1, 1, 1],
        [4, 1, 1, 1, 1, 1, 1], [4, 1, 1, 1, 1, 1, 1], [4, 1, 1, 1], [4, 1, 1, 1], [4, 1], [1, 4, 1], [1, 4, 1],
        [1, 4, 1], [1, 4]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argvs)
def test_any_command_line_ends_in_a_report_or_one_line(parts):
    argv = [x for part in parts for x in part]
    if any(v in ("-g", "transformer") for v in argv) and "--algo" in argv:
        argv += ["--mem-limit", "1"]  # the breadth-first Transformer is refused: keep it quick
    with workspace() as d:
        files = {d / "out.json": KEEP, d / "graph.dot": KEEP}
        status, out, err = run_main(argv + ["--mem-limit", "2"] if "--mem-limit" not in argv else argv, d)
        check(status, out, err, files if status else {})


# -- strategy files ------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**30) | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=20)
layer = st.fixed_dictionaries({"id": st.one_of(st.integers(-2, 16), json_values),
                               "config": st.one_of(st.lists(st.integers(-1, 9), max_size=8), json_values)})
documents = st.one_of(
    json_values,
    st.fixed_dictionaries({"layers": st.lists(layer, max_size=16)}, optional={
        "graph": st.one_of(st.sampled_from(GRAPH_NAMES), json_values), "procs": st.one_of(st.integers(-1, 64),
                                                                                          json_values),
        "params": json_values, "cluster": json_values, "flops": json_values, "embedding_sync": json_values,
        "embedding_lookup": json_values, "optimizer": json_values}),
    # a real plan with one field or one layer replaced
    st.tuples(st.sampled_from(["graph", "procs", "params", "cluster", "flops", "bw", "distinct_rows"]),
              json_values).map(lambda kv: {"graph": "alexnet", "procs": 4, kv[0]: kv[1],
                                           "layers": [{"id": v, "config": c} for v, c in enumerate(PLAN)]}),
    st.tuples(st.integers(0, 13), json_values).map(lambda iv: {"graph": "alexnet", "procs": 4, "layers": [
        {"id": v, "config": iv[1] if v == iv[0] else c} for v, c in enumerate(PLAN)]}),
    # a real plan with splits of the right length, which may or may not divide, fit p, be contiguous
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.lists(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=7, max_size=7),
                                                      min_size=14, max_size=14)).map(
        lambda pc: {"graph": "alexnet", "procs": pc[0], "extra": None, "layers": [
            {"id": v, "config": cfg[: len(c)]} for v, (c, cfg) in enumerate(zip(PLAN, pc[1]))]}),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_any_strategy_file_ends_in_a_report_or_one_line(doc):
    with workspace() as d:
        (d / "doc.json").write_text(json.dumps(doc))
        status, out, err = run_main(["--evaluate", "doc.json", "--output", "out.json", "--compare"], d)
        check(status, out, err, {d / "out.json": KEEP, d / "doc.json": json.dumps(doc)})


@pytest.mark.parametrize("text", ["", "[", "\x00\x01", "{" * 10**5, '"' + "a" * 10**6, "1" * 10**4])
def test_broken_files(text):
    with workspace() as d:
        (d / "doc.json").write_text(text)
        status, out, err = run_main(["--evaluate", "doc.json", "--output", "out.json"], d)
        check(status, out, err, {d / "out.json": KEEP})
        assert status == 2
