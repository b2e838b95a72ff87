"""What a run searches when no flag says (planner/defaults.py), what it
says when nothing fits, the paper's machine named in a model file's
report, and progress on a non-terminal (cli/progress.py)."""

from __future__ import annotations

import io
import math
import os

import pytest

from conftest import ROOT, not_progress, run_cli, tiny_llama

LLAMA8B = ROOT / "tests" / "data" / "configs" / "llama3-8b"


def _plan(*args):
    from cli.args import parse_args
    from planner import plan

    return plan(parse_args([str(a) for a in args]))


TIGHT = ("-p", 8, "-b", 32, "--seq", 2048, "--device", "h100", "--device-memory", "0.6", "--headroom", "0")


def test_a_real_device_searches_recomputation_zero_and_stages(tmp_path):
    """A memory the plan as built cannot meet: nothing searched fails (and
    says what would fit); by default on the device, a plan fits, at least
    as fast as each search asked for by flags."""
    model = tiny_llama(tmp_path, 4)
    fixed = run_cli("-g", model, *TIGHT, "--recompute", "none", "--zero", "0", "--pp", "1", ok=False)
    assert fixed.returncode == 1 and "no strategy fits" in fixed.stderr
    line = not_progress(fixed.stderr).strip()
    assert len(line.splitlines()) == 1 and "it would fit with more devices (about" in line
    assert "--recompute auto, --zero auto, --pp auto (not searched here)" in line
    default = _plan("-g", model, *TIGHT)
    r = default.result
    assert r.fits and default.settings.recompute == default.settings.zero == default.settings.pp == "auto"
    others = []  # what each search asked for by flags finds, where it finds a plan that fits
    for flags in (("--pp", "1", "--recompute", "auto", "--zero", "auto"), ("--pp", "auto"),
                  ("--pp", "1", "--microbatches", "auto")):
        try:
            others.append(_plan("-g", model, *TIGHT, *flags).result.total_cost)
        except MemoryError:
            pass
    assert others and r.total_cost <= min(others) * (1 + 1e-12)


def test_the_default_is_as_fast_as_the_plan_without_stages():
    """Llama 2 7B on 64 H100s: the plan without stages (302 ms) beats the
    best pipeline; the default, which searches both, finds it.
    The bound that skips the search without stages must hold with ZeRO
    searched: its reduce-scatter of the gradients costs less than the
    all-reduce it replaces, so an operator's cheapest is no lower bound
    until each searched option takes its cheapest value too."""
    from cost_model import build_costs

    llama = ROOT / "tests" / "data" / "families" / "llama"
    args = ("-g", llama, "-p", 64, "--device", "h100", "-b", 128)
    default, plain = _plan(*args), _plan(*args, "--pp", "1")
    assert default.result.pipeline is None
    assert default.result.total_cost == plain.result.total_cost
    assert round(default.result.step_seconds * 1e3) == 302  # 322 ms before its blocks pooled their collectives
    costed = build_costs(plain.graph, 64, plain.result.cost_model, edges=False)
    searched = plain.result.total_cost + plain.result.pooled  # the operators' own costs, the bounds' currency
    assert plain.result.pooled > 0
    assert costed.least_cost <= searched
    assert math.fsum(float(c.min()) for c in costed.node_costs) > searched  # the old bound's failure
    assert any(float(t.cost.min()) < 0 for ts in costed.tables for t in ts)


def _searched_settings(monkeypatch, *args):
    """The plan of ``args`` and, for each pipeline search it ran, the
    stage counts it was given (``None``: every one) and the least it took."""
    import pipeline_search

    calls, search = [], pipeline_search.search

    def recording(*a, **k):
        calls.append((k.get("pp_values"), k.get("least_stages", 1)))
        return search(*a, **k)

    monkeypatch.setattr(pipeline_search, "search", recording)
    return _plan(*args), calls


