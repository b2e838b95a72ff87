"""A plan's drawing checked from its data (drawing/): the timeline is the
priced schedule (one lane per stage, as long as the predicted step, the
schedule's order, the reported bubble and reductions), the memory bars sum
to the reported memory, the step's parts to the step time, the splits'
rows stand for the report's rows; and the picture's labels never overlap,
for a built-in network, a Llama config with stages, an MoE config, and
a 126-layer model."""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass, fields
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT

from drawing import figure
from drawing.figure import MEMORY_PARTS, TIME_PARTS, memory_bars, time_parts
from drawing.schedule import _schedule_run, order, place
from pipeline import Schedule
from result import Result

LLAMA = str(ROOT / "tests/data/configs/llama3-8b")
MIXTRAL = str(ROOT / "tests/data/configs/mixtral-8x7b")
QWEN3_MOE = str(ROOT / "tests/data/families/qwen3_moe")

CASES = {
    "transformer": dict(graph="transformer", procs=8, compare=True),  # the paper's model, no stages, baselines
    "llama-1f1b": dict(graph=LLAMA, device="h100", pp=2),
    "llama-gpipe": dict(graph=LLAMA, device="h100", pp=4, schedule="gpipe"),
    "mixtral": dict(graph=MIXTRAL, device="h100", procs=64, pp=4),  # its schedule found by the search (1f1b)
    # dropless expert layers waiting on the host's launches (frameworks/host.py): one micro-batch, and stages
    "qwen3-moe-megatron": dict(graph=QWEN3_MOE, device="h100", procs=8, batch=8, seq=1024, framework="megatron",
                               plan="dp=8,ep=8"),
    "qwen3-moe-megatron-pp": dict(graph=QWEN3_MOE, device="h100", procs=8, batch=16, seq=1024, framework="megatron",
                                  plan="dp=4,ep=4,pp=2,microbatch=1"),
}


STAGED = [c for c in CASES if c not in ("transformer", "qwen3-moe-megatron")]  # the cases with pipeline stages


@lru_cache(maxsize=None)
def planned(case: str):
    from planner import plan
    from settings import Settings

    return plan(Settings(**CASES[case]))


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-15)


# -- the timeline ------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_one_lane_per_stage_as_long_as_the_step(case):
    r = planned(case).result
    tl = figure(planned(case)).timelines[0]
    pipe = r.pipeline
    assert len(tl.lanes) == (pipe.pp if pipe is not None else 1)
    assert tl.step == r.step_seconds
    assert close(tl.length, r.step_seconds)
    for lane in tl.lanes:  # a stage runs one thing at a time
        main = sorted((b for b in lane.boxes if b.kind != "reduction overlapped"), key=lambda b: b.start)
        assert all(a.end <= b.start * (1 + 1e-12) + 1e-15 for a, b in zip(main, main[1:]))


def test_an_interleaved_last_stage_sends_from_each_chunk_but_its_last():
    """Under interleaved:2 on two stages every chunk of the first stage
    sends on, and the last stage's first chunk sends to the first stage's
    second: each box's send is its stage's point-to-point time over its
    sending boxes; the last stage's last chunk sends nothing."""
    from planner import plan
    from settings import Settings

    p = plan(Settings(graph=LLAMA, device="h100", pp=2, schedule="interleaved:2"))
    pipe, cl = p.result.pipeline, p.result.cost_model.cluster
    lanes = figure(p).timelines[0].lanes
    for stage, lane in zip(pipe.stages, lanes):
        boxes = [b for b in lane.boxes if b.kind in ("forward", "backward")]
        sending = 2 if stage.index == 0 else 1  # chunks that send, each forward and back
        assert stage.p2p > 0
        for b in boxes:
            expect = 0.0 if stage.index == 1 and b.chunk == 1 else cl.seconds(stage.p2p) / (2 * sending)
            assert close(b.send, min(expect, b.end - b.start))


