"""How a :class:`result.Result` is shown on the terminal: the text report.
Everything here reads the record; nothing costs.  Files are written by the
formats of ``exports/`` (the plan file's schema is :mod:`plan_file`).
"""

from __future__ import annotations

from errors import plain, printable
from result import Result

__all__ = ["render_text", "fmt_config", "fmt_bytes", "fmt_time", "fmt_total"]


# -- text -----------------------------------------------------------------------------


def _align(rows, right: set[int], sep: str = " ") -> list[str]:
    """Rows of cells as lines of aligned columns (``right``: right-aligned)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [sep.join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in rows]


def fmt_config(cfg) -> str:
    return "(" + ",".join(map(str, cfg)) + ")"


def _scaled(x: float, units) -> tuple[str, str] | None:
    """``x`` in the largest of ``units`` (``(name, size)``, largest first) it
    reaches, or the next larger one where rounding reaches 1,000 of it."""
    for i, (unit, size) in enumerate(units):
        if x >= size:
            if i and float(f"{x / size:.3g}") >= 1000:
                unit, size = units[i - 1]
            return plain(x / size, 3), unit
    return None


def fmt_bytes(n: float, compact: bool = False) -> str:
    """Bytes in decimal units: ``6.06 MB`` (``6.06M`` when ``compact``;
    a negative amount, a difference, with its sign)."""
    if n < 0:
        return "-" + fmt_bytes(-n, compact)
    found = _scaled(n, (("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0)))
    if found is None or found[1] == "B":
        return f"{n:.0f}" if compact else f"{n:.0f} B"
    v, unit = found
    return f"{v}{unit[0]}" if compact else f"{v} {unit}"


def _model_line(r: Result) -> str:
    """``alexnet, batch 128`` plus every parameter that is not the model's default."""
    from models import MODELS

    spec = MODELS.get(r.graph)
    defaults = {p.name: p.default for p in spec.params} if spec else dict(r.defaults)
    shown = [f"{k} {v}" for k, v in r.params if k in ("batch", "width") or defaults.get(k) != v]
    return ", ".join([r.graph] + shown)


def fmt_time(t: float) -> str:
    """A duration with a unit that keeps 3 significant digits readable;
    under a nanosecond (what rounding leaves of a difference) 0."""
    if abs(t) < 1e-9:
        return "0 us"
    if t < 0:  # a difference
        return "-" + fmt_time(-t)
    found = _scaled(t, (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)))
    return f"{plain(t / 1e-6, 3)} us" if found is None else f"{found[0]} {found[1]}"


def _memory_lines(r: Result) -> list[str]:
    """The per-device memory, its parts, and whether it fits."""

    names = ("weights", "gradients", "optimizer", "activations")  # MEMORY_PARTS, short
    parts = ", ".join(f"{name} {fmt_bytes(x)}" for name, x in zip(names, r.memory))
    if r.transient:
        parts += f"; {fmt_bytes(r.transient)} more while a block runs (recomputed activations, gathered weights)"
    cm, cl = r.cost_model, r.cost_model.cluster
    line = f"Memory per device: {fmt_bytes(r.memory_bytes)} ({cm.optimizer}, {cl.precision})"
    if r.capacity is not None:
        room = fmt_bytes(r.capacity) + (f" ({plain(cl.device_memory)} GB less {plain(cl.headroom, 3)} GB headroom)"
                                        if cl.headroom else "")
        line += f": fits the {room}" if r.fits else f": OVER the {room} of a device"
    lines = [line, f"  {parts}"]
    if cm.framework is not None:
        reserve, outside = r.beyond_tensors
        lines.append(f"  as {cm.framework.title} runs it: {fmt_bytes(r.reserved_bytes)} in its allocator (its reserve "
                     f"{fmt_bytes(reserve)}), {fmt_bytes(r.reserved_bytes + outside)} with the CUDA context and "
                     f"NCCL's buffers")
    return lines


def _samples(pipe) -> str:
    """A micro-batch's samples, over all its data-parallel replicas, and
    each replica's share where a standard configuration names it (its
    ``microbatch``): "8 samples (2 per data-parallel replica)"."""
    text = f"{pipe.micro} sample{'s' * (pipe.micro > 1)}"
    if pipe.replicas > 1:
        text += f" ({pipe.micro // pipe.replicas} per data-parallel replica)"
    return text


