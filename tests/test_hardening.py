"""Defects an adversarial run of the command line found, each reproduced:
wrong or misleading answers, resources, crashes and silences, messages."""

from __future__ import annotations

import functools
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, not_progress, reference, run_cli

SCHEDULER = str(ROOT / "scheduler.py")


run = functools.partial(run_cli, ok=False)  # each test checks the status and messages itself


def one_line_error(proc, status, message):
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr, proc.stderr


def last(proc) -> str:
    return proc.stdout.rstrip("\n").splitlines()[-1]


# -- wrong or misleading answers -----------------------------------------------------------


def test_the_header_names_the_cost_model_rules_and_where_they_came_from(tmp_path):
    plan = tmp_path / "c.json"
    first = run("-g", "rnnlm", "-p", 8, "--sparse-embeddings", "--output", plan)
    assert "Cost model: embedding = row lookup, gradient = cheaper of dense/sparse" in first.stdout
    recorded = run("--evaluate", plan)
    assert f"Cost model: embedding = row lookup, gradient = cheaper of dense/sparse (as {plan} records)" \
        in recorded.stdout
    data = json.loads(plan.read_text())
    del data["embedding_lookup"], data["embedding_sync"]
    plan.write_text(json.dumps(data))
    plain = run("--evaluate", plan)
    assert "Cost model: original PaSE (embedding = one-hot GEMM, dense gradients)" in plain.stdout
    assert float(last(recorded).split()[-1]) == pytest.approx(4.3966e12, rel=1e-4)
    assert float(last(plain).split()[-1]) == pytest.approx(3.4006e13, rel=1e-4)
    assert "Cost model: original PaSE" in run("-p", 4).stdout  # every report says it


def test_a_non_contiguous_reshape_is_refused(tmp_path):
    plan = tmp_path / "plan.json"
    run("-g", "alexnet", "-p", 8, "--output", plan)
    data = json.loads(plan.read_text())
    data["layers"][9]["config"] = [1, 8]  # flatten/unravel (b, k): k split while b is not whole
    plan.write_text(json.dumps(data))
    one_line_error(run("--evaluate", plan), 2, "node 9 (flatten/unravel): configuration (1, 8) splits a reshape "
                                               "into pieces that are not contiguous blocks")


def test_configurations_outside_the_space_are_marked(tmp_path):
    plan = tmp_path / "plan.json"
    run("-g", "alexnet", "-p", 64, "--output", plan)
    data = json.loads(plan.read_text())
    data["layers"][0]["config"] = [64, 1, 1, 1, 1, 1, 1]  # 2 samples per device: below the cutoff of 4
    plan.write_text(json.dumps(data))
    out = run("--evaluate", plan).stdout
    assert " 0 conv1 " in out and "(64,1,1,1,1,1,1)*" in out
    assert "* 1 configuration outside the search space for p = 64" in out


def test_the_report_says_when_devices_stay_idle():
    out = run("-g", "alexnet", "-p", 8, "-b", 1, "--compare").stdout
    assert "data parallel uses only 1 of the 8 devices: the batch cannot be split further" in out
    out = run("-g", "resnet101", "-p", 7).stdout
    assert "No operator can use more than 6 of the 7 devices (no configuration splits further at cutoff 4); " \
           "this strategy uses at most 4." in out


# -- resources -------------------------------------------------------------------------------


def test_a_strategy_file_is_read_with_a_bound():
    proc = run("--evaluate", "/dev/zero")
    one_line_error(proc, 2, "--evaluate: /dev/zero is a device, not a regular file")


def test_compare_after_evaluate_builds_no_cost_tables(tmp_path):
    plan = tmp_path / "plan.json"
    run("-g", "transformer", "-p", 8, "--output", plan)
    # at p = 100000 the search's tables would need gigabytes: labelling the baselines must not build them
    # (the plan, on 8 of them, recorded for 100000 devices: -p may not change a plan file's)
    plan.write_text(plan.read_text().replace('"procs": 8,', '"procs": 100000,', 1))
    proc = run("--evaluate", plan, "--compare", "--mem-limit", 0.2)
    assert proc.returncode == 0, proc.stderr
    assert "Compared with baselines" in proc.stdout


