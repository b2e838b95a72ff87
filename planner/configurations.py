"""Standard configurations planned: one costed (``--plan``), or the best of
the grid searched (``--search standard``, :mod:`standard_search` on the
tables of :mod:`standard_costs`)."""

from __future__ import annotations

import math
from dataclasses import replace

from errors import InputError
from planner.graphs import _chain, _micro_graph, _model_batch, _model_params
from settings import Settings

__all__ = ["standard_costing"]


def _accumulation(std, batch: int) -> str:
    """What :meth:`standard.Standard.describe` leaves out without stages:
    gradient accumulation."""
    if std.pp == 1 and std.microbatch * std.dp < batch:
        return f", {batch // (std.microbatch * std.dp)} micro-batches of {std.microbatch} accumulated"
    return ""


def _standard_result(s: Settings, g, std, model, graphs: dict | None = None):
    """The result of the complete standard configuration ``std`` on the
    settings' model ``g``: through :func:`_standard_pipeline` with stages or
    micro-batches accumulated (``graphs``: the micro-batch graphs built so
    far), else its decisions costed on ``g``."""
    from cost_model import evaluate, make_result
    from standard import strategy

    model = model.with_sequence_parallel(std.sp)  # a framework's own rules for sequence parallelism
    if std.pp > 1 or std.microbatch * std.dp < g.graph["batch"]:  # stages, or micro-batches accumulated
        return _standard_pipeline(s, std, model, graphs)
    return make_result(g, evaluate(g, strategy(g, std), model, s.procs), model, s.procs, "evaluate",
                       label=f"standard configuration {std.describe()}")


def _search_standard(s: Settings, g, model, progress):
    """The best standard configuration (:mod:`standard_search`) of the
    settings' model within the device memory, its result, and the model's
    graphs the search built (batch -> graph)."""
    import standard_search
    from planner.defaults import what_would_fit

    batch = g.graph["batch"]
    chain = _chain(g)
    blocks = chain.count if chain is not None else 0
    node = model.cluster.gpus_per_node or 8
    graphs = {batch: (g, chain)}
    results = {}

    def build(micro):
        return graphs[micro][0] if micro in graphs else _micro_graph(s, micro)

    def exact(std):
        if std not in results:
            for micro, built in costing.graphs.items():  # the graphs built, and their blocks
                graphs.setdefault(micro, built)
            results[std] = _standard_result(s, g, std, model, graphs)
        return results[std].total_cost, results[std].memory_bytes

    bar = None
    if progress is not None:
        def bar(total):
            return progress("costing standard configurations", "structures")
    costing = standard_costing(s, model, batch, chain, build)
    found = standard_search.search(g, s.procs, batch, node, blocks, costing, model.cluster.capacity, exact, bar)
    if found.best is None:
        if not math.isfinite(found.least_memory):
            raise InputError(f"--search standard: no standard configuration applies to {g.graph['name']} on "
                             f"{s.procs} devices")
        need = f"{'at least ' if found.least_is_bound else ''}{found.least_memory / 1e9:.4g} GB"
        raise MemoryError(f"no standard configuration fits in {model.cluster.capacity / 1e9:.4g} GB per device: "
                          f"the smallest needs {need}"
                          f"{what_would_fit(s, model.cluster, found.least_memory, standard=True)}")
    for micro, built in costing.graphs.items():
        graphs.setdefault(micro, built)
    return found, results[found.best], {micro: built[0] for micro, built in graphs.items()}


def standard_costing(s: Settings, model, batch: int, chain, build=None):
    """The :class:`standard_costs.Costing` of the settings' model: graphs at
    other batches from ``build`` (default: built), the model with its first
    three layers where it is a config (its blocks counted, not built)."""
    from standard_costs import Costing

    def first_layers(micro, layers):
        from models.sources import build_first_layers

        return build_first_layers(s.graph, layers, **{**_model_params(s), "batch": micro})

    return Costing(build or (lambda micro: _micro_graph(s, micro)), model, s.procs, batch, first_layers, chain)


def _standard_pipeline(s: Settings, std, model, graphs: dict | None = None):
    """A standard configuration with pipeline stages, costed: Megatron-LM's
    layout (the blocks split evenly, the embedding in the first stage, the
    head in the last)."""
    import pipeline
    from standard import strategy

    batch = _model_batch(s)
    micro = std.microbatch * std.dp  # the samples of a micro-batch over the data-parallel groups
    if graphs is not None and micro in graphs:  # built already (a search over configurations)
        g, chain = graphs[micro]
    else:
        g = _micro_graph(s, micro)
        chain = _chain(g)
        if graphs is not None:
            graphs[micro] = (g, chain)
    if chain is not None:
        counts = pipeline._even(chain.count, std.pp)
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
        raise InputError("--plan: the interleaved schedule splits stages into chunks of blocks; "
                         f"{g.graph['name']} has no repeated blocks")
    if sched.name == "interleaved" and any(c % sched.chunks for c in counts):
        raise InputError(f"--plan: interleaved:{sched.chunks} needs each stage's blocks ({counts[0]}) to divide "
                         f"into {sched.chunks} chunks")
    pipe = pipeline.evaluate(g, model, s.procs, std.pp, m, micro, sched, ranges, strategy(g, std))
    return pipeline.as_result(g, pipe, model, s.procs, batch, "evaluate",
                              label=f"standard configuration {std.describe()}")
