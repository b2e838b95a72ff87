"""What the flags do against the files a run reads and writes
(``docs/inputs.md``): inputs that are not regular files, outputs that would
replace an input, flags against a plan given whole, the memory bound while a
model is read, ``--require-fit`` and the exit statuses, and the messages a
hand-edited file or a path gets."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from conftest import ROOT, one_line_error, run_cli

CONFIGS = ROOT / "tests" / "data" / "configs"
ONNX = ROOT / "tests" / "data" / "onnx"


def run(*args, cwd, ok=True, **kw):
    return run_cli(*args, cwd=cwd, ok=ok, **kw)


def files_in(path) -> dict:
    """Every file under ``path`` with its bytes (links as their target)."""
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            out[os.path.relpath(p, path)] = os.readlink(p) if os.path.islink(p) else open(p, "rb").read()
    return out


# -- inputs that are not regular files -------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("args, name", [
    (["-g", "x.json"], "x.json"), (["-g", "x.onnx"], "x.onnx"), (["--evaluate", "x.json"], "x.json"),
    (["--cluster", "x.json"], "x.json"), (["--calibrate", "x.json", "--device", "h100"], "x.json"),
])
def test_a_fifo_is_refused_not_waited_on(tmp_path, args, name):
    os.mkfifo(tmp_path / name)
    msg = one_line_error(run(*args, "-p", 8, cwd=tmp_path, ok=False, timeout=60))
    assert msg.endswith(f"{name} is a FIFO, not a regular file"), msg


@pytest.mark.parametrize("flag", ["-g", "--evaluate", "--cluster"])
def test_a_link_that_loops_is_named_so(tmp_path, flag):
    os.symlink("loop.json", tmp_path / "loop.json")
    msg = one_line_error(run(flag, "loop.json", "-p", 8, cwd=tmp_path, ok=False))
    assert msg.endswith("loop.json is a symbolic link that loops"), msg


@pytest.mark.parametrize("name", ["loop", "gone"])
def test_a_broken_link_without_an_extension_is_named_so(tmp_path, name):
    """A -g name that is a broken link in the working directory is the
    link, named so, not an unknown built-in model."""
    os.symlink("loop" if name == "loop" else "nowhere", tmp_path / name)
    msg = one_line_error(run("-g", name, "-p", 8, cwd=tmp_path, ok=False))
    assert msg.endswith("loop is a symbolic link that loops" if name == "loop" else
                        f"gone is a link to {os.path.realpath(tmp_path / 'nowhere')}, which does not exist"), msg


# -- the memory bound holds while a model is read ---------------------------------------------

LIMIT_GB = 0.25


def _traced_peak(settings) -> tuple[int, str]:
    """The traced peak (bytes) of planning ``settings`` in this process, and
    how the run ended (``ok`` or its one-line error)."""
    import tracemalloc

    from errors import InputError
    from planner import plan

    tracemalloc.start()
    try:
        try:
            plan(settings)
            how = "ok"
        except (InputError, MemoryError) as e:
            how = str(e)
        return tracemalloc.get_traced_memory()[1], how
    finally:
        tracemalloc.stop()


def _edited_plan(tmp_path, settings, **params) -> str:
    """A plan file of ``settings`` with its model's parameters edited."""
    from plan_file import dumps, record
    from planner import plan

    rec = record(plan(settings).result)
    rec["params"].update(params)
    rec.update({k: v for k, v in params.items() if k in rec})
    path = tmp_path / "edited.json"
    path.write_text(dumps(rec))
    return str(path)


@pytest.mark.parametrize("case", ["onnx seq", "onnx batch", "config.json", "built-in transformer", "built-in cnn",
                                  "plan file of an onnx model", "plan file of a built-in model"])
