"""A drawing's data from a planned run (:class:`planner.Planned`): the
title, the timelines (:mod:`drawing.schedule`), the memory per device as
stacked bars, the step time's parts beside the baselines', and the
layers' splits.  Every figure is read from the result; nothing is costed
again.

* **Memory**: a bar per stage (one for a plan without stages), its parts
  the report's: weights, gradients, optimizer state, the activations of
  the micro-batches the stage keeps, and the transients of its largest
  block; then any named extra part the result reports (``memory_extras``:
  ``(name, bytes)`` pairs per device, a framework's reserve; none by
  default).  Each bar sums to the memory the report gives for that stage.
  The baselines of ``--compare`` add a bar each (their peak device); the
  per-operator optimum beside a standard configuration a bar per stage.
* **Step time**: compute, exposed communication, the bubble and the
  gradients' reduction, as the report splits the step (the slowest stage's
  critical path for a pipeline): they sum to the predicted step time.
* **Splits**: a row per operator in the report's order, with the stage
  (or stages) it runs on; a run of blocks alike (the same operators with
  the same splits and options, in whichever stages) is drawn once with its
  count.
"""

from __future__ import annotations

import numpy as np

from drawing.records import Bar, Figure, Group, Part, Row, Splits
from drawing.schedule import timeline

__all__ = ["figure", "memory_bars", "time_parts", "splits", "MEMORY_PARTS", "TIME_PARTS", "LONGEST_BLOCK"]

#: the memory parts every bar has, in stacking order (extra named parts follow)
MEMORY_PARTS = ("weights", "gradients", "optimizer state", "activations", "transients")
#: the parts of a step's time, in stacking order
TIME_PARTS = ("compute", "exposed communication", "waiting on the host", "bubble", "gradient reduction")
LONGEST_BLOCK = 120  # the most operators a block drawn once may hold
MOST_ROWS = 150  # the most lines of splits: beyond, operators alike one after the other share a line


def _extras(*holders) -> tuple[Part, ...]:
    """The named extra memory parts the first holder that has some reports."""
    for h in holders:
        extra = tuple(getattr(h, "memory_extras", None) or ())
        if extra:
            return tuple(Part(str(name), float(value)) for name, value in extra)
    return ()


def _parts(memory, in_flight: float, transient: float, extras) -> tuple[Part, ...]:
    kept = (memory[0], memory[1], memory[2], in_flight * memory[3], transient)
    return tuple(Part(n, float(x)) for n, x in zip(MEMORY_PARTS, kept)) + tuple(extras)


def memory_bars(result, group: str, named: bool = False) -> list[Bar]:
    """A bar per stage of ``result`` (one, labelled ``group``, without
    stages; ``named``: a stage's label names ``group`` too)."""
    pipe = result.pipeline
    if pipe is None:
        return [Bar(group, group, _parts(result.memory, 1.0, result.transient, _extras(result)))]
    return [Bar(f"{group}\nstage {s.index}" if named else f"stage {s.index}", group,
                _parts(s.result.memory, s.in_flight, s.result.transient, _extras(s.result, result)))
            for s in pipe.stages]


def _peak_bar(result) -> Bar:
    """The bar of ``result``'s fullest device (a baseline's)."""
    pipe = result.pipeline
    if pipe is None:
        return Bar(result.title, "baselines", memory_bars(result, "baselines")[0].parts)
    s = pipe.peak_stage
    return Bar(result.title, "baselines", _parts(s.result.memory, s.in_flight, s.result.transient,
                                                 _extras(s.result, result)))


def time_parts(result) -> tuple[Part, ...]:
    """The step's predicted seconds by part (see the module docstring), as
    the report splits them (:func:`report.step_parts`); without stages, no
    bubble nor separate reduction."""
    from report import step_parts

    cl = result.cost_model.cluster
    return tuple(Part(name, cl.seconds(x)) for name, x in step_parts(result))


# -- splits -----------------------------------------------------------------------------


