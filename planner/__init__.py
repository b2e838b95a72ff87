"""From settings to a planned result: the library's entry point.

:func:`plan` does what a :class:`settings.Settings` asks, without printing
or writing anything: it builds the model's graph, resolves the cluster (a
device preset, a cluster file, a plan file's record, the settings) and the
cost model, then either searches for the best plan (within the device
memory when the cluster has a capacity) or costs the plan a plan file
holds (``evaluate``), and costs the baselines asked for.  The command line
(``cli/``) and the sweeps (``studies/``) both call it::

    >>> from settings import Settings
    >>> planned = plan(Settings(graph="alexnet", procs=8))
    >>> round(planned.result.total_cost)
    97098296512
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import NamedTuple

from errors import InputError, SettingError
from planner.configurations import (_accumulation, _search_standard, _standard_pipeline,  # noqa: F401
                                    _standard_result, standard_costing)
from planner.graphs import _chain, pipe_graph  # noqa: F401
from planner.job import Job
from planner.whole import _plain
from settings import CLUSTER_SETTINGS, MODEL_PARAMS, OPTION_SETTINGS, Settings

__all__ = ["Planned", "plan", "cost_model_for", "cluster_for", "Job"]


class Planned(NamedTuple):
    """What :func:`plan` returns: the settings (completed by a plan file's
    record), the graph, the result, and with ``profile`` the profile of the
    search as text."""

    settings: Settings
    graph: object
    result: object
    profile: str | None = None


def _with_file_settings(s: Settings, recorded: dict) -> Settings:
    """Settings not given explicitly come from the plan file."""
    from models import MODELS

    names = ("graph", "procs", "distinct_rows") + MODEL_PARAMS
    updates = {k: recorded[k] for k in names if k in recorded and k not in s.explicit}
    if "graph" in updates and "model" in recorded:
        updates["graph"] = _find_model(recorded["model"], s.evaluate)
    elif "graph" in updates and updates["graph"] not in MODELS:
        raise InputError(f"--evaluate: the file names an unknown graph {updates['graph']!r}")
    merged = replace(s, **updates)
    if merged.graph in MODELS:
        takes = {p.name for p in MODELS[merged.graph].params}
        stray = [k for k in MODEL_PARAMS if k in updates and k not in takes]
        if stray:
            theirs = recorded["model"].get("source") if isinstance(recorded.get("model"), dict) else recorded.get("graph")
            if theirs is not None and theirs != merged.graph:  # the graph named another model: say that first
                raise InputError(f"--evaluate: {s.evaluate} is a strategy for {theirs}, not for {merged.graph}")
            raise InputError(f"--evaluate: the file records {stray[0]} {updates[stray[0]]!r}, "
                             f"but {merged.graph} has no such parameter")
    return merged


def cluster_for(s: Settings, recorded: dict | None = None):
    """The :class:`cluster.Cluster` the settings, a cluster file, a device
    preset and a plan file's record describe (see ``cluster/config.py``)."""
    from cluster.config import RUN_KEYS, check_fields, resolve

    recorded = recorded or {}
    file_fields = None
    if s.cluster is not None:
        file_fields = {k: v for k, v in _cluster_file(s).items() if k not in RUN_KEYS}
    old = recorded.get("cluster")
    try:
        if isinstance(old, dict):  # checked whole first: a top-level figure that differs (edited by hand) is used
            check_fields(old, str(s.evaluate))
            old = {**old, **{k: recorded[k] for k in ("flops", "bw") if k in recorded and recorded[k] != old.get(k)}}
        else:  # files written before the cluster was recorded
            old = {k: recorded[k] for k in ("flops", "bw") if k in recorded}
        old = check_fields(old, str(s.evaluate))
    except ValueError as e:
        raise InputError(f"--evaluate: {e}") from None
    if recorded:  # what the record's framework (or the device) supplied is supplied again by what is in force now
        from frameworks.planning import recorded_defaults

        dropped = recorded_defaults(recorded, str(s.evaluate))
        old = {k: v for k, v in old.items() if k not in dropped}
    try:
        cluster = resolve({k: getattr(s, k) for k in CLUSTER_SETTINGS if k != "device"}, device=s.device,
                          file_fields=file_fields, recorded=old)
    except SettingError as e:  # a value, or a pair of them, out of bounds: named where it was given
        keys = e.name.split(" and ")
        if not any(getattr(s, k, None) is not None for k in keys):
            for where, fields in ((f"--cluster: {s.cluster}", file_fields), (f"--evaluate: {s.evaluate}", old)):
                if fields and any(k in fields for k in keys):
                    raise InputError(f"{where}: {e.name} {e.problem}") from None
        raise
    if cluster.gpus_per_node is None:  # the network between nodes means nothing without nodes
        between = ("inter_bw", "network", "net_eff", "inter_latency")
        flag = next((k for k in between if getattr(s, k) is not None), None)
        if flag is not None:
            raise SettingError(flag, "needs --gpus-per-node (or a cluster file or --device giving the devices "
                                     "per node): without nodes every pair of devices is joined at --bw")
        key = next((k for k in between if k in (file_fields or {})), None)
        if key is not None:
            raise InputError(f"--cluster: {s.cluster}: {key} needs gpus_per_node (or --gpus-per-node or "
                             "--device): without nodes every pair of devices is joined at bw")
    return cluster


