"""A plan's step as a timeline: which stage runs which micro-batch when.

The tool prices a pipeline in closed form (``pipeline.py``: ``m * max t +
(sum t - max t) / v``, at least ``sum t + (m - 1) max t / v``, and the
gradients' reduction), not by placing
operations; this module places them, with the times the tool predicts, in
the order each schedule runs them, so that the picture is a schedule that
takes exactly the predicted time:

* each stage's micro-batch takes its predicted time ``t_i`` (its sends
  included), a third forward and two thirds backward (the share
  ``pipeline.assemble`` gives the backward pass); with ``v`` model chunks
  per device (interleaved) each chunk takes ``1 / v`` of that (also where a
  stage's chunks hold unequal blocks);
* the order on each stage is the schedule's: GPipe every forward pass, then
  every backward pass; 1F1B (Megatron-LM's) ``pp - i - 1`` forward passes
  to warm up, then one forward and one backward in turn, then the
  backward passes left; interleaved (Megatron-LM's) ``2 (pp - i - 1) +
  (v - 1) pp`` forward chunks to warm up, micro-batches taken ``pp`` at a
  time, each chunk in turn;
* an operation starts when its stage is free and its input is there (the
  previous stage's forward pass, the next stage's backward pass).

Taking micro-batches as fast as the first stage can, such a schedule may
end a little before the closed form when the stages' times differ (the
formula is Alpa's, exact for equal stages and for GPipe).  So micro-batch
``k`` enters the first stage no earlier than ``k * interval``, with the
interval for which the schedule ends exactly when the tool says: the end
of a schedule is ``max_k (k * interval + L_k)``, ``L_k`` the longest path
of operations from micro-batch ``k``'s first forward pass (a max-plus
system), so the interval is read off the ``L_k`` of one placement.  Where
no placement in the schedule's order can end in time (an interleaved
pipeline whose micro-batches are more than its stages but no multiple of
them, which the formula prices as if they were), the operations are
placed as soon as they can run and the timeline says by how much it is
longer; with fewer micro-batches than stages the formula's bound is the
schedule's end.

The gradients' reduction follows the last backward pass as the tool
prices it: on a real device its overlapped share (``--overlap`` of it, at
most the last backward pass, two thirds of ``t_i``) runs under that pass
and the rest after it; the step ends when the slowest stage's reduction
does.  A plan without stages is one lane: its forward and backward compute
and its exposed communication, in that order.
"""

from __future__ import annotations

from drawing.records import Box, Lane, Timeline
from errors import InputError
from pipeline import order

__all__ = ["timeline", "order", "place", "BACKWARD"]

MOST_BOXES = 200_000  # forward and backward passes a drawn schedule shows, one box each
BACKWARD = 2.0 / 3.0  # the backward pass's share of a micro-batch's time (as pipeline.assemble counts it)


