"""A plan file's pipeline, costed again (``--evaluate``): its record read
and checked (whole counts, ``pp`` stages covering the operators in order,
``m`` micro-batches of ``micro`` samples making its batch), then costed at
the job's batch, as many of its micro-batches as that batch holds."""

from __future__ import annotations

from dataclasses import replace

from errors import InputError
from planner.job import Job

__all__ = ["recorded_pipeline", "check_model"]


def check_model(g, recorded: dict, path: str) -> None:
    """Refuse a plan file written for another model than ``g``."""
    source = g.graph.get("source")
    mine = f"{source['file']} (sha256 {source['sha256'][:12]})" if source else g.graph["name"]
    model = recorded.get("model")
    if model is not None:
        if source is None or source["sha256"] != model["sha256"]:
            raise InputError(f"--evaluate: {path} is a strategy for {model['source']} "
                             f"(sha256 {model['sha256'][:12]}), not for {mine}")
    elif "graph" in recorded and (source is not None or recorded["graph"] != g.graph["name"]):
        raise InputError(f"--evaluate: {path} is a strategy for {recorded['graph']}, not for {mine}")


def recorded_pipeline(job: Job, file, path: str):
    """The pipelined plan a plan file records, costed again."""
    import pipeline
    from plan_file import decisions

    rec = file.recorded["pipeline"]
    try:
        pp, m, micro = (_whole(rec, key) for key in ("pp", "m", "micro"))
        replicas = _whole(rec, "replicas") if "replicas" in rec else 1  # a standard configuration's dp, as reported
        sched = pipeline.parse_schedule(rec["schedule"])
        ranges = [tuple(r) for r in rec["stages"]]
        if not all(type(x) is int for r in ranges for x in r):
            raise ValueError(f"stages must be pairs of operator numbers, got {rec['stages']!r}"[:200])
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"--evaluate: {path}: the pipeline record is not one this tool wrote ({e})") from None
    if len(ranges) != pp:
        raise InputError(f"--evaluate: {path}: the pipeline record has pp = {pp} but "
                         f"{len(ranges)} stage{'s' * (len(ranges) != 1)}")
    if job.procs % pp:
        raise InputError(f"--evaluate: {path}: the pipeline's {pp} stages do not divide the {job.procs} devices")
    batch = file.recorded.get("batch")
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise InputError(f"--evaluate: {path}: the plan file's batch must be a whole number beside its pipeline, "
                         f"got {batch!r}")
    if m * micro != batch:
        raise InputError(f"--evaluate: {path}: the pipeline's {m} micro-batches of {micro} samples are not the "
                         f"plan's batch of {batch}")
    if job.batch % micro:  # another batch (-b): as many micro-batches of the plan's size as it holds
        raise InputError(f"-b {job.batch} is not a whole number of the pipeline's micro-batches of {micro} samples "
                         f"({path})")
    m = job.batch // micro
    if sched.v > 1 and m < pp:  # as --pp and --plan refuse it
        raise InputError(f"-b {job.batch} makes {m} of the pipeline's micro-batches of {micro} samples; its "
                         f"interleaved schedule needs at least as many as its {pp} stages ({path})")
    gm = job.graph(micro)
    check_model(gm, file.recorded, path)  # before its operators are read: another model's would not fit them
    try:
        strategy = decisions(gm, file, job.procs // pp)
    except InputError as e:
        raise InputError(f"--evaluate: {e}") from None
    _check_ranges(ranges, gm.number_of_nodes(), path)
    if sched.v > 1:  # its chunks, as --plan takes them
        chain = job.chain(micro)
        if chain is None:
            raise InputError(f"--evaluate: {path}: {pipeline.unblocked_error(gm.graph['name'])}")
        counts = [b - a for a, b in (pipeline.stage_blocks(chain, lo, hi) for lo, hi in ranges)]
        ends = pipeline.cut_as_framework(counts, sched.v, job.model.framework, pipeline.block_layers(gm, chain))
        why = pipeline.chunking_error(counts, sched, ends)
        if why:
            raise InputError(f"--evaluate: {path}: {why}")
    pipe = pipeline.evaluate(gm, job.model, job.procs, pp, m, micro, sched, ranges, strategy)
    if micro % replicas == 0:  # else a record edited by hand: its micro-batches reported whole
        pipe = replace(pipe, replicas=replicas)
    return pipeline.as_result(gm, pipe, job.model, job.procs, job.batch, "evaluate", source=path)


def _whole(record: dict, key: str) -> int:
    """A pipeline record's count ``key``: a whole number, 1 or more."""
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a whole number, 1 or more, got {value!r}")
    return value


def _check_ranges(ranges, n: int, path: str) -> None:
    """Refuse stages that do not cover the ``n`` operators in order."""
    lo = 0
    for r in ranges:
        if len(r) != 2 or r[0] != lo or not r[0] < r[1] <= n:
            raise InputError(f"--evaluate: {path}: the pipeline's stages must cover the operators in order")
        lo = r[1]
    if lo != n:
        raise InputError(f"--evaluate: {path}: the pipeline's stages must cover the {n} operators")