def _find_model(model: dict, path: str) -> str:
    """The model file a plan file names: where it was, or beside the plan."""
    for where in (model.get("path"), os.path.join(os.path.dirname(path), model["source"])):
        if isinstance(where, str) and where and os.path.exists(where):
            return where
    raise InputError(f"--evaluate: {path} is a strategy for {model['source']}, which is not at "
                     f"{model.get('path') or model['source']}; give the model with -g")


def _cluster_file(s: Settings) -> dict:
    """The cluster file's fields (and framework keys), or none."""
    from cluster.config import read_cluster_file

    if s.cluster is None:
        return {}
    try:
        return read_cluster_file(s.cluster)
    except ValueError as e:
        raise InputError(f"--cluster: {e}") from None


def cost_model_for(s: Settings, recorded: dict | None = None):
    """The :class:`cost_model.CostModel` the settings (and a plan file's
    record) ask for, with the framework they name
    (:func:`frameworks.planning.framework_for`)."""
    from cost_model import CostModel

    recorded = recorded or {}
    rules = {}
    if s.sparse_embeddings:
        rules = {"embedding_lookup": True, "embedding_sync": "best"}
    elif "embedding_lookup" in recorded or "embedding_sync" in recorded:
        rules = {k: recorded[k] for k in ("embedding_lookup", "embedding_sync") if k in recorded}
    optimizer = s.optimizer if s.optimizer is not None else recorded.get("optimizer", "adam")
    from frameworks.planning import framework_cluster, framework_for

    cluster = cluster_for(s, recorded)
    file = _cluster_file(s)
    fw = framework_for(s, recorded, cluster, file)
    if fw is not None:
        cluster, supplied = framework_cluster(s, recorded, cluster, fw, file, str(s.evaluate))
        fw = replace(fw, supplied=supplied)
    try:
        return CostModel(cluster, distinct_rows=s.distinct_rows, optimizer=optimizer, options=options_for(s),
                         framework=fw, **rules)
    except SettingError as e:  # a value the plan file gave, not a flag: named in the file
        given = {"optimizer": s.optimizer is not None, "distinct_rows": "distinct_rows" in s.explicit,
                 "embedding_sync": s.sparse_embeddings, "embedding_lookup": s.sparse_embeddings}
        if e.name in recorded and not given.get(e.name, True):
            raise InputError(f"--evaluate: {s.evaluate}: {e.name} {e.problem}") from None
        raise


def options_for(s: Settings) -> tuple:
    """The execution options the settings fix or search: ``(name, value)``
    pairs, ``"auto"`` for searched (a written value read as the option's)."""
    from options import OPTIONS

    out = []
    for name in OPTION_SETTINGS:
        text = getattr(s, name)
        if text is not None:
            out.append((name, "auto" if str(text) == "auto" else OPTIONS[name].parse(str(text))))
    return tuple(out)