def _all(devices: int) -> str:
    """"all 8 devices", or "the one device"."""
    return f"all {devices} devices" if devices > 1 else "the one device"


def _pipeline_lines(r: Result) -> list[str]:
    """The stages of a pipelined plan: what each holds and costs."""
    pipe, cl = r.pipeline, r.cost_model.cluster
    if pipe.pp == 1 and pipe.m == 1:  # one stage, one micro-batch: the plan without stages, as searched with them
        return [f"One stage, one micro-batch: the whole batch of {_samples(pipe)} at once on "
                f"{_all(pipe.stages[0].devices)}"]
    if pipe.pp == 1:  # one stage: the batch's micro-batches one after the other, gradients accumulated
        fw, stage = r.cost_model.framework, pipe.stages[0].result
        some = fw is not None and fw.sharded_every_micro_batch and stage.some_sharded_gradients
        reduced = ("the gradients reduced once per step" if not some else
                   "each micro-batch's sharded gradients reduce-scattered under its backward pass"
                   + ("" if stage.sharded_gradients else ", the others' once per step"))
        return [f"Gradient accumulation: {pipe.m} micro-batch{'es' * (pipe.m > 1)} of {_samples(pipe)}, one "
                f"after the other on {_all(pipe.stages[0].devices)}, each "
                f"{fmt_time(cl.seconds(pipe.stages[0].time))}; {reduced}"]
    q = pipe.stages[0].devices
    lines = [f"Pipeline: {pipe.pp} stages of {q} device{'s' * (q > 1)}, {pipe.m} "
             f"micro-batch{'es' * (pipe.m > 1)} of {_samples(pipe)}, {pipe.schedule}; "
             f"bubble {100 * pipe.bubble:.1f}% of the slowest stage's busy time"
             + (f"; each stage's plan {pipe.bound}" if pipe.bound else "")]
    rows = [("stage", "operators", "devices", "per micro-batch", "sends", "in flight", "memory")]
    names = {layer.id: layer.name for layer in r.layers}
    for s in pipe.stages:
        rows.append((str(s.index), f"{names[s.nodes[0]]} .. {names[s.nodes[-1]]} ({len(s.nodes)})",
                     f"{s.first}-{s.first + s.devices - 1}" if s.devices > 1 else str(s.first),
                     fmt_time(cl.seconds(s.time)),
                     fmt_bytes(s.sends * cl.word_bytes), f"{round(s.in_flight, 2):g}",
                     fmt_bytes(s.memory) + ("!" if r.capacity is not None and s.memory > r.capacity else "")))
    return lines + ["  " + line for line in _align(rows, right={0, 3, 4, 5, 6}, sep="  ")]


def step_parts(r: Result) -> tuple[tuple[str, float], ...]:
    """The predicted step by part, in FLOP at the device's peak: compute,
    exposed communication, what dropless expert layers wait on the host
    (where they do, ``frameworks.host``) and, for a pipeline, its bubble
    and gradient reduction (its slowest stage's, the critical path): what
    the report's step line and the drawing's bar show."""
    pipe = r.pipeline
    if pipe is None:
        return (("compute", r.compute), ("exposed communication", r.communication)) + (
            (("waiting on the host", r.host),) if r.host > 0 else ())
    slow = max(pipe.stages, key=lambda s: s.time)
    busy, host = pipe.m * slow.time, pipe.m * slow.host
    # its micro-batches' own computation (the gradients' reduction, in the communication per micro-batch, is the
    # step's, apart), within what the stage is busy with
    comp = pipe.m * max(min(slow.result.compute, slow.compute - slow.host), 0.0)
    return (("compute", comp), ("exposed communication", busy - comp - host),
            *((("waiting on the host", host),) if host > 0 else ()), ("bubble", pipe.step - pipe.sync - busy),
            ("gradient reduction", pipe.sync))


#: the step line's words for the parts of :func:`step_parts`
_STEP_WORDS = {"waiting on the host": "waiting on the host's launches",
               "gradient reduction": "gradient synchronisation"}