# -- crashes and silences --------------------------------------------------------------------


def test_runs_with_stderr_closed():
    proc = subprocess.run(f"{sys.executable} {SCHEDULER} -p 4 2>&-", shell=True, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and last(proc) == f"Total cost: {reference('alexnet', 4)['optimal_cost']:.2f}"
    bad = subprocess.run(f"{sys.executable} {SCHEDULER} -p 0 2>&-", shell=True, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""


def _mapped(pid: int, name: str) -> bool:
    """Whether process ``pid`` has loaded a shared library whose path holds ``name``."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return name in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc")
@pytest.mark.parametrize("delay", [0.0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16])
def test_an_interrupt_while_starting_is_quiet(delay):
    """SIGINT while the tool imports its modules: from the moment numpy's
    compiled core is loaded (our first modules import it; before that the
    interpreter itself is starting) through the imports that follow."""
    proc = subprocess.Popen([sys.executable, SCHEDULER, "-g", "transformer", "-p", "64"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    t0 = time.perf_counter()
    while not _mapped(proc.pid, "_multiarray_umath") and proc.poll() is None and time.perf_counter() - t0 < 10:
        time.sleep(0.0002)
    time.sleep(delay)
    assert proc.poll() is None  # the run takes most of a second: the signal comes while it starts
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err == "scheduler.py: interrupted\n", err


def test_an_ignored_interrupt_stays_ignored():
    """Started with SIGINT ignored (a background job of a script), the tool
    keeps ignoring it, as Python itself does."""
    proc = subprocess.Popen([sys.executable, SCHEDULER, "-g", "transformer", "-p", "64", "-q"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    while not _mapped(proc.pid, "_multiarray_umath") and proc.poll() is None:
        time.sleep(0.001)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and err == "" and out.endswith("Total cost: 747450134528.00\n")


@pytest.mark.parametrize("args, message", [
    (["--device", ""], "argument --device: '' is not a known device; choose one of v100, a100-40gb"),
    (["--device", "v100,V100"], "argument --device: 'V100' appears twice in 'v100,V100'"),
    (["--jobs", "0"], "argument --jobs: must be from 1 to 256, got 0"),
    (["-p", "8", "--device-memory", "0.37103"],
     "no strategy fits in 0.37103 GB per device: the smallest any strategy of this graph needs at this p is "
     "0.371031 GB"),
])
def test_settings_refused_in_one_clear_line(args, message):
    proc = run(*args)
    assert proc.returncode in (1, 2) and proc.stderr.startswith(f"scheduler.py: error: {message}"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("fields, message", [
    ({"device": ""}, "device '' is not a known device"),
    ({"gpus_per_node": 1e20}, "gpus_per_node must be an integer, got 1e+20"),
])
def test_cluster_file_fields_are_checked(tmp_path, fields, message):
    (tmp_path / "c.json").write_text(json.dumps(fields))
    proc = run("--cluster", "c.json", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr == f"scheduler.py: error: --cluster: c.json: {message}" + (
        "; choose one of v100, a100-40gb, a100-80gb, h100, h100-96gb, h100-nvl, h800, h200, b200, b300, gb200, "
        "gb300, paper\n"
        if "device" in fields else "\n")


def test_a_strategy_for_another_model_says_so(tmp_path):
    assert run("-g", "transformer", "-p", 4, "-q", "--output", "t.json", cwd=tmp_path).returncode == 0
    proc = run("--evaluate", "t.json", "-g", "alexnet", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "scheduler.py: error: --evaluate: t.json is a strategy for transformer, not for alexnet\n"


# -- messages and documentation --------------------------------------------------------------


def test_huge_and_fractional_totals_read_well(tmp_path):
    proc = run("-g", "transformer", "-p", 3, "-b", 10**9, "-q", "--output", tmp_path / "big.json")
    assert last(proc) == "Total cost: 4.95194366365e+19"
    assert json.loads((tmp_path / "big.json").read_text())["total_cost"] == pytest.approx(4.95194366365e19)
    small = run("-g", "alexnet", "-p", 3)
    assert last(small).startswith("Total cost: ") and last(small).split(".")[1].isdigit()


def test_summary_mode():
    out = run("-g", "resnet101", "-p", 8, "--summary").stdout
    assert "layer1.0/conv1" not in out and "Operators: " in out and "Search: GENERATESEQ" in out
    assert out.startswith("PaSE strategy: resnet101") and last(run("-g", "resnet101", "-p", 8)) in out


def test_an_output_link_into_a_missing_directory(tmp_path):
    (tmp_path / "out.json").symlink_to(tmp_path / "gone" / "plan.json")
    one_line_error(run("-p", 4, "--output", "out.json", cwd=tmp_path), 2,
                   f"--output: out.json is a link to {tmp_path}/gone/plan.json, whose directory {tmp_path}/gone "
                   "does not exist")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_names_the_file_and_keeps_the_report(tmp_path):
    (tmp_path / "plan.json").symlink_to("/dev/full")
    proc = run("-p", 4, "--output", "plan.json", cwd=tmp_path)
    one_line_error(proc, 1, "--output: could not write plan.json: No space left on device")
    assert last(proc) == f"Total cost: {reference('alexnet', 4)['optimal_cost']:.2f}"


@pytest.mark.parametrize("args, status, message", [
    (["--flops", "-inf"], 2, "argument --flops: must be a number above 0 and at most 1,000,000,000,000, got '-inf'"),
    (["--bw", "-1e3"], 2, "argument --bw: must be a number above 0 and at most 1,000,000,000,000, got '-1e3'"),
    (["-p", "1" * 5000], 2, "is not an integer (ASCII digits, at most 30)"),
    (["-p", "١٢"], 2, "'١٢' is not an integer"),
    (["-p", "8_0"], 2, "'8_0' is not an integer"),
    (["--flops", "1e13"], 2, "argument --flops: must be a number above 0 and at most 1,000,000,000,000, got '1e13'"),
    (["--flops", "1e12", "--bw", "1e-6"], 2, "make one word cost 8e+21 FLOP"),  # the same kind, the same status
    (["-p", "9" * 25], 2, "-p must be an integer from 1 to 1,000,000"),
])
def test_messages_and_statuses(args, status, message):
    one_line_error(run(*args), status, message)


def test_a_long_integer_in_a_strategy_file(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text('{"layers": [{"id": ' + "7" * 5000 + ', "config": [1]}]}')
    proc = run("--evaluate", plan)
    one_line_error(proc, 2, "is not a usable JSON file (a number has too many digits)")
    assert "set_int_max_str_digits" not in proc.stderr


def test_distinct_rows_says_when_it_has_no_effect():
    assert "--distinct-rows has no effect here: alexnet has no embedding." in run("-p", 4, "--distinct-rows", 9).stdout
    out = run("-g", "rnnlm", "-p", 4, "--distinct-rows", 9).stdout
    assert "--distinct-rows has no effect here: embedding gradients are all-reduced densely" in out
    assert "no effect" not in run("-g", "rnnlm", "-p", 4, "--distinct-rows", 9, "--sparse-embeddings").stdout


def test_progress_while_the_cost_tables_are_built(monkeypatch):
    import cli.runner

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    progress = cli.runner.Progress("building the cost tables", "edges")
    progress.t0 -= 2  # as if it had run for two seconds
    progress(3, 10)
    assert "building the cost tables: 3/10 edges" in err.getvalue()
    seen = []
    real = cli.runner.Progress
    monkeypatch.setattr(cli.runner, "Progress", lambda *a: seen.append(a) or real(*a))
    cli.runner.run(cli.runner.parse_args(["-p", "4"]), out=io.StringIO())
    assert ("building the cost tables", "edges") in seen


def test_a_model_that_costs_nothing_compares_and_draws(tmp_path):
    """A graph whose every cost is 0 has no speedup to show (not a division
    by zero), and a name with quotes and backslashes is drawn as written."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], name='mean "of" a\\b')
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 1])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "zero.onnx"))
    proc = run("-g", "zero.onnx", "-p", 4, "--compare", "-d", "--output", "z.json", cwd=tmp_path)
    assert proc.returncode == 0 and not_progress(proc.stderr) == "", proc.stderr
    assert "Total cost: 0.00" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("  PaSE "))
    assert row.split()[3] == "-"  # speedup
    assert json.loads((tmp_path / "z.json").read_text())["speedup_over_data_parallel"] is None
    assert '"0: mean \\"of\\" a\\\\b\\nReduceMean' in (tmp_path / "graph.dot").read_text()