def test_the_memory_limit_holds_whatever_the_input(tmp_path, case):
    """Sizes within the flags' bounds, planned under ``--mem-limit 0.25``: the
    traced peak stays under the limit whether the run is refused or planned
    (an ONNX model's constants sized by the sequence were computed in full:
    1.3 GB at --seq 10^7, 15.7 GB at 10^9)."""
    from settings import Settings

    llama = str(ONNX / "hf-llama-gqa-dynamo.onnx")
    s = {
        "onnx seq": dict(graph=llama, batch=8, seq=10**7),
        "onnx batch": dict(graph=llama, batch=10**7, seq=1),
        "config.json": dict(graph=str(CONFIGS / "llama3-8b"), batch=10**6, seq=10**5),
        "built-in transformer": dict(graph="transformer", seq=10**9),
        "built-in cnn": dict(graph="inception3", batch=10**9),
    }.get(case)
    if case == "plan file of an onnx model":
        path = _edited_plan(tmp_path, Settings(graph=llama, procs=8, batch=8, seq=16, mem_limit_gb=LIMIT_GB), seq=10**7)
        s = dict(evaluate=path)
    elif case == "plan file of a built-in model":
        path = _edited_plan(tmp_path, Settings(graph="transformer", procs=8, mem_limit_gb=LIMIT_GB), batch=10**9)
        s = dict(evaluate=path)
    s.setdefault("procs", 8)
    peak, how = _traced_peak(Settings(**s, mem_limit_gb=LIMIT_GB))
    assert peak < LIMIT_GB * 1e9, (f"{peak / 1e9:.3g} GB traced", how)