def _time_lines(r: Result) -> list[str]:
    """The predicted step time and, on a real device, what it means: its
    critical path, the throughput and the FLOP utilisation."""
    cl = r.cost_model.cluster
    pipe = r.pipeline
    if pipe is None and not r.cost_model.realistic:
        return [f"Predicted step time: {fmt_time(r.step_seconds)} (compute {fmt_time(cl.seconds(r.compute))}, "
                f"communication {fmt_time(cl.seconds(r.communication))})"]
    shown = [(name, x) for name, x in step_parts(r) if name != "bubble" or pipe.pp > 1]  # one stage: no bubble
    parts = ", ".join(f"{_STEP_WORDS.get(name, name)} {fmt_time(cl.seconds(x))}" for name, x in shown)
    where = "the critical path (the slowest stage)" if pipe is not None and pipe.pp > 1 else "the critical path"
    lines = [f"Predicted step time: {fmt_time(r.step_seconds)} on {where}: {parts}"]
    if not r.cost_model.realistic:
        return lines
    what, count = ("tokens", r.tokens) if r.tokens else ("samples", r.param("batch"))
    if count and r.step_seconds:
        lines.append(f"  {count / r.step_seconds / r.procs:,.0f} {what}/s per device, {count / r.step_seconds:,.0f} "
                     f"in all")
    if r.mfu is not None:
        per = r.model_flops / r.step_seconds / r.procs / 1e12
        active = " on the active parameters" if r.active_parameters is not None else ""
        line = f"  model FLOP/s per device {per:.1f} T (MFU {100 * r.mfu:.1f}% of {plain(cl.flops)}{active})"
        if r.recomputed_flops:
            hw = r.hardware_flops / r.step_seconds / r.procs / 1e12
            line += f"; with the recomputation {hw:.1f} T ({100 * hw / cl.flops:.1f}%)"
        fw = r.cost_model.framework
        if fw is not None and fw.float8:
            line += f"; Float8 products counted against the {cl.precision} peak"
        elif r.mfu > 1.0:  # the convention's FLOP, not the work costed
            line += ("; above 100% because MFU counts attention's whole score matrix (Narayanan et al.), of which "
                     "causal attention computes half")
        lines.append(line)
    return lines


def fmt_options(d) -> str:
    """A decision's execution options, shortly: ``zero=3 recompute=full``."""
    return " ".join(f"{k}={v}" for k, v in d.options)


def _bound_lines(r: Result) -> list[str]:
    b = r.bound
    head = f"Within {fmt_bytes(b.capacity)} per device: "
    host = " (before its expert layers' wait on the host)" if r.host > 0 else ""  # no operator's: unsearched
    if r.pooled > 0:  # the search's costs window each collective by its own operator's passes
        host += " (of the operators' own costs, before their blocks pool their collectives)"
    if b.status == "unconstrained optimum fits":
        return [head + "the unconstrained optimum fits (exact)" + host]
    searches = f"  {b.searches} searches, lambda {b.lam:.3g} FLOP/byte"
    if b.status == "optimal":
        return [head + "optimal (the Lagrangian bound meets its cost)" + host, searches]
    return [head + f"within {100 * b.gap:.2f}% of optimal" + host,
            searches + f"; no strategy that fits costs less than {b.lower_bound:.4e}"]


def _source_line(r: Result) -> str:
    """The model's size and, for a model read from a file, which file."""
    src = dict(r.model_source)
    where = f"read from {printable(src['file'])} (sha256 {src['sha256'][:12]})" if src else "built-in model"
    active = f" ({r.active_parameters:,} active)" if r.active_parameters is not None else ""
    return f"{r.parameters:,} parameters{active}, {len(r.layers)} operators; {where}"


def _pct(a: float, b: float) -> str:
    return f"{100 * (b - a) / b:.1f}%"


def _first_outside(r: Result) -> str:
    layer = next(layer for layer in r.layers if not layer.in_space)
    return f"e.g. {layer.name} {fmt_config(layer.config)} on {layer.dims}"