def test_a_model_directory_name_is_printed_on_one_line(tmp_path):
    folder = tmp_path / "my\nmodel\x1b[31m"
    folder.mkdir()
    (folder / "config.json").write_text((ROOT / "tests" / "data" / "configs" / "gpt2" / "config.json").read_text())
    proc = run("-g", folder, "-p", 4, "-b", 8, "--seq", 32, "-q")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "PaSE strategy: my\\nmodel\\x1b[31m, batch 8, seq 32, p = 4"
    assert "\x1b" not in proc.stdout


def test_an_interrupt_python_cannot_raise_still_ends_the_run():
    """SIGINT handled while Python runs code that cannot raise (here a weak
    reference's callback; in a real run, an import lock's): no 'Exception
    ignored' traceback, and the run ends as interrupted."""
    script = textwrap.dedent(f"""
        import signal, sys, weakref
        sys.path.insert(0, {str(ROOT)!r})
        from cli import runner

        class Thing:
            pass

        plain_run = runner.run

        def run(s, out):
            thing = Thing()
            ref = weakref.ref(thing, lambda _: signal.raise_signal(signal.SIGINT))
            del thing
            return plain_run(s, out)

        runner.run = run
        sys.exit(runner.main(sys.argv[1:]))
    """)
    for args in (["-g", "alexnet", "-p", "4", "-q"],  # a run that ends well, and one that ends refused
                 ["-g", "alexnet", "-p", "4", "--device", "h100", "--device-memory", "0.5", "--plan", "dp=4", "-q",
                  "--require-fit"]):
        proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 130 and proc.stderr == "scheduler.py: interrupted\n", (args, proc.stderr)