def test_a_model_refused_by_its_sizes_is_refused_at_once():
    """A sequence that makes a tensor's dimension exceed the bound is refused
    from the shapes, small in memory (measured in a subprocess: RSS)."""
    import subprocess

    code = ("import resource, subprocess, sys\n"
            f"p = subprocess.run([sys.executable, {str(ROOT / 'scheduler.py')!r}, '-g', "
            f"{str(ONNX / 'hf-llama-gqa-dynamo.onnx')!r}, '-p', '8', '-b', '8', '--seq', '10000000', "
            "'--mem-limit', '0.25'], capture_output=True, text=True)\n"
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
            "print(p.stderr, end='')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    first, *rest = proc.stdout.splitlines()
    status, rss_kb = map(int, first.split())
    assert status == 2 and len(rest) == 1 and "has a dimension of" in rest[0], proc.stdout
    assert rss_kb * 1024 < LIMIT_GB * 1e9, f"{rss_kb / 1e6:.3g} GB resident"


# -- no output replaces an input ------------------------------------------------------------


@pytest.fixture
def inputs(tmp_path):
    """A model directory, a cluster file, a plan file, and links to them."""
    shutil.copytree(CONFIGS / "gpt2", tmp_path / "gpt2")
    (tmp_path / "cl.json").write_text(json.dumps({"bw": 100}))
    (tmp_path / "p4.json").write_text(json.dumps({"bw": 100}))
    run("-g", "alexnet", "-p", 8, "-q", "--output", "p.json", cwd=tmp_path)
    os.symlink("p.json", tmp_path / "link.json")
    os.symlink("gpt2", tmp_path / "model")
    return tmp_path


@pytest.mark.parametrize("args, flag, path", [
    (["-g", "gpt2", "--output", "gpt2/config.json"], "--output", "gpt2/config.json"),
    (["-g", "gpt2/config.json", "--output", "./gpt2/config.json"], "--output", "./gpt2/config.json"),
    (["-g", "model", "--output", "gpt2/config.json"], "--output", "gpt2/config.json"),
    (["-g", "gpt2", "--export", "torchtitan:gpt2/config.json"], "--export torchtitan", "gpt2/config.json"),
    (["-g", "gpt2", "--export", "megatron:model/config.json"], "--export megatron", "model/config.json"),
    (["-g", "alexnet", "--cluster", "cl.json", "--output", "cl.json"], "--output", "cl.json"),
    (["-g", "alexnet", "--cluster", "./cl.json", "--export", "jax:cl.json"], "--export jax", "cl.json"),
    (["--evaluate", "p.json", "--output", "p.json"], "--output", "p.json"),
    (["--evaluate", "link.json", "--output", "./p.json"], "--output", "./p.json"),
    (["--evaluate", "p.json", "--output", "link.json"], "--output", "link.json"),
    (["-g", "alexnet", "-p", "4,8", "--cluster", "cl.json", "--output", "cl.json"], "--output", "cl.json"),
    (["-g", "alexnet", "-p", "4,8", "--cluster", "p4.json", "--plans", "."], "--plans", "./p4.json"),
    (["-g", "alexnet", "--cluster", "cl.json", "-d"], None, None),
])
def test_an_output_that_is_an_input_is_refused_before_any_work(inputs, args, flag, path):
    if flag is None:  # a run whose outputs are not inputs: it runs
        run(*args, "-p", 8, "-q", cwd=inputs)
        return
    before = files_in(inputs)
    msg = one_line_error(run(*args, "-q", cwd=inputs, ok=False))
    assert msg.startswith(f"{flag}: {path} is the ") and msg.endswith("reads; give another path"), msg
    assert files_in(inputs) == before


def test_an_output_in_a_model_directory_that_would_become_its_model_is_refused(inputs):
    (inputs / "onnx").mkdir()
    shutil.copy(ONNX / "hf-gpt2-dynamo.onnx", inputs / "onnx" / "gpt2.onnx")
    before = files_in(inputs)
    msg = one_line_error(run("-g", "onnx", "-b", 2, "--seq", 16, "--output", "onnx/config.json", cwd=inputs,
                             ok=False))
    assert msg == "--output: onnx/config.json would be read as the model of onnx (-g); give another path"
    assert files_in(inputs) == before
    run("-g", "onnx", "-b", 2, "--seq", 16, "-q", "--output", "onnx/plan.json", cwd=inputs)  # any other name is fine
    assert (inputs / "onnx" / "plan.json").exists()


def test_a_plan_files_model_is_an_input_too(tmp_path):
    shutil.copytree(CONFIGS / "gpt2", tmp_path / "gpt2")
    run("-g", "gpt2", "-p", 4, "-b", 4, "--seq", 64, "-q", "--output", "p.json", cwd=tmp_path)
    msg = one_line_error(run("--evaluate", "p.json", "--output", "gpt2/config.json", cwd=tmp_path, ok=False))
    assert msg.startswith("--output: gpt2/config.json is the model file the plan --evaluate reads names"), msg


def test_save_cluster_never_replaces_the_cluster_file(tmp_path):
    shutil.copy(ROOT / "tests" / "data" / "calibrate" / "all_reduce_perf.txt", tmp_path)
    (tmp_path / "m.toml").write_text('nccl_file = "all_reduce_perf.txt"\n')
    (tmp_path / "cl.toml").write_text('device = "h100"\n')
    msg = one_line_error(run("--calibrate", "m.toml", "--cluster", "cl.toml", "--save-cluster", "./cl.toml",
                             cwd=tmp_path, ok=False))
    assert msg == "--save-cluster: ./cl.toml is the cluster file --cluster reads; give another path"
    assert (tmp_path / "cl.toml").read_text() == 'device = "h100"\n'


# -- flags against a plan given whole -----------------------------------------------------------


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """A plan file without stages (tp8.json) and one with two (pp2.json)."""
    where = tmp_path_factory.mktemp("plans")
    run("-g", "transformer", "-p", 8, "-q", "--output", "tp8.json", cwd=where)
    run("-g", "transformer", "-p", 8, "--pp", 2, "-q", "--output", "pp2.json", cwd=where)
    return where


@pytest.mark.parametrize("args, given", [
    (["--evaluate", "tp8.json", "--pp", "2"], "--pp 2"),  # was: internal error: KeyError: 'pipeline'
    (["--evaluate", "tp8.json", "--pp", "auto"], "--pp auto"),
    (["--evaluate", "tp8.json", "--microbatches", "2"], "--microbatches 2"),
    (["--evaluate", "tp8.json", "--zero", "3"], "--zero 3"),  # the four below: exit 0, nothing changed
    (["--evaluate", "tp8.json", "--recompute", "full"], "--recompute full"),
    (["--evaluate", "pp2.json", "--pp", "4"], "--pp 4"),
    (["--evaluate", "pp2.json", "--pp", "1"], "--pp 1"),
    (["--evaluate", "pp2.json", "--microbatches", "16"], "--microbatches 16"),
    (["--evaluate", "pp2.json", "--schedule", "gpipe"], "--schedule gpipe"),
    (["--evaluate", "pp2.json", "-p", "32"], "-p 32"),  # was: "p = 32 ... 2 stages of 16 devices", same time
])
def test_a_flag_against_a_plan_file_is_refused_naming_both(plans, args, given):
    msg = one_line_error(run(*args, "--output", "out.json", cwd=plans, ok=False))
    assert msg.startswith(f"{given} and --evaluate {args[1]} cannot be given together: a plan file is costed "), msg
    assert not (plans / "out.json").exists()


@pytest.mark.parametrize("spec, args, given", [
    ("tp=8", ["--pp", "2"], "--pp 2"),  # was: exit 0 without a pipeline
    ("tp=2", ["--zero", "3"], "--zero 3"),  # was: no ZeRO applied
    ("tp=2,recompute=full", ["--recompute", "none"], "--recompute none"),  # was: the plan's kept
    ("tp=2,pp=2", ["--microbatches", "4"], "--microbatches 4"),
    ("tp=2,pp=2", ["--schedule", "gpipe"], "--schedule gpipe"),
    ("tp=2", ["--pp", "1"], "--pp 1"),  # whatever the value
])
def test_a_flag_against_a_plan_string_is_refused_naming_both(tmp_path, spec, args, given):
    msg = one_line_error(run("-g", "transformer", "-p", 8, "--plan", spec, *args, cwd=tmp_path, ok=False))
    assert msg.startswith(f"{given} and --plan {spec} cannot be given together: the plan string sets the "), msg


def test_what_the_plan_does_not_fix_applies(plans):
    """The same number of devices, and the cluster, model and optimizer flags,
    apply to a plan file; -p lays a --plan string out."""
    same = run("--evaluate", "pp2.json", "-p", 8, "-q", cwd=plans).stdout
    assert same == run("--evaluate", "pp2.json", "-q", cwd=plans).stdout
    faster = run("--evaluate", "tp8.json", "--bw", 64, "-q", cwd=plans).stdout
    assert faster != run("--evaluate", "tp8.json", "-q", cwd=plans).stdout
    assert "p = 16" in run("-g", "transformer", "-p", 16, "--plan", "tp=2", "-q", cwd=plans).stdout


@pytest.mark.parametrize("args, where", [
    (["--pp", "2"], "--pp"), (["--plan", "tp=2"], "--plan"), (["--search", "standard"], "--search standard"),
    (["--microbatches", "4"], "--microbatches"),
])
@pytest.mark.parametrize("timing", ["--profile", "--measure"])
def test_profile_and_measure_are_refused_where_no_per_operator_search_runs(tmp_path, args, where, timing):
    msg = one_line_error(run("-g", "transformer", "-p", 8, *args, timing, cwd=tmp_path, ok=False))
    assert msg == ("--profile and --measure time the search of one plan per operator; they cannot be used with "
                   f"{where}")


# -- smaller things --------------------------------------------------------------------------


def test_plans_without_a_sweep_names_the_plan_after_the_model(tmp_path):
    """Was: pdir/.json, a hidden file."""
    run("-p", 8, "--plans", "pdir", cwd=tmp_path)
    assert sorted(os.listdir(tmp_path / "pdir")) == ["alexnet.json"]
    assert json.loads((tmp_path / "pdir" / "alexnet.json").read_text())["procs"] == 8


def test_the_default_schedule_is_1f1b_with_a_number_of_stages(tmp_path):
    """--pp 2 without --schedule ran interleaved:2 although --help said 1f1b;
    --schedule auto searches both (and finds interleaved:2 faster here)."""
    args = ("-g", CONFIGS / "gpt2", "-p", 8, "--pp", 2, "--device", "h100", "-b", 16, "--seq", 128, "-q")
    schedules = {}
    for extra in ((), ("--schedule", "1f1b"), ("--schedule", "auto")):
        run(*args, *extra, "--output", "plan.json", cwd=tmp_path)
        schedules[extra[1:]] = json.loads((tmp_path / "plan.json").read_text())["pipeline"]["schedule"]
    assert schedules == {(): "1f1b", ("1f1b",): "1f1b", ("auto",): "interleaved:2"}
    assert "default: 1f1b with --pp N, auto with --pp auto" in " ".join(run("--help", cwd=tmp_path).stdout.split())


def test_more_stages_than_blocks_says_so(tmp_path):
    """Was: 'at least as many micro-batches as stages are needed', with 16."""
    msg = one_line_error(run("-g", CONFIGS / "gpt2", "-p", 16, "--pp", 16, "-b", 64, "--microbatches", 16, "--seq", 128,
                             cwd=tmp_path, ok=False))
    assert msg == "--pp 16 is more stages than the 12 blocks of gpt2"


@pytest.mark.parametrize("key, value, says", [
    ("procs", -4, "procs must be an integer from 1 to 1,000,000, got -4"),  # was: "-p must be ..."
    ("width", 513, "width 513 is not a multiple of the head width 64"),  # was: "-m 513 ..."
    ("layers", 100000, "layers must be an integer from 1 to 1,000, got 100000"),  # was: "--layers must be ..."
    ("optimizer", "rmsprop", "optimizer must be one of sgd, momentum, adam, got 'rmsprop'"),  # was: "--optimizer ..."
    ("optimizer", 3, "optimizer is 3, not a string"),
])
def test_a_hand_edited_value_is_named_in_its_file_not_as_a_flag(plans, tmp_path, key, value, says):
    rec = json.loads((plans / "tp8.json").read_text())
    if key in rec["params"]:
        rec["params"][key] = value
    if key in ("procs", "width", "optimizer"):  # recorded at the top ("layers" there is the list of layers)
        rec[key] = value
    (tmp_path / "ed.json").write_text(json.dumps(rec))
    msg = one_line_error(run("--evaluate", "ed.json", cwd=tmp_path, ok=False))
    assert msg.startswith(f"--evaluate: ed.json: {says}"), msg


@pytest.mark.parametrize("flag, path, says", [
    ("--output", "aplan.json/x.json", "--output: aplan.json is not a directory"),  # was: "directory ... does not exist"
    ("--output", "aplan.json/a/x.json", "--output: aplan.json is not a directory"),
    ("--plot", "aplan.json/x.png", "--plot: aplan.json is not a directory"),
    ("--plans", "aplan.json/d", "--plans: aplan.json is not a directory"),
    ("--output", "loop.json", "--output: loop.json is a symbolic link that loops"),  # was: replaced by a file
    ("--output", "loop.json/x.json", "--output: loop.json/x.json is a symbolic link that loops"),
])
def test_an_output_path_that_cannot_be_written_says_why(tmp_path, flag, path, says):
    (tmp_path / "aplan.json").write_text("{}")
    os.symlink("loop.json", tmp_path / "loop.json")
    sweep = ["-p", "4,8"] if flag in ("--plot", "--plans") else []
    assert one_line_error(run(*sweep, flag, path, cwd=tmp_path, ok=False)) == says
    assert os.readlink(tmp_path / "loop.json") == "loop.json" and (tmp_path / "aplan.json").read_text() == "{}"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_a_directory_that_takes_no_files_says_so(tmp_path):
    """Was: 'cannot write in /proc: No such file or directory'."""
    assert one_line_error(run("--output", "/proc/x.json", cwd=tmp_path, ok=False)) == \
        "--output: cannot write in /proc: it takes no new files"


def test_calibration_says_when_measurements_of_one_size_disagree(tmp_path):
    (tmp_path / "m.toml").write_text(
        "gemm = [{m = 8192, n = 8192, k = 8192, tflops = 900}, {m = 8192, n = 8192, k = 8192, tflops = 10},\n"
        "        {m = 1024, n = 1024, k = 1024, tflops = 200}]\n")
    out = run("--calibrate", "m.toml", "--device", "h100", cwd=tmp_path).stdout
    assert ("warning: matrix products of the same size (m=8192 n=8192 k=8192) ran from 10 to 900 TFLOPS, more than "
            "2x apart: check them") in out
    (tmp_path / "m.toml").write_text(  # sizes apart by more than 2x, each measured alike: no warning
        "gemm = [{m = 8192, n = 8192, k = 8192, tflops = 700}, {m = 8192, n = 8192, k = 8192, tflops = 650},\n"
        "        {m = 256, n = 256, k = 256, tflops = 20}]\n")
    assert "warning" not in run("--calibrate", "m.toml", "--device", "h100", cwd=tmp_path).stdout


# -- --require-fit and the exit statuses ---------------------------------------------------------

GPT2 = ("-g", CONFIGS / "gpt2", "-p", 4, "-b", 4, "--seq", 128, "--device", "h100", "--device-memory", 2, "--headroom", 0, "-q")


def test_require_fit_fails_a_plan_that_does_not_fit(tmp_path):
    """Was: marked OVER, exit 0, whatever the flags."""
    over = run(*GPT2, "--plan", "dp=4", cwd=tmp_path)  # without the flag: reported, exit 0
    assert "OVER the" in over.stdout
    proc = run(*GPT2, "--plan", "dp=4", "--require-fit", "--output", "plan.json", "--export", "torchtitan:job.toml",
               cwd=tmp_path, ok=False)
    msg = one_line_error(proc, 3)
    assert msg.startswith("--require-fit: the plan needs ") and msg.endswith(" GB of a device"), msg
    assert proc.stdout == over.stdout  # the same report
    assert os.listdir(tmp_path) == []  # no file written
    run(*GPT2, "--plan", "dp=4,zero=3", "--require-fit", "--output", "plan.json", cwd=tmp_path)  # one that fits
    kept = run(*GPT2[:-5], "--device-memory", 3, "--headroom", 1, "-q", "--plan", "dp=4", "--require-fit", cwd=tmp_path,
               ok=False)  # the same 2 GB, a headroom kept: said how
    assert one_line_error(kept, 3).endswith(" GB of a device (3 GB less 1 GB of headroom)")
    assert json.loads((tmp_path / "plan.json").read_text())["memory"]["fits"] is True
    run(*GPT2, "--require-fit", cwd=tmp_path)  # a search within the memory finds one that fits


@pytest.mark.parametrize("args, says", [
    (["-g", "alexnet", "-p", 8], "--require-fit needs a device memory to fit: give --device, --device-memory or a "
                                 "cluster file giving one"),
    (["-g", "alexnet", "-p", "4,8", "--device", "h100"], "--require-fit checks the plan of one run; it cannot be "
                                                         "used with a sweep, --plans or --plot"),
])
def test_require_fit_bad_input(tmp_path, args, says):
    assert one_line_error(run(*args, "--require-fit", "--output", "out.csv", cwd=tmp_path, ok=False)) == says
    assert os.listdir(tmp_path) == []
