"""Standard configurations planned: one costed (``--plan``), or the best of
the grid searched (``--search standard``, :mod:`standard_search` on the
tables of :mod:`standard_costs`)."""

from __future__ import annotations

import math
from dataclasses import replace

from errors import InputError, plain
from planner.job import Job

__all__ = ["standard_costing"]


def _accumulation(std, batch: int) -> str:
    """What :meth:`standard.Standard.describe` leaves out without stages:
    gradient accumulation."""
    if std.pp == 1 and std.microbatch * std.dp < batch:
        return f", {batch // (std.microbatch * std.dp)} micro-batches of {std.microbatch} accumulated"
    return ""


def _standard_result(job: Job, std):
    """The result of the complete standard configuration ``std`` on the
    job's model: through :func:`_standard_pipeline` with stages or
    micro-batches accumulated, else its decisions costed on the model's
    graph."""
    from cost_model import evaluate, make_result
    from standard import strategy

    g = job.graph()
    model = job.model.with_sequence_parallel(std.sp)  # a framework's own rules for sequence parallelism
    if std.pp > 1 or std.microbatch * std.dp < g.graph["batch"]:  # stages, or micro-batches accumulated
        return _standard_pipeline(job, std, model)
    return make_result(g, evaluate(g, strategy(g, std), model, job.procs), model, job.procs, "evaluate",
                       label=f"standard configuration {std.describe()}")


def _search_standard(job: Job, progress, hint=None):
    """The best standard configuration (:mod:`standard_search`) of the
    job's model within the device memory, and its result; the graphs the
    search builds are kept in the job.  ``hint(need)``: what to add to
    the message when nothing fits."""
    import standard_search

    g, model = job.graph(), job.model
    batch = g.graph["batch"]
    chain = job.chain()
    blocks = chain.count if chain is not None else 0
    node = model.cluster.gpus_per_node or 8
    results = {}

    def exact(std):
        if std not in results:
            for built in costing.graphs.values():  # the graphs the costing built, and their blocks
                job.seed(*built)
            results[std] = _standard_result(job, std)
        return results[std].total_cost, results[std].memory_bytes

    bar = None
    if progress is not None:
        def bar(total):
            return progress("costing standard configurations", "structures")
    costing = standard_costing(job, batch)
    found = standard_search.search(g, job.procs, batch, node, blocks, costing, model.cluster.capacity, exact, bar)
    if found.best is None:
        if not math.isfinite(found.least_memory):
            raise InputError(f"--search standard: no standard configuration applies to {g.graph['name']} on "
                             f"{job.procs} devices")
        need = f"{'at least ' if found.least_is_bound else ''}{plain(found.least_memory / 1e9, 4)} GB"
        raise MemoryError(f"no standard configuration fits in {plain(model.cluster.capacity / 1e9, 4)} GB per device: "
                          f"the smallest needs {need}{hint(found.least_memory) if hint else ''}")
    return found, results[found.best]


def standard_costing(job: Job, batch: int):
    """The :class:`standard_costs.Costing` of the job's model: its graphs
    at other batches (the job's, built once), the model with its first
    three layers where it is a config (its blocks counted, not built)."""
    from standard_costs import Costing

    return Costing(job.graph, job.model, job.procs, batch, job.first_layers, job.chain(batch))


def _standard_pipeline(job: Job, std, model):
    """A standard configuration with pipeline stages, costed on ``model``
    (the job's, with the configuration's sequence parallelism):
    Megatron-LM's layout (the blocks split evenly, or as the framework
    splits them, :func:`pipeline.split_counts`; the embedding in the first
    stage, the head in the last)."""
    import pipeline
    from standard import strategy

    batch = job.batch
    micro = std.microbatch * std.dp  # the samples of a micro-batch over the data-parallel groups
    g, chain = job.graph(micro), job.chain(micro)
    ends = False  # the embedding and the loss counted as layers (pipeline.counts_ends)
    if chain is not None:
        split = (chain.count, std.pp, pipeline.Schedule(std.schedule, std.chunks).v, model.framework,
                 pipeline.block_layers(g, chain))
        counts, ends = pipeline.split_counts(*split), pipeline.counts_ends(*split)
        if min(counts) < 1:
            raise InputError(f"--plan: pp={std.pp} is more stages than the {chain.count} blocks")
        ranges = pipeline.stage_ranges(g.number_of_nodes(), chain, counts)
    else:  # no repeated blocks: the operator order cut where the operators' work balances
        from cost_model import op_costs
        from graph import operators

        ops = operators(g)
        work = [float(op_costs(op, [(1,) * len(op.dims)], replace(model, micro_batches=None))[0]) for op in ops]
        try:
            ranges = pipeline.balanced_ranges(work, std.pp)
        except InputError as e:
            raise InputError(f"--plan: {e}") from None
        counts = [hi - lo for lo, hi in ranges]
    m = batch // micro
    sched = pipeline.Schedule(std.schedule, std.chunks)
    if sched.name == "interleaved" and chain is None:
        raise InputError(f"--plan: {pipeline.unblocked_error(g.graph['name'])}")
    why = pipeline.chunking_error(counts, sched, ends)
    if why:
        raise InputError(f"--plan: {why}")
    pipe = replace(pipeline.evaluate(g, model, job.procs, std.pp, m, micro, sched, ranges, strategy(g, std)),
                   replicas=std.dp)
    return pipeline.as_result(g, pipe, model, job.procs, batch, "evaluate",
                              label=f"standard configuration {std.describe()}")