# -- a second adversarial run: inputs refused in one line, figures shown plainly -----------------


LLAMA8B = str(ROOT / "tests" / "data" / "configs" / "llama3-8b")
GPT2 = str(ROOT / "tests" / "data" / "configs" / "gpt2")


def test_numbers_of_a_thousand_units_or_more_print_in_digits_and_round_up_to_the_next_unit():
    from report import fmt_bytes, fmt_time

    assert [fmt_bytes(x) for x in (999.6e6, 1.64e12, 4.4567e12, 6.06e6, 512)] == \
        ["1 GB", "1,640 GB", "4,460 GB", "6.06 MB", "512 B"]
    assert fmt_bytes(1.1e12, compact=True) == "1,100G" and fmt_bytes(-1176576, compact=True) == "-1.18M"
    assert [fmt_time(x) for x in (0.9996, 999.6e-6, 1220.0, 99_900.0, 4.5e-7, -0.5)] == \
        ["1 s", "1 ms", "1,220 s", "99,900 s", "0.45 us", "-500 ms"]
    out = run("-g", "alexnet", "-p", 1, "-q").stdout  # its optimizer: 999.8 MB, once printed "1e+03 MB"
    assert "optimizer 1 GB" in out and not re.search(r"e\+\d+ ?(GB|MB|kB|B|s|ms|us)\b", out)


def test_a_batch_of_a_billion_samples_is_planned_in_seconds_and_little_memory():
    """Micro-batch sizes found by trial division, and the interleaved
    schedule's chunk counts from a few of its repeating turns, not from a
    list of every micro-batch (which took 24 GB and the machine)."""
    start = time.monotonic()
    proc = run("-g", LLAMA8B, "-p", 8, "-b", 10**9, "--seq", 2048, "--device", "h100", "-q", timeout=120)
    assert proc.returncode == 0 and "Gradient accumulation" in proc.stdout, proc.stderr
    assert time.monotonic() - start < 60