def _comparison(r: Result) -> list[str]:
    """The baselines beside the result, and what to make of them."""
    dp = r.baseline("data_parallel")
    mine = r.total_cost
    mine_label = "PaSE" if r.mode == "search" else "this strategy"
    if r.label.startswith("standard configuration"):
        mine_label = "this standard configuration"
    notes = []
    most = max(layer.devices for layer in dp.layers)
    if most < r.procs:
        notes.append(f"  data parallel uses only {most} of the {r.procs} devices: the batch cannot be split further")
    for b in r.baselines:
        if b.note:
            notes.append(f"  {b.note}")
        elif b.key == "expert":
            notes.append(f"  {b.label}")
        cheaper = b.total_cost < mine * (1 - 1e-12) and b.fits is not False  # one that does not fit is no option
        if b.key == "parallax" and not b.total_cost < dp.total_cost * (1 - 1e-12):
            continue  # no sparse exchange that pays (no embeddings): data parallel's own line says the rest
        if cheaper and b.key == "parallax" and r.cost_model.original:
            notes.append(f"  Parallax is {_pct(b.total_cost, mine)} cheaper than {mine_label}: it exchanges embedding")
            notes.append("  gradients sparsely, which the default cost model (the original PaSE one) does")
            notes.append("  not model; --sparse-embeddings searches with that rule")
        elif cheaper and not b.in_search_space:
            notes.append(f"  {b.title} is {_pct(b.total_cost, mine)} cheaper than {mine_label}: it uses "
                         f"configurations outside the search space ({_first_outside(b)})")
        elif cheaper:
            notes.append(f"  {b.title} is {_pct(b.total_cost, mine)} cheaper than {mine_label}")
    if any(not b.in_search_space for b in r.baselines):
        notes.append("  * uses configurations the search does not enumerate (below the cutoff)")
    if r.capacity is not None and any(not b.fits for b in r.baselines):
        notes.append(f"  ! needs more memory than the {fmt_bytes(r.capacity)} of a device")
    table = [("strategy", "total", "comm", "speedup", "step time", "memory", "comm/device")]
    for label, rec, inside in [(mine_label, r, True)] + [(b.title, b, b.in_search_space) for b in r.baselines]:
        table.append((label + ("" if inside else " *"), f"{rec.total_cost:.2e}", f"{rec.communication:.2e}",
                      "-" if r.speedup(rec) is None else f"{r.speedup(rec):.2f}x", fmt_time(rec.step_seconds),
                      fmt_bytes(rec.memory_bytes) + ("!" if rec.fits is False else ""),
                      fmt_bytes(rec.comm_bytes_per_device)))
    lines = ["", "Compared with baselines (FLOP per step; speedup = data-parallel cost / cost):"]
    return lines + ["  " + line for line in _align(table, right=set(range(1, 7)), sep="  ")] + notes


def _options_line(r: Result) -> str:
    """How many operators take each option value, and what they save."""
    counts: dict = {}
    for layer in r.layers:
        for k, v in layer.decision.options:
            counts[(k, v)] = counts.get((k, v), 0) + 1
    listed = ", ".join(f"{k}={v} on {n} operator{'s' * (n > 1)}" for (k, v), n in sorted(counts.items(),
                                                                                        key=str))
    saved = sum(layer.saves for layer in r.layers)
    if saved < 0:  # a framework's stage that keeps more than it shards (DeepSpeed's ZeRO-1 over one device)
        return f"Execution options: {listed}; they need {fmt_bytes(-saved)} more per device"
    return f"Execution options: {listed}; they save {fmt_bytes(saved)} per device"


def fmt_total(x: float) -> str:
    """The last line's number: the original's fixed point with two decimals
    while its digits mean something (below 1e15), else 12 significant digits
    in e-notation (``--output`` keeps the exact value)."""
    return f"{x:.2f}" if abs(x) < 1e15 else f"{x:.11e}"


