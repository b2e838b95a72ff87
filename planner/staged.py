"""The pipelines the planner searches (``--pp``, ``--microbatches``,
``--schedule``, and by default on a real device beside the plan without
stages): :func:`pipelined` drives :mod:`pipeline_search` and, where no
``--pp`` is given, the plain search (:func:`planner.whole._plain`) beside it.

Where the plan without stages is searched beside the pipelines, gradient
accumulation (one stage, micro-batches one after the other) is searched
only where that plan does not fit or the device memory holds it back
from its unconstrained optimum: with the memory to spare, accumulated
micro-batches cost at least what the whole batch does (the same work in
smaller products, their collectives repeated), so the search of their
micro-batch sizes would be time spent for nothing.
"""

from __future__ import annotations

import math
from dataclasses import replace

from errors import InputError, plain
from planner.job import Job
from settings import Settings

__all__ = ["pipelined"]


def pipelined(s: Settings, job: Job, progress=None, with_plain: bool = False):
    """A pipelined plan searched as the settings' ``--pp``,
    ``--microbatches`` and ``--schedule`` ask; with ``with_plain``, the
    plan without stages where it is faster.  The graphs at micro-batches
    are the job's, each built once (the answer's included)."""
    from functools import partial

    import pipeline
    import pipeline_search
    from planner.whole import _plain

    batch = job.batch
    if s.procs % (s.pp if isinstance(s.pp, int) else 1):
        raise InputError(f"--pp {s.pp} does not divide the {s.procs} devices")
    micro_values = None
    if isinstance(s.microbatches, int):
        if batch % s.microbatches:
            raise InputError(f"--microbatches {s.microbatches} does not divide the batch of {batch}")
        micro_values = [batch // s.microbatches]
    auto = s.schedule == "auto" or s.schedule is None and s.pp == "auto"  # searched; else 1f1b unless given
    schedules = None if auto else [pipeline.parse_schedule(s.schedule or "1f1b")]
    pipe = failed = None
    estimates: list = []  # the stage settings' ranking figures, against which one stage's are dropped as before
    search = partial(pipeline_search.search, job.graph, job.model, job.procs, batch, micro_values=micro_values,
                     schedules=schedules, memory_limit=job.memory_limit, threads=job.threads, progress=progress,
                     beside_plain=with_plain)
    try:  # beside the plan without stages, gradient accumulation (one stage) only where that plan is memory-bound
        pipe = search(pp_values=[s.pp] if isinstance(s.pp, int) else [1] if s.pp is None else None,
                      least_stages=2 if with_plain else 1, estimates=estimates)
    except pipeline_search.PipelineDoesNotFit as e:
        if not with_plain:
            _nothing_fits(s, job.model, e)
        failed = e
    if not with_plain and s.pp in ("auto", 1, None) and micro_values is None and pipe is not None:
        more, _ = _accumulated(search, job, (True,), estimates)  # one stage's larger micro-batches
        if more is not None and more.step < pipe.step:
            pipe = more
        # and the whole batch at once (--pp 1's plan), given up where it cannot be faster, as beside stages searched
        # by default: where it wins, the answer is that plan, its report and plan file (which follows -b) --pp 1's
        try:
            whole, profile = _plain(job, progress, cutoff=pipe.step)
        except MemoryError:
            whole = None
        if whole is not None:
            asked = " and ".join(f"--{k} auto" for k in ("pp", "microbatches") if getattr(s, k) == "auto")
            what = "pipeline stages and accumulated micro-batches" if s.pp == "auto" else "accumulated micro-batches"
            return replace(whole, notes=whole.notes + (
                f"{asked} searched {what}: none was faster than the whole batch at once, whose plan this is (as "
                "--pp 1 plans it).",)), profile
    unsearched = None  # why the plan without stages could not be searched, where its search was too large
    if with_plain:  # searched within what the pipeline found: given up where it cannot be faster
        from search.elimination import SearchTooLarge

        plain = missed = None
        try:
            plain, profile = _plain(job, progress, cutoff=None if pipe is None else pipe.step)
        except MemoryError as e:
            missed = e
            if isinstance(e, SearchTooLarge):
                unsearched = str(e)
        accumulating = None  # why no accumulation fits, where it was searched and none did
        if plain is None or _memory_bound(plain):
            # accumulated micro-batches keep fewer activations: where the whole batch is held back by the memory
            # (or does not fit), they may be faster; where it is not, they cost at least as much.  Dropped against
            # the stage settings' ranking figures, not the steps found (see _accumulated)
            accumulated, accumulating = _accumulated(search, job, (False, True), estimates)
            best = [x for x in (None if pipe is None else pipe.step,
                                None if plain is None else plain.total_cost + plain.pooled) if x is not None]
            if accumulated is not None and (not best or accumulated.step < min(best)):
                pipe, plain = accumulated, None
        if plain is not None:
            return plain, profile
        if pipe is None:
            _nothing_fits(s, job.model, failed, accumulating, missed)
    g = job.graph(pipe.micro)
    pipe = pipeline_search.as_plan(g, job.model, job.procs, pipe)  # its blocks' collectives pooled
    result = pipeline.as_result(g, pipe, job.model, job.procs, batch, "search")
    fw = job.model.framework
    if fw is not None and pipe.pp > 1 and fw.refuses_schedule(pipe.schedule.name):  # asked for with --schedule
        result = replace(result, notes=result.notes + (
            f"{fw.refuses_schedule(pipe.schedule.name)}: costed as asked, though the framework would not run it "
            "(--schedule auto tries only what it runs).",))
    if unsearched is not None:
        result = replace(result, notes=result.notes + (
            f"The plan without stages was not searched ({unsearched}); this is the best of the pipelines and "
            "micro-batches searched (--algo 0, or a larger --mem-limit, may search it).",))
    return result, None


def _accumulated(search, job: Job, which: tuple, rivals: list):
    """The fastest gradient accumulation (one stage) of ``search`` (a
    :func:`pipeline_search.search` with the job's settings bound) and why
    none fits, over the micro-batch sizes ``which`` names: ``False`` the
    sizes up to a stage's devices, ``True``
    the fewer, larger ones above them, each set searched apart (ranked
    together by their optima without the memory, the larger ones would
    crowd out the smaller ones the memory favours), each setting dropped
    where its bound loses to the best few of ``rivals`` and its own (the
    stage settings' ranking figures: the same currency, as when all were
    ranked together; a pipeline's step is not, as the ranking charges
    every micro-batch its share of the gradients' synchronisation, which
    the step hides under the last backward pass).  Only where the device
    has a memory: without one, the larger ones cost at least what the
    whole batch does."""
    import pipeline_search

    best = failed = None
    if job.model.cluster.capacity is None:
        return None, None
    for larger in which:
        sizes = pipeline_search.micro_candidates(job.batch, job.procs, 1, larger)
        if not sizes:
            continue
        try:
            found = search(pp_values=[1], micro_values=sizes, rivals=tuple(rivals))
        except pipeline_search.PipelineDoesNotFit as e:
            failed = failed or e
            continue
        if found is not None and (best is None or found.step < best.step):
            best = found
    return best, failed


def _memory_bound(result) -> bool:
    """Whether the device memory held the searched ``result`` back from
    the unconstrained optimum."""
    return result.bound is not None and result.bound.status != "unconstrained optimum fits"


def _nothing_fits(s: Settings, model, *errors):
    """Raise the one line saying that no plan fits: the least need any
    search found, and what would change it."""
    import pipeline_search
    from planner.defaults import what_would_fit

    errors = [x for x in errors if x is not None]  # no pipeline tried: the plan without stages' alone
    needs = [x.least for x in errors if math.isfinite(getattr(x, "least", math.inf))]
    if not needs or model.cluster.capacity is None:
        raise errors[-1]
    what = ("with or without pipeline stages" if len(errors) > 1 else "with the pipelines searched"
            if isinstance(errors[0], pipeline_search.PipelineDoesNotFit) else "without pipeline stages")
    raise MemoryError(f"no plan fits in {plain(model.cluster.capacity / 1e9, 4)} GB per device {what}: the smallest "
                      f"needs at least {plain(min(needs) / 1e9, 4)} GB{what_would_fit(s, model.cluster, min(needs))}"
                      ) from None