def test_the_chunk_counts_from_a_few_turns_equal_those_of_every_micro_batch():
    from pipeline import Schedule, order

    for name, v in (("1f1b", 1), ("interleaved", 2), ("interleaved", 3)):
        sched = Schedule(name, v)
        for pp in (2, 3, 4, 8):
            for i in range(pp):
                for m in (1, pp, 7 * pp + 3, 40 * pp, 40 * pp + 1, 123):
                    held, moments, most = [0] * v, {}, [0] * v
                    for kind, _, c in order(name, i, pp, m, v):
                        held[c] += 1 if kind == "F" else -1
                        most = [max(a, b) for a, b in zip(most, held)]
                        if kind == "F":
                            moments.setdefault(tuple(held), None)
                    assert sched.chunk_peaks(i, pp, m) == tuple(map(float, most)), (name, v, pp, i, m)
                    assert sched.forward_moments(i, pp, m) == tuple(moments), (name, v, pp, i, m)


def test_odd_json_and_toml_values_are_refused_in_one_line(tmp_path):
    config = json.loads((ROOT / "tests" / "data" / "configs" / "llama3-8b" / "config.json").read_text())
    for value in ([4], {"a": 1}):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**config, "model_type": value}))
        one_line_error(run("-g", path, "-p", 4, "-b", 8, "--seq", 128, "-q"), 2, "is not a decoder family")
    deep = tmp_path / "deep.toml"
    deep.write_text("device = " + "[" * 500 + "]" * 500 + "\n")
    one_line_error(run("-g", "alexnet", "-p", 4, "-q", "--cluster", deep), 2, "is nested too deeply")
    measured = tmp_path / "m.toml"
    measured.write_text("gemm = " + "[" * 500 + "]" * 500 + "\n")
    one_line_error(run("--calibrate", measured, "--device", "h100"), 2, "is nested too deeply")


def test_a_plan_file_is_checked_where_its_values_come_from(tmp_path):
    plan = tmp_path / "p.json"
    run("-g", GPT2, "-p", 4, "-b", 8, "--seq", 128, "--device", "h100", "--output", plan, "-q")
    data = json.loads(plan.read_text())

    def edited(**changes):
        path = tmp_path / "edited.json"
        path.write_text(json.dumps({**data, **changes}))
        return path

    one_line_error(run("--evaluate", edited(procs=None), "-q"), 2, "records no procs")
    assert run("--evaluate", edited(procs=None), "-p", 4, "-q").returncode == 0
    for key, value, message in (("flops", float("nan"), "flops must be a number above 0"),
                                ("bw", "x", "bw must be a number, got 'x'")):
        one_line_error(run("--evaluate", edited(cluster={**data["cluster"], key: value}), "-q"), 2,
                       f"{tmp_path / 'edited.json'}: {message}")
    one_line_error(run("--evaluate", edited(distinct_rows=-5), "-q"), 2,
                   f"{tmp_path / 'edited.json'}: distinct_rows must be an integer >= 1")
    one_line_error(run("--evaluate", edited(embedding_sync="bogus"), "-q"), 2,
                   f"{tmp_path / 'edited.json'}: embedding_sync must be one of")
    piped = tmp_path / "pp.json"
    run("-g", LLAMA8B, "-p", 16, "-b", 16, "--seq", 1024, "--device", "h100", "--plan", "tp=8,pp=2",
        "--output", piped, "-q")
    record = json.loads(piped.read_text())
    record["pipeline"]["stages"] = [[0, "a"], [1, 2]]
    piped.write_text(json.dumps(record))
    one_line_error(run("--evaluate", piped, "-q"), 2, "the pipeline record is not one this tool wrote")


def test_only_ascii_digits_count_in_a_plan_and_a_schedule():
    for args, message in ((["--plan", "tp=\u0668"], "--plan: tp must be an integer"),
                          (["--plan", "tp=\uff18"], "--plan: tp must be an integer"),
                          (["--pp", 2, "--schedule", "interleaved:\u0662"], "interleaved:V needs V from 2 to 64")):
        one_line_error(run("-g", LLAMA8B, "-p", 16, "-b", 16, "--seq", 1024, "--device", "h100", "-q", *args), 2,
                       message)