def render_text(r: Result, summary: bool = False) -> str:
    """The human-readable report: a row per operator (not with ``summary``),
    the totals, the total cost last."""
    cl = r.cost_model.cluster
    what = ("strategy" if r.mode == "search" else r.label if r.label.startswith("standard configuration") else
            "evaluation of a given strategy")
    words = f"a word moved costs {cl.word:g}" + (
        f" inside a node, {cl.inter_word:g} between nodes" if cl.two_level and cl.inter_word != cl.word else "")
    if r.cost_model.realistic:
        words = f"a second costs {cl.flops:g}e12" if cl.flops < 1e6 else f"a second costs {cl.flops * 1e12:.6g}"
    head = [f"PaSE {what}: {_model_line(r)}, p = {r.procs}", _source_line(r)]
    if r.model_source and not cl.device and not cl.realistic and (cl.flops, cl.bw) == (10.0, 16.0):
        head.append(f"On the PaSE paper's machine ({cl.flops:g} TFLOPS, {cl.bw:g} GB/s, {cl.precision}): give --device "
                    "(h100, a100-80gb, ...) to plan for a real one")  # a real model on the paper's machine: said
    machine, units = cl.describe(r.procs), f"costs in FLOP ({words})"
    head += [f"{machine}; {units}"] if len(machine) + len(units) < 78 else [machine, units[0].upper() + units[1:]]
    rules = f"Cost model: {r.cost_model.describe()}"
    head.append(rules + (f" (as {r.rules_from} records)" if r.rules_from else ""))
    if r.cost_model.framework is not None:
        head.append(f"Framework: {r.cost_model.framework.describe(cl)}")
    outside = r.mode != "search" and not r.in_search_space
    with_options = any(layer.decision.options for layer in r.layers)
    rows = [("id", "name", "kind", "dims", "config", "cost", "memory") + (("saves", "options") if with_options
                                                                          else ())]
    for layer in r.layers:
        mark = "*" if outside and not layer.in_space else ""
        row = (str(layer.id), layer.name, layer.kind, layer.dims, fmt_config(layer.config) + mark,
               f"{layer.cost:.3e}", fmt_bytes(layer.memory_bytes, compact=True))
        if with_options:
            row += (fmt_bytes(layer.saves, compact=True) if layer.saves else "", fmt_options(layer.decision))
        rows.append(row)
    lines = head + [""] + ([] if summary else _align(rows, right={0, 5, 6, 7}) + [""])
    per = " per micro-batch, every stage" if r.pipeline is not None else ""
    lines.append(f"Operators{per}: {r.operators_cost:.4e} (compute {r.compute:.4e}, "
                 f"communication {r.operators_comm:.4e})")
    if r.pooled > 0:
        lines.append(f"  the repeated blocks' overlapped collectives under each block's passes: {r.pooled:.4e} less "
                     f"exposed than under each operator's own")
    lines.append(f"Edges (re-distribution){per}: {r.edges_cost:.4e}")
    if r.pipeline is not None:
        lines += _pipeline_lines(r)
    if r.search is not None:
        st = r.search
        lines.append(f"Search: {st.order}, {st.seconds:.3f} s for {len(r.layers)} operators")
        if st.pruned and st.largest_K_pruned is not None:
            lines.append(f"  largest K {st.largest_K}, {st.largest_K_pruned} after pruning "
                         f"({st.configurations_kept:,} of {st.configurations:,} configurations kept)")
        else:
            lines.append(f"  largest K {st.largest_K} (not pruned: a small search)")
        done = st.work if st.work_computed is None else st.work_computed
        lines.append(f"  largest dependent set {st.largest_dependent_set}, largest table {st.largest_table:,} "
                     f"entries, {st.work:,} entries evaluated")
        if done < st.work:
            lines.append(f"  {done:,} of them computed ({done / st.work:.0%}): the others repeat those of "
                         "configurations a step sees alike")
        if st.repeated:
            lines.append(f"  repeated blocks searched once: {', '.join(st.repeated)}")
        if st.timings:
            t = st.timings
            lines.append(f"Timed {len(t)} searches (after 2 warm-up): mean {fmt_time(sum(t) / len(t))}, "
                         f"min {fmt_time(min(t))}, max {fmt_time(max(t))}")
    if r.bound is not None:
        lines += _bound_lines(r)
    lines += _memory_lines(r)
    if r.source is not None:
        lines.append(f"Strategy read from {r.source} (no search).")
    if outside:
        n = sum(not layer.in_space for layer in r.layers)
        lines.append(f"* {n} configuration{'s' * (n > 1)} outside the search space for p = {r.procs} (below the "
                     "cutoff, or a split the search does not enumerate): the search would not consider "
                     f"{'them' if n > 1 else 'it'}")
    if with_options:
        lines.append(_options_line(r))
    lines += list(r.notes)
    lines += _time_lines(r)
    if r.baselines:
        lines += _comparison(r)
    lines.append(f"Total cost: {fmt_total(r.total_cost)}")
    return "\n".join(lines)