def plan(s: Settings, *, baselines=None, progress=None, graphs: dict | None = None) -> Planned:
    """The computation ``s`` asks for (see the module docstring), with
    ``baselines`` (keys; default: all three with ``compare``, else none).
    ``progress(what, unit)``, when given, makes a progress callback
    ``(done, total)`` with a ``close()`` for each long step.  ``graphs``
    (batch -> graph): the model's graphs built already, for the settings'
    model parameters (the standard search's, for the per-operator plan
    beside it), used rather than built again."""
    from conflicts import check_given_plan, check_timing
    from plan_file import decisions, read

    file = None
    recorded = {}
    check_given_plan(s)
    check_timing(s)
    if s.evaluate is not None:
        try:
            file = read(s.evaluate, MODEL_PARAMS)
        except InputError as e:
            raise InputError(f"--evaluate: {e}") from None
        recorded = file.recorded
        check_given_plan(s, recorded)
        s = _with_file_settings(s, recorded)
    from_file = {k for k in ("procs",) + MODEL_PARAMS if k in recorded and k not in s.explicit}

    from cost_model import check_procs, evaluate, make_result
    from dp_search import DoesNotFit, default_memory_limit
    from graph import operators

    try:
        check_procs(s.procs)
        from planner.defaults import with_defaults

        given_pp = s.pp
        s = with_defaults(s, cluster_for(s, recorded))  # what a real device searches unless a flag fixes it
        # stages searched by default compete with none at all (the whole batch at once); --pp auto searches stages
        with_plain = given_pp is None and s.pp == "auto" and s.microbatches in (None, "auto")
        model = cost_model_for(s, recorded)
        limit = default_memory_limit() if s.mem_limit_gb is None else int(s.mem_limit_gb * 1e9)
        job = Job.of(s, model, limit, graphs)  # what the stages below read: the settings are not passed on
        g = job.graph()
        if s.require_fit and model.cluster.capacity is None:
            raise SettingError("require_fit", "needs a device memory to fit: give --device, --device-memory or a "
                                              "cluster file giving one")
    except SettingError as e:  # a value the plan file gave, not a flag: named in the file
        if (key := "procs" if e.name == "p" else e.name) in from_file:
            raise InputError(f"--evaluate: {s.evaluate}: {key} {e.problem}") from None
        raise
    if with_plain and job.chain() is None:  # stages by default cut repeated blocks: without any, none are searched
        s, with_plain = replace(s, pp=None), False
    profile = None
    pipelined = s.pp not in (None, 1) or s.microbatches is not None or "pipeline" in recorded
    if s.schedule is not None and s.pp in (None, 1) and s.plan is None:
        raise InputError("--schedule orders a pipeline's stages: give --pp N or --pp auto")
    found = None
    if s.search == "standard":
        if s.plan is not None or s.evaluate is not None or pipelined:
            raise InputError("--search standard searches what --plan, --evaluate, --pp and --microbatches give: "
                             "give none of them")
        given = [f"--{k}" for k in ("recompute", "zero") if getattr(s, k) is not None]
        if given:
            raise InputError(f"--search standard searches {' and '.join(given)} with the rest: give "
                             f"{'them' if len(given) > 1 else 'it'} with --plan to fix a value")
        from planner.defaults import what_would_fit

        found, result = _search_standard(job, progress, lambda need: what_would_fit(s, model.cluster, need,
                                                                                    standard=True))
        s = replace(s, plan=found.best.spec())
    if found is not None:
        pass  # the search's answer, costed already
    elif s.plan is not None:
        if s.evaluate is not None:
            raise InputError("--plan and --evaluate each give the plan to cost: give one")
        from standard import check_roles, complete, parse

        spec = parse(s.plan)
        check_roles(g, spec)  # a degree the model cannot take, said before the devices' arithmetic
        std = complete(spec, s.procs, g.graph["batch"])
        result = _standard_result(job, std)
        refused = model.framework.refuses(std, g.graph.get("active_parameters") is not None) \
            if model.framework is not None else ""
        if refused:  # costed as asked, for comparison; the search does not try it
            result = replace(result, notes=result.notes + (
                f"{refused}: costed as given, though the framework would not run it (--search standard tries "
                f"only what it runs).",))
    elif pipelined and file is not None:
        from planner.recorded import recorded_pipeline

        result = recorded_pipeline(job, file, s.evaluate)
    elif pipelined:
        from planner.staged import pipelined

        result, profile = pipelined(s, job, progress, with_plain)
    elif file is not None:
        from planner.recorded import check_model

        check_model(g, recorded, s.evaluate)
        try:
            strategy = decisions(g, file, s.procs)
        except InputError as e:
            raise InputError(f"--evaluate: {e}") from None
        rules_from = s.evaluate if not s.sparse_embeddings and any(
            k in recorded for k in ("embedding_lookup", "embedding_sync")) else None
        result = make_result(g, evaluate(g, strategy, model, s.procs), model, s.procs, "evaluate",
                             source=s.evaluate, rules_from=rules_from)
        most = max(d.devices for d in strategy)
        if most < s.procs:
            result = replace(result, notes=result.notes + (
                f"This strategy uses at most {most} of the {s.procs} devices.",))
    else:
        try:
            result, profile = _plain(job, progress)
        except DoesNotFit as e:
            from planner.defaults import what_would_fit

            raise MemoryError(f"{e}{what_would_fit(s, model.cluster, e.least)}") from None
    if s.distinct_rows is not None:
        why = None
        if not any(op.kind.sparse_rows for op in operators(g)):
            why = f"{g.graph['name']} has no embedding"
        elif model.embedding_sync == "dense" and not s.compare:
            why = "embedding gradients are all-reduced densely (use --sparse-embeddings or --compare)"
        if why:
            result = replace(result, notes=result.notes + (f"--distinct-rows has no effect here: {why}.",))
    result = replace(result, notes=result.notes + _unused_switches(g, result, model.framework))
    if g.graph.get("active_parameters") is not None:  # a mixture of experts
        result = replace(result, active_parameters=g.graph["active_parameters"])
        if model.cluster.realistic:  # a limit of the time model the published runs show
            from frameworks.host import host_ms

            fw, ms = model.framework, host_ms(model)
            whose = f"{fw.title}'s" if fw is not None and "host_ms" in fw.supplied else "the given"
            host = (f"each dropless expert layer at least {whose} {ms:g} ms of host launches a micro-batch" if ms
                    else "not a dropless layer's host launches")
            result = replace(result, notes=result.notes + (
                f"A mixture of experts: the step prices the experts' products and their all-to-all (DeepEP's "
                f"dispatch with --deepep), {host}; not the kernels' own sizes, and some published "
                f"mixture-of-experts runs are still missed widely (docs/frameworks.md).",))
    if g.graph.get("notes"):  # what the model itself has to say (a sequence beyond its positions)
        result = replace(result, notes=tuple(g.graph["notes"]) + result.notes)
    if found is not None:
        result = replace(result, notes=result.notes + (
            f"Best standard configuration of {found.costed + found.skipped} points ({found.costed} costed, "
            f"{found.skipped} bounded out before costing; {found.unfit} did not fit, {found.invalid} structures the "
            f"model cannot take): {found.best.describe()}{_accumulation(found.best, g.graph['batch'])}.",))
    idle = _idle_note(result, model, s.procs)
    if idle:
        result = replace(result, notes=result.notes + (idle,))
    from baselines import BASELINES, compare

    keys = baselines if baselines is not None else (BASELINES if s.compare else ())
    if keys:
        result = result.with_baselines(compare(g, s.procs, model, keys))
    if found is not None and s.compare:  # the per-operator optimum beside it, and the gap
        result = _beside_the_optimum(s, result, found.best, g.graph["batch"], progress, job.graphs())
    if not math.isfinite(result.total_cost):
        raise InputError("the total cost is not a finite number; choose realistic --flops and --bw")
    return Planned(s, g, result, profile)