def _repeats(keys: np.ndarray, longest: int) -> np.ndarray:
    """``counts[i, L]``: how many blocks of ``L`` operators alike follow
    one another from operator ``i`` on (0 where fewer than two), for each
    period ``L`` from 2 to ``longest``."""
    n = len(keys)
    counts = np.zeros((n, max(2, min(longest, n // 2) + 1)), dtype=np.int32)
    for L in range(2, counts.shape[1]):
        same = keys[:-L] == keys[L:]  # operator i equals operator i + L
        where = np.where(same, len(same), np.arange(len(same)))  # the next mismatch from each position
        run = np.minimum.accumulate(where[::-1])[::-1] - np.arange(len(same))
        count = 1 + run // L
        counts[:len(same), L] = np.where(count >= 2, count, 0)
    return counts


def _blocks(keys: np.ndarray, starts=None, longest: int = LONGEST_BLOCK) -> list[tuple[int, int, int]]:
    """The operators ``0 .. n-1`` as ``(start, period, count)`` runs: blocks
    of ``period`` operators alike ``count`` times, or single operators
    (period 1), in the fewest lines (a run drawn once takes its heading
    and a row per operator of a block; a single operator a row); among
    as few, runs that begin where ``starts[i]`` says a block of the model
    begins."""
    counts = _repeats(keys, longest)
    n = len(keys)
    lines = [0.0] * (n + 1)  # lines[i]: the fewest lines for the operators from i on
    choice = [(1, 1)] * (n + 1)
    for i in range(n - 1, -1, -1):
        lines[i], choice[i] = 1 + lines[i + 1], (1, 1)
        off = 0.0 if starts is None or starts[i] else 1e-3  # a run beginning inside a block: the last resort
        for L in np.flatnonzero(counts[i]).tolist():
            count = int(counts[i, L])
            if 1 + L + off + lines[i + L * count] < lines[i]:
                lines[i], choice[i] = 1 + L + off + lines[i + L * count], (L, count)
    out, i = [], 0
    while i < n:
        L, count = choice[i]
        out.append((i, L, count))
        i += L * count
    return out


def _split_ways(d) -> tuple:
    """A decision's splits of more than one way, and its options."""
    return tuple((c, w) for c, w in zip(d.dims, d.config) if w > 1), d.options


def _spans(runs, decisions, stage_of) -> list[tuple[int, int, int]]:
    """``runs`` with the single operators that follow one another split
    the same ways (the same letters, as many ways each), with the same
    options and in the same stage merged into spans ``(start, -length,
    1)``, runs of blocks alike that spans draw in fewer lines first taken
    apart into their operators."""
    ways = [_split_ways(d) for d in decisions]
    singles = []  # runs of blocks alike that spans draw in fewer lines, taken apart
    for start, period, count in runs:
        stop = start + period * count
        spans = 1 + sum(ways[v] != ways[v - 1] for v in range(start + 1, stop))
        apart = count > 1 and spans <= period  # the run takes a heading and a line per operator of a block
        singles += [(v, 1, 1) for v in range(start, stop)] if apart else [(start, period, count)]
    out: list[tuple[int, int, int]] = []
    for start, period, count in singles:
        if period == 1 and out:
            first, p, _ = out[-1]
            length = -p if p < 0 else 1 if p == 1 else 0
            if length and ways[first] == ways[start] and stage_of[first] == stage_of[start]:
                out[-1] = (first, -(length + 1), 1)
                continue
        out.append((start, period, count))
    return out


def _names(first: str, last: str) -> tuple[str, str, str]:
    """What differs between two blocks' names of one operator (their first
    path components, ``layer0`` and ``layer15``) and what they share
    (``attn/norm``); the whole names when they differ otherwise."""
    a, b = first.split("/", 1), last.split("/", 1)
    if len(a) == len(b) == 2 and a[1] == b[1]:
        return a[0], b[0], a[1]
    return first, last, first


def splits(result, plan: str = "") -> Splits:
    """The :class:`Splits` of ``result``'s layers (``plan``: whose)."""
    layers = result.layers
    names = [layer.name for layer in layers]
    stage_of = [0] * len(layers)
    if result.pipeline is not None:
        for s in result.pipeline.stages:
            for v in s.nodes:
                stage_of[v] = s.index
    index: dict = {}
    keys = np.array([index.setdefault((layer.kind, layer.space, layer.decision), len(index)) for layer in layers],
                    dtype=np.int64)
    first = [name.split("/", 1)[0] for name in names]  # a block of a named model: layer3/...
    starts = [i == 0 or first[i] != first[i - 1] for i in range(len(names))]
    runs = _blocks(keys, starts)
    if sum(period + (count > 1) for _, period, count in runs) > MOST_ROWS:
        runs = _spans(runs, [layer.decision for layer in layers], stage_of)
    rows, blocks = [], []
    for start, period, count in runs:
        if period < 0:  # a span: -period operators alike in splits and options, one after the other
            ids = tuple(range(start, start - period))
            kinds = sorted({layers[v].kind for v in ids})
            ways, options = _split_ways(layers[start].decision)
            rows.append(Row(f"{names[start]} .. {names[ids[-1]]}", kinds[0] if len(kinds) == 1 else
                            f"{len(kinds)} kinds", ids, ways, options, tuple(sorted({stage_of[v] for v in ids})),
                            span=True))
            continue
        if count > 1:
            a, _, _ = _names(names[start], names[start + (count - 1) * period])
            _, b, _ = _names(names[start + period - 1], names[start + count * period - 1])
            title = (f"{a} .. {b}: {count} blocks alike, drawn once" if a != names[start] else
                     f"operators {start} .. {start + count * period - 1}: {count} blocks of {period} alike, "
                     "drawn once")
            blocks.append(Group(title, len(rows), len(rows) + period - 1, blocks=count))
        for j in range(period):
            ids = tuple(start + j + k * period for k in range(count))
            layer = layers[ids[0]]
            label = _names(names[ids[0]], names[ids[-1]])[2] if count > 1 else names[ids[0]]
            d = layer.decision
            rows.append(Row(label, layer.kind, ids, tuple(zip(d.dims, d.config)), tuple(d.options),
                            tuple(sorted({stage_of[v] for v in ids}))))
    hidden = 0
    if len(rows) + len(blocks) > MOST_ROWS:  # still too many: the first lines, whole runs, and what is left out
        heads = {g.first: g for g in blocks}
        lines = keep = 0
        while keep < len(rows):
            g = heads.get(keep)
            size = g.last - g.first + 1 if g is not None else 1
            if lines + size + (g is not None) > MOST_ROWS:
                break
            lines, keep = lines + size + (g is not None), keep + size
        hidden = sum(len(row.ids) for row in rows[keep:])
        rows, blocks = rows[:keep], [g for g in blocks if g.last < keep]
    letters: list[str] = []
    for row in rows:
        for letter, ways in row.splits:
            if ways > 1 and letter not in letters:
                letters.append(letter)
    letters = sorted(letters, key=lambda c: (c != "b", letters.index(c)))
    options = sorted({k for row in rows for k, _ in row.options})
    return Splits(tuple(rows), tuple(blocks), tuple(letters), tuple(options), result.pipeline is not None, plan,
                  hidden)


# -- the figure -------------------------------------------------------------------------


def _plan_name(r) -> str:
    if r.label.startswith("standard configuration"):
        return r.label
    if r.key == "per_operator":
        return "per-operator optimum"
    if r.source is not None:
        return f"plan read from {r.source}"
    return "PaSE plan" if r.mode == "search" else "this plan"


def _short(r) -> str:
    """A plan's name on a bar."""
    if r.label.startswith("standard configuration"):
        return "standard"
    return r.title or ("PaSE" if r.mode == "search" else "this plan")


def _title(result) -> tuple[str, str]:
    from report import fmt_bytes, fmt_time

    cl = result.cost_model.cluster
    device = cl.device or f"{cl.flops:g}-TFLOPS device"
    title = (f"{result.graph} on {result.procs} x {device}: predicted step {fmt_time(result.step_seconds)} "
             f"({_plan_name(result)})")
    pipe = result.pipeline
    what = []
    if pipe is not None:
        q = pipe.stages[0].devices
        share = f" ({pipe.micro // pipe.replicas} per replica)" if pipe.replicas > 1 else ""
        what.append(f"{pipe.pp} stage{'s' * (pipe.pp > 1)} of {q} device{'s' * (q > 1)}, {pipe.m} "
                    f"micro-batch{'es' * (pipe.m > 1)} of {pipe.micro}{share}, {pipe.schedule}, "
                    f"bubble {100 * pipe.bubble:.1f}%")
    else:
        what.append("no pipeline stages")
    memory = f"peak memory {fmt_bytes(result.memory_bytes)} per device"
    if result.capacity is not None:
        memory += f" of {fmt_bytes(result.capacity)}"
    what.append(memory)
    if result.mfu is not None:
        what.append(f"MFU {100 * result.mfu:.1f}%")
    return title, "; ".join(what)


def figure(planned) -> Figure:
    """The :class:`records.Figure` of a planned run."""
    result = planned.result
    optimum = result.baseline("per_operator")
    timelines = [timeline(result, _plan_name(result))]
    if optimum is not None:
        timelines.append(timeline(optimum, _plan_name(optimum)))
    bars = memory_bars(result, _short(result), named=optimum is not None)
    if optimum is not None:
        bars += memory_bars(optimum, _short(optimum), named=True)
    bars += [_peak_bar(b) for b in result.baselines if b.key != "per_operator"]
    times = [Bar(_short(result), "plan", time_parts(result))]
    times += [Bar(_short(b), "baselines", time_parts(b)) for b in result.baselines]
    title, subtitle = _title(result)
    cl = result.cost_model.cluster
    return Figure(title, subtitle, tuple(timelines), tuple(bars), result.capacity,
                  None if cl.device_memory is None else cl.device_memory * 1e9, tuple(times),
                  (splits(result, "standard configuration" if optimum is not None else ""),)
                  + ((splits(optimum, "per-operator optimum"),) if optimum is not None else ()))