@pytest.mark.parametrize("case", STAGED)
def test_every_micro_batch_runs_forward_then_backward_in_the_schedules_order(case):
    r = planned(case).result
    pipe, cl = r.pipeline, r.cost_model.cluster
    tl = figure(planned(case)).timelines[0]
    assert tl.schedule == str(pipe.schedule) and tl.micro_batches == pipe.m
    v, pp, m = pipe.schedule.v, pipe.pp, pipe.m
    ops = {}
    for i, (lane, s) in enumerate(zip(tl.lanes, pipe.stages)):
        passes = [b for b in lane.boxes if b.kind in ("forward", "backward")]
        assert len(passes) == 2 * m * v  # each micro-batch's chunks, forward and backward, once
        t = cl.seconds(s.time)
        for b in passes:
            ops[(b.kind, b.micro, b.chunk * pp + i)] = b
            assert close(b.length, t / v * (2 / 3 if b.kind == "backward" else 1 / 3))
        # the schedule's order on this stage
        got = [(b.kind[0].upper(), b.micro, b.chunk) for b in sorted(passes, key=lambda b: b.start)]
        assert got == order(pipe.schedule.name, i, pp, m, v)
    last = pp * v - 1
    for (kind, k, s), b in ops.items():  # each pass starts once its input is there
        src = ("forward", k, s - 1) if kind == "forward" and s else ("forward", k, s) if s == last else \
            ("backward", k, s + 1) if kind == "backward" else None
        if src is not None:
            assert ops[src].end <= b.start * (1 + 1e-12) + 1e-15


@pytest.mark.parametrize("case", STAGED)
def test_the_slowest_stage_idles_for_the_reported_bubble_and_the_reductions_end_the_step(case):
    r = planned(case).result
    pipe, cl = r.pipeline, r.cost_model.cluster
    tl = figure(planned(case)).timelines[0]
    slow = max(pipe.stages, key=lambda s: s.time)
    assert tl.slowest == slow.index and tl.bubble == pipe.bubble
    assert close(tl.idle(slow.index), cl.seconds(pipe.bubble * pipe.m * slow.time), 1e-7)
    assert close(tl.run, cl.seconds(pipe.step - pipe.sync))
    ends = []
    for lane, s in zip(tl.lanes, pipe.stages):
        reduction = [b for b in lane.boxes if b.kind.startswith("reduction")]
        assert close(sum(b.length for b in reduction), cl.seconds(s.sync))  # the whole reduction, drawn
        hidden = [b for b in reduction if b.kind == "reduction overlapped"]
        assert all(close(b.end, tl.run) for b in hidden)  # under the last backward pass
        ends.append(max(b.end for b in reduction))
    assert close(max(ends), r.step_seconds)  # the slowest reduction ends the step


def test_a_plan_without_stages_is_one_lane_of_compute_and_communication():
    r = planned("transformer").result
    cl = r.cost_model.cluster
    (lane,) = figure(planned("transformer")).timelines[0].lanes
    assert lane.devices == (0, r.procs - 1)
    kinds = {b.kind: b.length for b in lane.boxes}
    assert close(kinds["forward"] + kinds["backward"], cl.seconds(r.compute))
    assert close(kinds["communication"], cl.seconds(r.communication))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.sampled_from(["gpipe", "1f1b", "interleaved"]), st.integers(2, 3),
       st.integers(0, 10**6))
def test_any_schedule_is_placed_to_end_at_its_priced_time(pp, k, name, v, seed):
    rng = random.Random(seed)
    t = [rng.uniform(0.2, 3.0) for _ in range(pp)]  # stages unequal: the closed form is then no simulation's
    v = v if name == "interleaved" else 1
    m = k * pp if name == "interleaved" else k * pp + rng.randint(0, pp)  # interleaved: a multiple of the stages
    target = Schedule(name, v).time(t, m)
    times, interval, note = _schedule_run(name, t, m, v, target)
    assert note == ""
    assert close(max(e for _, e in times.values()), target)
    assert interval >= 0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.sampled_from(["gpipe", "1f1b", "interleaved"]))