def _chunk_major(i: int, pp: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Every forward chunk, then every backward chunk, chunk by chunk: an
    order that always runs (its dependencies go to earlier chunks)."""
    return ([("F", k, c) for c in range(v) for k in range(m)]
            + [("B", k, c) for c in reversed(range(v)) for k in range(m)])


def _input_of(op, pp: int, v: int):
    """The operation whose output ``op = (stage, kind, micro, chunk)`` reads
    (``None``: the first forward pass of a micro-batch)."""
    i, kind, k, c = op
    s = c * pp + i  # the virtual stage
    if kind == "F":
        return None if s == 0 else ((s - 1) % pp, "F", k, (s - 1) // pp)
    if s == pp * v - 1:
        return (i, "F", k, c)
    return ((s + 1) % pp, "B", k, (s + 1) // pp)


def place(orders, durations, v: int = 1, interval: float = 0.0):
    """Start and end of every operation of stages running ``orders``
    (each a list of ``(kind, micro, chunk)``), ``durations[i][kind]``
    each, micro-batch ``k`` entering no earlier than ``k * interval``:
    ``(times, done)``, ``times[op] = (start, end)``, ``done`` the
    operations in the order placed; ``None`` when the orders wait on each
    other for ever."""
    pp = len(orders)
    times, done = {}, []
    pos, free = [0] * pp, [0.0] * pp
    left = sum(len(o) for o in orders)
    while left:
        moved = False
        for i in range(pp):
            while pos[i] < len(orders[i]):
                kind, k, c = orders[i][pos[i]]
                op = (i, kind, k, c)
                src = _input_of(op, pp, v)
                if src is None:
                    ready = k * interval
                elif src in times:
                    ready = times[src][1]
                else:
                    break
                start = max(free[i], ready)
                end = start + durations[i][kind]
                times[op] = (start, end)
                done.append(op)
                free[i] = end
                pos[i] += 1
                left -= 1
                moved = True
        if not moved:
            return None
    return times, done


def _longest(times, done, orders, durations, pp: int, v: int) -> dict:
    """For each operation, the longest path of operations from its start
    to the end (its own duration included)."""
    after = {}
    for i, ops in enumerate(orders):  # the next operation on the same stage
        for a, b in zip(ops, ops[1:]):
            after.setdefault((i,) + a, []).append((i,) + b)
    for op in done:  # the operation reading its output
        src = _input_of(op, pp, v)
        if src is not None:
            after.setdefault(src, []).append(op)
    longest = {}
    for op in reversed(done):
        longest[op] = durations[op[0]][op[1]] + max((longest[n] for n in after.get(op, ())), default=0.0)
    return longest


def _schedule_run(name: str, t, m: int, v: int, target: float):
    """The placement of ``m`` micro-batches on stages of times ``t``
    (seconds per micro-batch) in schedule ``name``'s order, ending at
    ``target``: ``(times, interval, note)``."""
    pp = len(t)
    durations = [{"F": x * (1.0 - BACKWARD) / v, "B": x * BACKWARD / v} for x in t]
    orders = [order(name, i, pp, m, v) for i in range(pp)]
    placed = place(orders, durations, v)
    fallback = placed is None
    if fallback:  # an interleaved order that cannot run (micro-batches not a multiple of the stages)
        orders = [_chunk_major(i, pp, m, v) for i in range(pp)]
        placed = place(orders, durations, v)
    times, done = placed
    longest = _longest(times, done, orders, durations, pp, v)
    first = [longest[(0, "F", k, 0)] for k in range(m)]
    if max(first) >= target * (1 - 1e-12) or m == 1:
        interval = 0.0
    else:  # the latest entries that still end at target: one of them meets it exactly
        interval = min((target - first[k]) / k for k in range(1, m))
        times, _ = place(orders, durations, v, interval)
    end = max(e for _, e in times.values())
    note = ""
    if end > target * (1 + 1e-9):
        how = "chunk by chunk: the interleaved order cannot run them" if fallback else f"in the {name} order"
        note = (f"{m} micro-batches on {pp} stages, drawn {how}, take {100 * (end / target - 1):.1f}% longer than "
                "predicted (the prediction assumes the micro-batches come in groups of the stages)")
    return times, interval, note


def _reductions(pipe, model, run: float) -> list[list[Box]]:
    """Each stage's gradients' reduction after the last backward pass, as
    ``pipeline.assemble`` prices it (its overlapped share
    :func:`cost.rules.overlap_share`)."""
    from cost.rules import overlap_share

    cl = model.cluster
    out = []
    for s in pipe.stages:
        sync, t = cl.seconds(s.sync), cl.seconds(s.time)
        if cl.realistic:
            o = overlap_share(model, s.result.sharded_gradients)
            hidden = min(o * sync, BACKWARD * t)
            exposed = (1.0 - o) * sync + max(o * sync - BACKWARD * t, 0.0)
        else:
            hidden, exposed = 0.0, sync
        boxes = []
        if hidden > 0:
            boxes.append(Box("reduction overlapped", run - hidden, run))
        if exposed > 0:
            boxes.append(Box("reduction", run, run + exposed))
        out.append(boxes)
    return out


def timeline(result, name: str = "") -> Timeline:
    """The :class:`Timeline` of a :class:`result.Result`'s step."""
    cl = result.cost_model.cluster
    pipe = result.pipeline
    step = result.step_seconds
    if pipe is None:
        compute, comm = cl.seconds(result.compute), cl.seconds(result.communication)
        boxes = [Box("forward", 0.0, compute * (1.0 - BACKWARD)), Box("backward", compute * (1.0 - BACKWARD), compute)]
        if comm > 0:
            boxes.append(Box("communication", compute, compute + comm))
        if result.host > 0:  # dropless expert layers waiting on the host's launches (frameworks.host)
            boxes.append(Box("waiting on the host", compute + comm, compute + comm + cl.seconds(result.host)))
        lane = Lane("every device", (0, result.procs - 1), tuple(boxes))
        return Timeline(name, "", 1, (lane,), step, step)
    t = [cl.seconds(s.time) for s in pipe.stages]
    v, m = pipe.schedule.v, pipe.m
    if 2 * m * v * len(t) > MOST_BOXES:  # each a box of its own: a million micro-batches are not drawn one by one
        raise InputError(f"--draw: the pipeline's {m:,} micro-batches on {len(t)} stages are too many to draw "
                         f"({2 * m * v * len(t):,} passes, at most {MOST_BOXES:,}); draw a plan of fewer micro-batches")
    run = cl.seconds(pipe.step - pipe.sync)
    times, interval, note = _schedule_run(pipe.schedule.name, t, m, v, run)
    lanes = []
    reductions = _reductions(pipe, result.cost_model, run)
    for s, reduction in zip(pipe.stages, reductions):
        last = s.index == len(pipe.stages) - 1
        # the activations forward, their gradients back: the last stage's from each chunk but its last, to the first
        sends = v - 1 if last else v
        send = cl.seconds(s.p2p) / (2.0 * sends) if sends else 0.0
        boxes = [Box("forward" if kind == "F" else "backward", a, b, k, c,
                     0.0 if last and c == v - 1 else min(send, b - a))
                 for (i, kind, k, c), (a, b) in times.items() if i == s.index]
        boxes.sort(key=lambda b: b.start)
        label = f"stage {s.index}"
        lanes.append(Lane(label, (s.first, s.first + s.devices - 1), tuple(boxes + reduction)))
    slowest = max(range(len(t)), key=lambda i: t[i])
    return Timeline(name, str(pipe.schedule), m, tuple(lanes), run, step, interval, pipe.bubble, slowest, note)