def test_accumulation_is_searched_only_where_the_memory_holds_the_whole_batch_back(monkeypatch):
    """By default on a device, gradient accumulation (one stage) is searched
    after the plan without stages, and only where that plan does not fit or
    the memory held it back: GPT-2 at a batch of 64 on 8 H100s has memory to
    spare (no search of accumulation, the whole batch's plan, as --pp auto
    with accumulation among its settings finds no faster); at a batch of
    2,048 on 2 devices of 6 GB nothing fits without accumulating, and the
    default finds a plan as fast as --pp auto's or faster."""
    gpt2 = ROOT / "tests" / "data" / "configs" / "gpt2"
    spare = ("-g", gpt2, "-p", 8, "-b", 64, "--device", "h100")
    r, calls = _searched_settings(monkeypatch, *spare)
    assert calls == [(None, 2)] and r.result.pipeline is None and r.result.bound.status == \
        "unconstrained optimum fits"
    auto = _plan(*spare, "--pp", "auto").result
    assert r.result.step_seconds <= auto.step_seconds * (1 + 1e-12)
    tight = ("-g", gpt2, "-p", 2, "-b", 2048, "--device", "h100", "--device-memory", 6)
    r, calls = _searched_settings(monkeypatch, *tight)
    assert calls[0] == (None, 2) and calls[-1] == ([1], 1)
    assert r.result.pipeline is not None and r.result.pipeline.pp == 1 and r.result.pipeline.m > 1
    auto = _plan(*tight, "--pp", "auto").result  # which does not try micro-batches above a stage's devices
    assert r.result.step_seconds <= auto.step_seconds


def test_accumulation_beside_a_pipeline_is_not_dropped_by_its_bounds():
    """GPT-2 at a batch of 16 on 8 devices of 3.5 GB: the whole batch does
    not beat the two-stage pipeline (7.85 ms), and accumulating two
    micro-batches beats both (7.19 ms) once the gradients' synchronisation
    hides under the last backward pass, which the search's bounds charge
    every micro-batch: the default finds it, as --pp auto does.  At 3.2 GB
    nothing fits, and the refusal names what needs least, accumulation's
    0.2646 GB, not the pipelines' 0.3036."""
    gpt2 = ROOT / "tests" / "data" / "configs" / "gpt2"
    args = ("-g", gpt2, "-p", 8, "-b", 16, "--device", "h100")
    default = _plan(*args, "--device-memory", 3.5).result
    auto = _plan(*args, "--device-memory", 3.5, "--pp", "auto").result
    assert default.pipeline.pp == 1 and default.pipeline.m == 2 and round(default.step_seconds * 1e3, 2) == 7.19
    assert default.step_seconds == auto.step_seconds
    with pytest.raises(MemoryError, match=r"with or without pipeline stages: the smallest needs at least 0\.2646 GB"):
        _plan(*args, "--device-memory", 3.2)


def test_accumulation_also_tries_fewer_larger_micro_batches():
    """Beside the plan without stages, gradient accumulation tries
    micro-batches above a stage's devices too, searched apart: GPT-2 at a
    batch of 64 on 8 devices of 5.5 GB runs fastest as two of 32 (16.8 ms;
    the whole batch, held back by the memory, 17.5 ms), and Mistral 7B at
    512 sequences of 4096 on 8 H100s keeps its 64 micro-batches of 8
    (19.2 s), which the larger ones ranked beside them had crowded out."""
    from pipeline_search import micro_candidates

    assert micro_candidates(64, 8, 1) == [1, 2, 4, 8] and micro_candidates(64, 8, 1, larger=True) == [16, 32]
    gpt2 = ("-g", ROOT / "tests" / "data" / "configs" / "gpt2", "-p", 8, "-b", 64, "--device", "h100",
            "--device-memory", 5.5)
    r = _plan(*gpt2).result
    assert (r.pipeline.pp, r.pipeline.m, r.pipeline.micro) == (1, 2, 32) and round(r.step_seconds * 1e3, 1) == 16.8
    whole = _plan(*gpt2, "--pp", 1).result
    assert whole.pipeline is None and round(whole.step_seconds * 1e3, 1) == 17.5
    r = _plan("-g", ROOT / "tests" / "data" / "configs" / "mistral-7b", "-p", 8, "-b", 512, "--seq", 4096,
              "--device", "h100").result
    assert (r.pipeline.pp, r.pipeline.m) == (1, 64) and round(r.step_seconds, 1) == 19.2