def test_the_order_keeps_the_micro_batches_the_memory_model_counts(pp, m, name):
    """What a stage holds at most, in the order drawn, is what
    ``Schedule.in_flight`` prices its activations for."""
    v = 2 if name == "interleaved" else 1
    if name == "interleaved":
        m = pp * max(1, m // pp)
    sched = Schedule(name, v)
    for i in range(pp):
        held, most = 0, 0
        for kind, _, _ in order(name, i, pp, m, v):
            held += 1 if kind == "F" else -1
            most = max(most, held)
        assert most / v == sched.in_flight(i, pp, m)


@pytest.mark.parametrize("pp, m, v", [(4, 1, 2), (4, 2, 2), (4, 3, 2), (4, 2, 4), (8, 4, 2), (4, 4, 2), (4, 8, 3)])
def test_an_interleaved_pipeline_drawn_ends_when_predicted(pp, m, v):
    """Placed in Megatron-LM's interleaved order, the schedule ends when the
    closed form says: with the micro-batches in groups of the stages, and
    with fewer micro-batches than stages (each runs through every stage in
    turn: the formula's bound)."""
    t = [1.0] * pp
    priced = Schedule("interleaved", v).time(t, m)
    times, _, note = _schedule_run("interleaved", t, m, v, priced)
    assert max(e for _, e in times.values()) == pytest.approx(priced, rel=1e-9) and note == ""


def test_an_interleaved_pipeline_of_micro_batches_not_in_groups_of_the_stages_says_it_runs_longer():
    t = [1.0] * 4
    priced = Schedule("interleaved", 2).time(t, 6)
    times, _, note = _schedule_run("interleaved", t, 6, 2, priced)
    end = max(e for _, e in times.values())
    assert end > priced
    assert note.startswith("6 micro-batches on 4 stages") and f"{100 * (end / priced - 1):.1f}% longer" in note


def test_orders_that_wait_on_each_other_are_found():
    durations = [{"F": 1.0, "B": 2.0}] * 2
    assert place([[("B", 0, 0), ("F", 0, 0)], [("F", 0, 0), ("B", 0, 0)]], durations) is None


# -- memory and time ---------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_memory_bars_sum_to_the_reported_memory(case):
    r = planned(case).result
    fig = figure(planned(case))
    mine = [b for b in fig.memory if b.group != "baselines"]
    if r.pipeline is None:
        (bar,) = mine
        assert close(bar.total, r.memory_bytes)
    else:
        assert [b.label for b in mine] == [f"stage {s.index}" for s in r.pipeline.stages]
        for bar, s in zip(mine, r.pipeline.stages):
            assert close(bar.total, s.memory)
            assert [bar.part(n) for n in MEMORY_PARTS[:3]] == list(s.result.memory[:3])
            assert close(bar.part("activations"), s.in_flight * s.result.memory[3])
            assert bar.part("transients") == s.result.transient
        assert close(max(b.total for b in mine), r.memory_bytes)
    for bar in mine:
        assert tuple(p.name for p in bar.parts) == MEMORY_PARTS  # no extra part unless the result has one
    others = [b for b in fig.memory if b.group == "baselines"]
    assert [b.label for b in others] == [b.title for b in r.baselines]
    for bar, b in zip(others, r.baselines):
        assert close(bar.total, b.memory_bytes)
    assert fig.capacity == r.capacity


def _reported_parts(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith("Predicted step time"))
    return re.findall(r"(compute|exposed communication|communication|waiting on the host's launches|bubble|"
                      r"gradient synchronisation) ([0-9.]+ \w+)", line)


@pytest.mark.parametrize("case", CASES)
def test_the_steps_parts_sum_to_the_step_time_and_are_the_reports(case):
    from report import fmt_time, render_text

    r = planned(case).result
    fig = figure(planned(case))
    assert [b.label for b in fig.times[1:]] == [b.title for b in r.baselines]
    for bar, rec in zip(fig.times, (r,) + r.baselines):
        assert close(bar.total, rec.step_seconds)
        assert all(p.value >= -1e-12 for p in bar.parts)
        names = [p.name for p in bar.parts]  # in TIME_PARTS' order, the host's wait only where there is one
        assert names == [n for n in TIME_PARTS if n in names] and set(names) >= {"compute", "exposed communication"}
        assert ("waiting on the host" in names) == (rec.host > 0 or any(s.host > 0 for s in (
            rec.pipeline.stages if rec.pipeline is not None else ())))
    shown = dict(_reported_parts(render_text(r)))
    names = {"compute": "compute", "exposed communication": "exposed communication", "bubble": "bubble",
             "gradient reduction": "gradient synchronisation", "waiting on the host": "waiting on the host's launches"}
    for p in time_parts(r):
        key = names[p.name] if names[p.name] in shown else "communication"
        assert shown[key] == fmt_time(p.value)


def test_extra_memory_parts_the_result_reports_are_stacked_and_drawn():
    """A result that reports more memory than its tensors (a framework's
    reserve) gets that part on its bars, and the picture says its name."""
    from drawing.render import page

    @dataclass(frozen=True)
    class Reserved(Result):
        memory_extras: tuple = ()

    p = planned("llama-1f1b")
    r = p.result
    reserved = Reserved(**{f.name: getattr(r, f.name) for f in fields(Result)},
                        memory_extras=(("framework reserve", 1.5e9),))
    bars = memory_bars(reserved, "plan")
    assert [b.parts[-1].name for b in bars] == ["framework reserve"] * len(bars)
    assert all(close(b.total, s.memory + 1.5e9) for b, s in zip(bars, r.pipeline.stages))
    fig = figure(p._replace(result=reserved))
    drawn = {t.get_text() for t in page(fig).findobj(lambda a: hasattr(a, "get_text"))}
    assert "framework reserve" in drawn


# -- the splits --------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_the_rows_stand_for_the_reports_rows(case):
    r = planned(case).result
    sp = figure(planned(case)).splits[0]
    ids = sorted(v for row in sp.rows for v in row.ids)
    assert ids == [layer.id for layer in r.layers] == list(range(len(r.layers)))  # each operator once
    rows_alike(r, sp)
    assert len(sp.rows) < len(r.layers) / 3  # the repeated blocks drawn once
    for g in sp.blocks:
        assert {sp.rows[i].count for i in range(g.first, g.last + 1)} == {g.blocks}
    split = {c for row in sp.rows for c, w in row.splits if w > 1}
    assert set(sp.letters) == split


def rows_alike(r, sp) -> None:
    """Each row says what the report says of each operator it stands for."""
    stage = {v: s.index for s in r.pipeline.stages for v in s.nodes} if r.pipeline is not None else {}
    for row in sp.rows:
        for v in row.ids:
            layer = r.layers[v]
            splits = tuple(zip(layer.dims, layer.config))
            if row.span:  # operators one after the other split the same ways: those splits
                splits = tuple((c, w) for c, w in splits if w > 1)
            assert (row.splits, row.options) == (splits, layer.decision.options)
            assert row.kind == layer.kind or row.span
            assert stage.get(v, 0) in row.stages
        if row.span:
            assert row.ids == tuple(range(row.ids[0], row.ids[-1] + 1))


def test_a_long_graph_without_blocks_shares_lines_among_operators_alike():
    from drawing.figure import MOST_ROWS
    from planner import plan
    from settings import Settings

    r = plan(Settings(graph="inception3", procs=8)).result
    fig = figure(plan(Settings(graph="inception3", procs=8)))
    sp = fig.splits[0]
    assert sorted(v for row in sp.rows for v in row.ids) == list(range(len(r.layers))) and sp.hidden == 0
    rows_alike(r, sp)
    assert any(row.span for row in sp.rows) and len(sp.rows) + len(sp.blocks) <= MOST_ROWS
    assert overlapping(fig) == []


def test_past_the_most_lines_the_first_are_drawn_and_the_rest_counted():
    from dataclasses import replace
    from types import SimpleNamespace

    from config_space import Decision
    from drawing.figure import MOST_ROWS, splits

    base = planned("transformer").result.layers
    rng = random.Random(7)
    layers = []
    for k in range(600):  # operators with no run of blocks alike and few neighbours alike
        layer = base[rng.randrange(len(base))]
        config = tuple(rng.choice([1, 2]) if c > 1 or d == "b" else 1 for d, c in zip(layer.dims, layer.space))
        layers.append(replace(layer, id=k, name=f"op{k}", decision=Decision(layer.dims, config)))
    sp = splits(SimpleNamespace(layers=tuple(layers), pipeline=None))
    shown = sorted(v for row in sp.rows for v in row.ids)
    assert sp.hidden > 0 and shown == list(range(len(shown))) and len(shown) + sp.hidden == 600
    assert len(sp.rows) + len(sp.blocks) <= MOST_ROWS
    assert all(g.last < len(sp.rows) for g in sp.blocks)


@pytest.mark.parametrize("layers, p, pp", [(80, 64, 4), (126, 128, 8)])
def test_a_deep_stack_is_drawn_without_overlapping_labels(tmp_path, layers, p, pp):
    from planner import plan
    from settings import Settings

    config = json.loads((ROOT / "tests/data/configs/llama3-8b/config.json").read_text())
    config["num_hidden_layers"] = layers
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "config.json").write_text(json.dumps(config))
    fig = figure(plan(Settings(graph=str(tmp_path / "deep"), device="h100", procs=p, pp=pp)))
    assert len(fig.timelines[0].lanes) == pp
    rows = fig.splits[0].rows
    assert sum(row.count for row in rows) == 12 * layers + 4  # every operator, in
    assert len(rows) <= (12 * layers + 4) / 10  # blocks alike drawn once
    assert overlapping(fig) == []