def test_a_tiny_gradient_bucket_is_refused_by_its_bound():
    one_line_error(run("-g", GPT2, "-p", 8, "-b", 8, "--seq", 128, "--device", "h100", "-q", "--bucket-mb", "5e-324"),
                   2, "--bucket-mb: must be a number from 0.001 to 1,000,000")


def test_dump_graph_replaces_its_own_graph_dot_and_never_another(tmp_path):
    (tmp_path / "graph.dot").write_text("digraph mine {}\n")
    one_line_error(run("-g", "alexnet", "-p", 4, "-q", "-d", cwd=tmp_path), 2, "does not start with the line -d writes")
    assert (tmp_path / "graph.dot").read_text() == "digraph mine {}\n"
    (tmp_path / "graph.dot").unlink()
    for _ in range(2):  # its own file, written again
        assert "Wrote the graph" in run("-g", "alexnet", "-p", 4, "-q", "-d", cwd=tmp_path).stdout


def test_a_directory_with_a_config_and_an_onnx_file_names_neither(tmp_path):
    import shutil

    shutil.copy(ROOT / "tests" / "data" / "configs" / "gpt2" / "config.json", tmp_path / "config.json")
    shutil.copy(ROOT / "tests" / "data" / "onnx" / "hf-gpt2-dynamo.onnx", tmp_path / "model.onnx")
    one_line_error(run("-g", tmp_path, "-p", 4, "-q"), 2, "both config.json and model.onnx in this directory")


def test_a_zero_stage_that_keeps_more_says_so_in_plain_bytes():
    """DeepSpeed's ZeRO-1 over one device keeps its fp32 gradients beside
    the 16-bit ones: more memory, said as such."""
    out = run("-g", GPT2, "-p", 2, "-b", 4, "--seq", 128, "--device", "h100", "--framework", "deepspeed", "--pp", 1,
              "--zero", 1, "-q").stdout
    assert "Execution options: zero=1 on 75 operators; they need 249 MB more per device" in out


def test_sequence_parallelism_is_refused_where_there_is_no_sequence():
    one_line_error(run("-g", "alexnet", "-p", 8, "-q", "--plan", "sp=1"), 2,
                   "--plan: sp does not apply to alexnet: it names no sequence")


def test_float8_names_every_device_with_an_fp8_peak():
    from cluster.presets import DEVICES

    proc = run("-g", GPT2, "-p", 8, "--device", "a100-80gb", "--framework", "megatron", "--float8", "-q")
    one_line_error(proc, 2, "--float8 needs a device with an FP8 peak")
    assert all(name in proc.stderr for name, d in DEVICES.items() if d.fp8) and "gb300" in proc.stderr


def test_a_sweep_of_one_setting_says_so(tmp_path):
    out = run("-g", "alexnet", "-p", 4, "--plans", tmp_path / "plans", "-q").stdout
    assert out.splitlines()[0] == "PaSE sweep: 1 setting; -g alexnet, -p 4"


def test_an_input_echoed_in_an_error_is_cut_to_a_readable_line(tmp_path):
    proc = run("-g", str(tmp_path / ("x" * 100_000)), "-p", 4, "-q")
    one_line_error(proc, 2, ": no such file")
    assert len(proc.stderr) <= 2001 and " ... " in proc.stderr


def test_a_schedule_of_a_million_micro_batches_is_not_drawn(tmp_path):
    proc = run("-g", GPT2, "-p", 4, "-b", 10**6, "--seq", 128, "--device", "h100", "--pp", 2, "--microbatches", 10**6,
               "-q", "--draw", tmp_path / "x.png", timeout=120)
    one_line_error(proc, 2, "--draw: the pipeline's 1,000,000 micro-batches on 2 stages are too many to draw")
    assert not (tmp_path / "x.png").exists()