def _beside_the_optimum(s: Settings, result, best, batch: int, progress, graphs):
    """``result`` (the best standard configuration ``best``) with the
    per-operator optimum among its baselines and the gap in its notes: the
    search over the same options, and over stages and micro-batches when
    the standard configuration uses them (on a real device beside the plan
    without either, as the default search does), on the graphs the
    standard search built (``graphs``, batch -> graph)."""
    from planner.defaults import real_device

    staged = best.pp > 1 or best.microbatch * best.dp < batch
    if staged and real_device(s, result.cost_model.cluster):  # stages and micro-batches beside none at all
        stages = {"pp": None, "microbatches": None}
    else:
        stages = {"pp": "auto", "microbatches": "auto"} if staged else {"pp": 1}
    per_op = replace(s, search=None, plan=None, compare=False, recompute="auto", zero="auto", batch=batch, **stages)
    try:
        optimum = plan(per_op, baselines=(), progress=progress, graphs=graphs).result
    except MemoryError as e:
        return replace(result, notes=result.notes + (f"No per-operator plan to compare with: {e}",))
    optimum = replace(optimum, key="per_operator", title="per-operator", label="per-operator optimum (PaSE)")
    result = result.with_baselines(result.baselines + (optimum,))
    gap = 1.0 - optimum.total_cost / result.total_cost  # the table's convention: the share of the cost saved
    why = ("its search does not see what its expert layers wait on the host" if optimum.host > 0 else
           "its search does not see its blocks' collectives pooled under their passes"
           if result.pooled > optimum.pooled else "its search is bounded")
    if gap > 1e-9:
        note = (f"The per-operator optimum costs {100 * gap:.1f}% less than the best standard configuration "
                f"({result.total_cost / optimum.total_cost:.2f}x faster)")
    elif gap < -1e-9:
        note = (f"The per-operator plan found costs {100 * -gap:.1f}% more than the best standard configuration "
                f"({why})")
    else:
        note = "The best standard configuration is as fast as the per-operator optimum"
    return replace(result, notes=result.notes + (note,))