def test_the_drawing_is_the_same_whatever_the_hash_seed():
    from conftest import outputs_under_hash_seeds

    code = (f"import hashlib\nfrom planner import plan\nfrom settings import Settings\nfrom drawing import draw\n"
            f"p = plan(Settings(graph={LLAMA!r}, device='h100', pp=2, compare=True))\n"
            "print(*(hashlib.sha256(draw(p, f)).hexdigest() for f in ('png', 'svg', 'pdf')))")
    assert len(outputs_under_hash_seeds(code)) == 1


@pytest.mark.parametrize("case", CASES)
def test_no_label_overlaps_another(case):
    assert overlapping(figure(planned(case))) == []


def test_a_timelines_note_is_drawn_clear_of_the_rest():
    from dataclasses import replace

    from drawing.render import page

    fig = figure(planned("mixtral"))
    note = "32 micro-batches on 4 stages, drawn in the interleaved order, take 1.0% longer than predicted"
    fig = replace(fig, timelines=(replace(fig.timelines[0], note=note),))
    assert overlapping(fig) == []
    assert note in {t.get_text() for t in page(fig).texts}


def overlapping(fig) -> list:
    """Pairs of texts of the drawn page whose boxes overlap, and texts
    that leave the page."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from drawing.render import page

    drawn = page(fig)
    canvas = FigureCanvasAgg(drawn)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = list(drawn.texts) + [t for lg in drawn.legends for t in lg.get_texts()]
    for ax in drawn.axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label] + list(ax.texts)
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
        for axis in (ax.xaxis, ax.yaxis) if ax.axison else ():  # the ticks drawn
            lo, hi = sorted(axis.get_view_interval())
            texts += [t.label1 for t in axis.get_major_ticks() if lo - 1e-9 <= t.get_loc() <= hi + 1e-9]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_visible() and t.get_text().strip()]
    assert len(boxes) > 50
    width, height = canvas.get_width_height()
    out = [("outside the page", a) for a, p in boxes if p.x0 < 0 or p.y0 < 0 or p.x1 > width or p.y1 > height]
    for i, (a, p) in enumerate(boxes):
        for b, q in boxes[i + 1:]:
            if p.x0 < q.x1 - 0.5 and q.x0 < p.x1 - 0.5 and p.y0 < q.y1 - 0.5 and q.y0 < p.y1 - 0.5:
                out.append((a, b))
    return out