def test_plans_replace_their_own_files_and_no_other(tmp_path):
    (tmp_path / "p2.json").write_text("mine\n")
    one_line_error(run("-g", "alexnet", "-p", "2,4", "-q", "--plans", tmp_path), 2,
                   "p2.json exists and is not a plan file this tool wrote")
    assert (tmp_path / "p2.json").read_text() == "mine\n" and not (tmp_path / "p4.json").exists()
    (tmp_path / "p2.json").unlink()
    for _ in range(2):  # written, then replaced
        assert run("-g", "alexnet", "-p", "2,4", "-q", "--plans", tmp_path).returncode == 0
    assert json.loads((tmp_path / "p2.json").read_text())["procs"] == 2


def test_measurements_and_cluster_files_of_odd_numbers_are_refused_or_skipped(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"gemm": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line_error(run("--calibrate", deep, "--device", "h100"), 2, "is nested too deeply")
    big = tmp_path / "big.toml"
    big.write_text("flops = " + "9" * 5000 + "\n")
    one_line_error(run("-g", "alexnet", "-p", 4, "-q", "--cluster", big), 2,
                   "is not a usable TOML file (a number has too many digits)")
    nccl = ROOT / "tests" / "data" / "calibrate" / "nccl" / "a100_1node_thanos.txt"
    odd = tmp_path / "sizes.txt"  # a size in superscript digits: a row of no size, skipped
    odd.write_text(re.sub(r"^(\s*)8 ", "\\1\u00b2 ", nccl.read_text(), count=1, flags=re.M))
    assert "\u00b2" in odd.read_text()
    proc = run("--calibrate", odd, "--device", "a100-80gb")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_the_header_writes_large_figures_in_plain_digits():
    out = run("-g", "alexnet", "-p", 4, "-q", "--device", "h100", "--flops", 1e6, "--bw", 2.5e6,
              "--device-memory", 5000, "--headroom", 1500).stdout
    assert "h100: 1,000,000 TFLOPS, 5,000 GB (bf16)" in out and "2,500,000 GB/s inside a node" in out
    assert "fits the 3,500 GB (5,000 GB less 1,500 GB headroom)" in out
    assert "a second costs 1e+18" in out and "e+06" not in out


def test_a_timed_step_whose_plan_records_no_procs_is_refused_in_the_calibrations_words(tmp_path):
    plan = tmp_path / "plan.json"
    run("-g", LLAMA8B, "-p", 8, "--device", "h100", "-b", 8, "--seq", 1024, "--plan", "dp=8,zero=3", "--output", plan)
    data = json.loads(plan.read_text())
    del data["procs"]
    plan.write_text(json.dumps(data))
    (tmp_path / "s.toml").write_text('step = {plan = "plan.json", seconds = 1.0}\n')
    one_line_error(run("--calibrate", tmp_path / "s.toml", "--device", "h100", "-p", 8), 2,
                   "step.plan: " + str(plan) + " records no procs (the devices the timed step ran on)")


def test_flags_of_a_sweep_that_would_change_nothing_are_refused(tmp_path):
    """--metric only chooses what --plot shows, --jobs only how many of a
    sweep's settings run at once: alone they are refused in one line, and
    with what they serve they run."""
    one_line_error(run("-g", "alexnet", "-p", 8, "--metric", "time", "-q"), 2,
                   "--metric chooses what --plot shows: give --plot FILE with it")
    one_line_error(run("-g", "alexnet", "-p", 8, "--jobs", 2, "-q"), 2,
                   "--jobs runs a sweep's settings at once: give a list, e.g. -p 8,16,32")
    nccl = ROOT / "tests" / "data" / "calibrate" / "nccl" / "a100_1node_thanos.txt"
    one_line_error(run("--calibrate", nccl, "--device", "a100-80gb", "--metric", "cost"), 2, "--metric chooses")
    one_line_error(run("--calibrate", nccl, "--device", "a100-80gb", "--jobs", 3), 2, "--jobs runs a sweep's")
    out = run("-g", "alexnet", "-p", "4,8", "--jobs", 1, "-q", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("PaSE sweep: 2 settings"), out.stderr
