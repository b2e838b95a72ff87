"""The plan without stages: the per-operator search of the job's whole
batch at once (:func:`_plain`), within the device memory where the
cluster has one, and given up where a plan found otherwise (a
pipeline's step) already beats its bounds."""

from __future__ import annotations

from dataclasses import replace

from planner.job import Job


def _plain(job: Job, progress, cutoff: float | None = None):
    """The per-operator search of the job's whole batch (no stages): its
    result, and the profile's text with ``job.profile``; with ``cutoff`` (the step of
    a plan found otherwise, in the operators' own costs: its blocks' collectives not
    pooled, as the bounds here), ``None`` when it cannot be faster (its
    operators at their cheapest, its pieces searched alone, those within the
    device memory, or the search's bound, reach it: :func:`dp_search.pieces_bound`,
    :func:`dp_search.pieces_within`)."""
    from cost_model import build_costs, with_edges
    from dp_search import NotBetter

    g = job.graph()
    bar = progress("building the cost tables", "edges") if progress is not None else None
    try:
        costed = build_costs(g, job.procs, job.model, memory_limit=job.memory_limit, edges=False)
        if cutoff is not None and costed.least_cost >= cutoff:
            return None, None
        costed = with_edges(costed, bar)
    finally:
        if bar is not None:
            bar.close()
    if cutoff is not None:  # its pieces searched alone bound it below, within the device memory where it has one
        from dp_search import pieces_bound, pieces_within

        beaten, capacity = cutoff * (1 + 1e-9), job.model.cluster.capacity  # with room for rounding
        if capacity is None:
            bound = pieces_bound(costed, threads=job.threads, memory_limit=job.memory_limit)
        else:
            bound = pieces_within(costed, capacity, cutoff=beaten, threads=job.threads, memory_limit=job.memory_limit)
        if bound >= beaten:
            return None, None
    try:
        result, profile = _search(job, costed, progress, cutoff)
    except NotBetter:
        return None, None
    if cutoff is not None and not result.total_cost + result.pooled < cutoff:  # in the operators' own costs
        return None, None
    most = max(int(c.prod(axis=1).max()) for c in costed.configs)
    if most < job.procs:
        used = max(layer.devices for layer in result.layers)
        result = replace(result, notes=result.notes + (
            f"No operator can use more than {most} of the {job.procs} devices (no configuration splits further "
            f"at cutoff {g.graph['cutoff']}); this strategy uses at most {used}.",))
    return result, profile


def _search(job: Job, costed, progress, cutoff=None):
    """The searched result of the job's graph, and the profile's text with
    ``job.profile`` (``cutoff``: see :func:`dp_search.search_within`)."""
    from cost_model import make_result
    from dp_search import search, search_within
    from result import MemoryBound

    capacity = job.model.cluster.capacity

    def once(callback=None):
        if capacity is None:
            return search(costed, job.algo, memory_limit=job.memory_limit, progress=callback, threads=job.threads)
        return search_within(costed, capacity, job.algo, memory_limit=job.memory_limit, progress=callback,
                             threads=job.threads, cutoff=cutoff)

    profile = None
    if job.profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        r = once()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(15)
        profile = buf.getvalue().strip("\n")
    else:
        bar = progress("searching", "operators") if progress is not None else None
        try:
            r = once(bar)
        finally:
            if bar is not None:
                bar.close()
    timings = ()
    if job.measure:
        for _ in range(2):
            once()
        timings = tuple(_found(once()).seconds for _ in range(5))
    bound = None
    if capacity is not None:
        bound = MemoryBound(capacity, r.status, r.lower_bound, r.gap, r.lam, r.searches, r.least_memory)
    found = _found(r)
    result = make_result(job.graph(), costed.figures(found.index, found.choices), job.model, job.procs, "search",
                         search=replace(found.stats, timings=timings), bound=bound)
    return result, profile


def _found(r):
    """The search result of a search, or of one held within the memory."""
    return getattr(r, "result", r)