def _idle_note(result, model, p: int) -> str:
    """A warning when the plan leaves most of the devices idle: most
    operators, and most of the work, on one device.  Such a plan is the
    optimum where moving a tensor costs more than the work it would spread
    (a small model, a small batch, the paper's 16 GB/s against 10 TFLOPS),
    and its speed-up over data parallelism is that of idle devices."""
    layers = result.layers
    work = math.fsum(layer.compute for layer in layers)
    if p < 2 or len(layers) < 2 or not work > 0 or result.pipeline is not None:  # a stage's own devices
        return ""
    alone = [layer for layer in layers if layer.devices == 1]
    share = math.fsum(layer.compute for layer in alone) / work
    if len(alone) * 2 <= len(layers) or share <= 0.5:
        return ""
    why = ("the paper's model charges 16 GB/s links against 10 TFLOPS; a --device preset prices both as a GPU does"
           if not model.cluster.realistic else "the batch is too small to spread over the devices")
    return (f"{len(alone)} of {len(layers)} operators ({100 * share:.0f}% of the work) run on one device of the {p}: moving their tensors costs more than the work it would "
            f"spread ({why}); the others stay idle.")


def _unused_switches(g, result, fw) -> tuple:
    """Notes on the framework's switches the plan gives nothing to do:
    ``--deepep`` without a mixture of experts, ``--recompute-modules``
    where no block is recomputed selectively or the model has none of the
    modules."""
    if fw is None:
        return ()
    out = []
    if fw.deepep and g.graph.get("active_parameters") is None:
        out.append("--deepep has no effect here: the model has no mixture of experts.")
    if not fw.modules_named:
        return tuple(out)
    if not any(x.decision.option("recompute") == "selective" for x in result.layers):
        out.append("--recompute-modules has no effect here: no block of the plan is recomputed selectively "
                   "(recompute=selective).")
    elif "core_attn" not in fw.recompute_modules:  # the modules named apart from the attention core: has it one?
        from blocks import find_chains
        from options.base import contexts

        if not any(c.module in fw.recompute_modules for c in contexts(g, find_chains(g))):
            out.append(f"--recompute-modules has no effect here: {g.graph['name']} has no "
                       f"{' or '.join(sorted(fw.recompute_modules))} module apart from a fused product.")
    return tuple(out)