def test_the_papers_setting_keeps_its_defaults():
    """No device preset, no cluster file: nothing is searched the flags do
    not ask for, a capacity from --device-memory included."""
    for args in (("-g", "transformer", "-p", 16), ("-g", "alexnet", "-p", 8, "--device-memory", "100"),
                 ("-g", "alexnet", "-p", 8, "--device", "paper", "--device-memory", "100")):
        planned = _plan(*args)
        s = planned.settings
        assert (s.recompute, s.zero, s.pp) == (None, None, None)
        assert planned.result.pipeline is None and not any(layer.decision.options for layer in planned.result.layers)


def test_a_flag_fixes_what_it_gives(tmp_path):
    model = tiny_llama(tmp_path, 4)
    planned = _plan("-g", model, "-p", 8, "-b", 32, "--seq", 2048, "--device", "h100", "--zero", "0", "--pp", "1")
    s = planned.settings
    assert s.recompute == "auto" and str(s.zero) == "0" and s.pp == 1
    assert planned.result.pipeline is None
    assert not any(dict(layer.decision.options).get("zero") for layer in planned.result.layers)


def test_a_cluster_file_with_a_capacity_is_a_real_device(tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text('device = "h100"\ndevice_memory = 80\n')
    planned = _plan("-g", tiny_llama(tmp_path, 4), "-p", 8, "-b", 32, "--seq", 2048, "--cluster", cluster)
    assert planned.settings.pp == "auto"
    bare = tmp_path / "bare.toml"
    bare.write_text("flops = 10\n")
    assert _plan("-g", "alexnet", "-p", 4, "--cluster", bare).settings.pp is None


def test_nothing_fits_with_everything_searched_says_more_devices(tmp_path):
    proc = run_cli("-g", tiny_llama(tmp_path, 4), "-p", 8, "-b", 32, "--seq", 2048, "--device", "h100",
                   "--device-memory", "0.02", "--headroom", "0", ok=False)
    line = not_progress(proc.stderr).strip()
    assert proc.returncode == 1 and len(line.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "no plan fits in 0.02 GB per device with or without pipeline stages: the smallest needs at least" in line
    assert "more devices (about" in line and "not searched here" not in line


def test_standard_search_refuses_an_impossible_memory_from_its_bound():
    """Llama 3 8B on 64 H100s cannot keep its states in 2 GB a device: the
    bound says so before any configuration is costed."""
    proc = run_cli("-g", LLAMA8B, "-p", 64, "--device", "h100", "--device-memory", 5, "--search", "standard",
                   ok=False)
    line = not_progress(proc.stderr).strip()
    assert proc.returncode == 1 and len(line.splitlines()) == 1
    assert "no standard configuration fits in 2 GB per device: the smallest needs at least 2.008 GB" in line
    assert "more devices (about" in line


@pytest.mark.parametrize("args, named", [
    (("-g", LLAMA8B, "-p", 8), True),
    (("-g", ROOT / "tests" / "data" / "onnx" / "hf-gpt2-dynamo.onnx", "-p", 8, "--seq", 128), True),
    (("-g", ROOT / "tests" / "data" / "configs" / "gpt2", "-p", 8, "--device", "h100", "--pp", "1"), False),
    (("-g", "transformer", "-p", 8), False),
])
def test_a_model_file_on_the_papers_machine_says_so(args, named):
    out = run_cli(*args, "-q").stdout
    head = out.splitlines()[:4]
    assert any(line.startswith("On the PaSE paper's machine (10 TFLOPS, 16 GB/s, fp64): give --device")
               for line in head) == named, head


# -- progress ----------------------------------------------------------------------------------------

def test_progress_off_a_terminal_is_one_line_per_step():
    from cli.progress import LINE, Progress

    out = io.StringIO()
    bar = Progress("searching", "operators", stream=out, after=0.0)
    for i in range(1, 453):
        bar(i, 452)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and LINE.match(lines[0]) and lines[0].startswith("scheduler.py: searching: 452 operators in")
    quick = io.StringIO()
    bar = Progress("searching", "operators", stream=quick, after=60.0)
    bar(1, 1)
    bar.close()
    assert quick.getvalue() == ""  # a step shorter than the threshold shows nothing


def test_no_progress_line_for_a_step_an_error_ends():
    from cli.progress import Progress

    out = io.StringIO()
    with pytest.raises(ValueError):
        bar = Progress("searching", "operators", stream=out, after=0.0)
        try:
            bar(1, 2)
            raise ValueError("the error's own line says it")
        finally:
            bar.close()
    assert out.getvalue() == ""


def test_progress_lines_on_stderr_and_none_with_q():
    args = ("-g", "transformer", "-p", 256)
    full = run_cli(*args)
    assert all(line.startswith("scheduler.py: ") for line in full.stderr.splitlines())  # progress lines only
    quiet = run_cli(*args, "-q")
    assert quiet.stderr == ""


def test_a_refusal_accounts_for_the_headroom(tmp_path):
    """The capacity a refusal names is the device's memory less the
    headroom: the message says so when a headroom is kept, and not when
    none is."""
    model = tiny_llama(tmp_path, 4)
    fixed = ("-g", model, "-p", 8, "-b", 32, "--seq", 2048, "--device", "h100", "--recompute", "none", "--zero", "0",
             "--pp", "1")
    kept = run_cli(*fixed, "--device-memory", "1.6", "--headroom", "1", ok=False)
    line = not_progress(kept.stderr).strip()
    assert kept.returncode == 1 and len(line.splitlines()) == 1
    assert "fits in 0.6 GB per device" in line
    assert line.endswith("; 0.6 GB is the device's 1.6 GB less 1 GB of headroom (--headroom)")
    none = run_cli(*fixed, "--device-memory", "0.6", "--headroom", "0", ok=False)
    assert none.returncode == 1 and "headroom" not in none.stderr


@pytest.mark.parametrize("args, blamed", [
    (("--device", "h100", "--device-memory", "2"),
     "--device-memory (2 GB) must exceed the h100's headroom of 3 GB, which the plan leaves free; "
     "give a smaller --headroom"),
    (("--device", "h100", "--device-memory", "2", "--headroom", "3"),
     "--headroom (3 GB) must be less than the device memory (2 GB)"),
    (("--framework", "megatron", "--device-memory", "1"),
     "--device-memory (1 GB) must exceed the 1.25 GB Megatron-LM holds outside its tensors (the CUDA context and "
     "NCCL's buffers)"),
])
def test_a_device_memory_below_the_headroom_blames_the_flag_given(args, blamed):
    """A --device-memory no larger than the headroom the device preset (or
    the framework's memory outside its tensors) keeps is refused in one
    line naming the flag the user gave, not a --headroom nobody typed; an
    explicit --headroom too large is still named as such."""
    out = run_cli("-g", "resnet101", "-p", 8, *args, ok=False)
    assert out.returncode == 2
    assert not_progress(out.stderr).strip() == f"scheduler.py: error: {blamed}"


def test_a_plan_without_stages_too_large_to_search_is_said():
    """Where the default search's plan without stages is too large for the
    breadth-first search (--algo 1 on ShuffleNet: 346 GB tables), the
    pipeline it returns instead says so, and what may search it, rather
    than pass for the best plan."""
    import onnx

    model = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_shufflenet.onnx")
    out = run_cli("-g", model, "-p", 16, "--device", "h100", "--algo", 1, "-q").stdout
    said = [line for line in out.splitlines() if line.startswith("The plan without stages was not searched (the "
                                                                 "search needs ")]
    assert len(said) == 1
    assert said[0].endswith("this is the best of the pipelines and micro-batches searched (--algo 0, or a larger "
                            "--mem-limit, may search it).")
    assert "Gradient accumulation: " in out or "Pipeline: " in out
    plain = run_cli("-g", model, "-p", 16, "--device", "h100", "-q").stdout
    assert "not searched" not in plain
