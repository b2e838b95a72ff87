"""Plan files: the JSON record of a result that ``--output`` and ``--plans``
write and ``--evaluate`` reads back.  This module is the schema's one home:
:func:`record` writes it, :func:`read` reads it.

A plan file holds the setting (``graph``, ``procs``, ``params``, the
``cluster``, the cost model's rules, the ``optimizer``), a model read from
a file (``model``: its name, file, path and SHA-256), the totals, memory
and search statistics, and per layer its ``id``, ``name``, ``op``, ``dims``,
``space``, ``config`` (one split per letter of ``dims``), ``options`` (the
execution options not at their default, e.g. ``{"zero": 3}``) and its
figures.  :data:`READ` lists what ``--evaluate`` reads and which of it
older files may lack.  Everything else is for the reader's information.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from errors import InputError, shown
from result import MEMORY_PARTS, Result

__all__ = ["READ", "record", "pipeline_record", "dumps", "PlanFile", "read", "decisions", "MAX_PLAN_BYTES"]

MAX_PLAN_BYTES = 64 << 20  # a plan file for any built-in graph at p = 10^6 is far smaller

#: what --evaluate reads from a plan file: key -> (accepted types, written by every version of the tool)
READ = {
    "layers": ((list,), True),
    "graph": ((str,), True),
    "procs": ((int,), True),
    "flops": ((int, float), True),  # files before the cluster was recorded: the paper's two figures
    "bw": ((int, float), True),
    "batch": ((int,), True),  # files before "params": batch and width only
    "width": ((int,), True),
    "params": ((dict,), False),
    "cluster": ((dict,), False),
    "optimizer": ((str,), False),
    "distinct_rows": ((int,), False),
    "embedding_lookup": ((bool,), False),
    "embedding_sync": ((str,), False),
    "model": ((dict,), False),
    "pipeline": ((dict,), False),  # a pipelined plan: its stages (pp, m, micro, schedule, stages)
    "framework": ((dict,), False),  # the training framework that ran it: name, compiled, float8, sp, supplied
}
#: per layer: "id" and "config" always, "options" since execution options were planned
LAYER_READ = {"id": (int,), "config": (list,), "options": (dict,)}
_KIND_NAMES = {(str,): "a string", (int,): "an integer", (int, float): "a number", (bool,): "true or false",
               (dict,): "an object", (list,): "a list"}


# -- writing ---------------------------------------------------------------------------


def _layer_record(layer) -> dict:
    rec = {"id": layer.id, "name": layer.name, "op": layer.kind, "dims": layer.dims, "space": list(layer.space),
           "config": list(layer.config), "devices": layer.devices, "compute": layer.compute,
           "communication": layer.communication, "cost": layer.cost, "memory": layer.memory_bytes,
           "weights": layer.weights, "activations": layer.activations}
    if layer.decision.options:
        rec["options"] = dict(layer.decision.options)
    return rec


def model_record(r: Result) -> dict | None:
    """Which model a plan belongs to, for a model read from a file: its
    name, file name, path and SHA-256 (``None`` for a built-in one, named by
    ``graph``)."""
    src = dict(r.model_source)
    if not src:
        return None
    return {"name": r.graph, "source": src["file"], "path": src["path"], "sha256": src["sha256"]}


def pipeline_record(pipe) -> dict:
    """A pipeline's stages as a plan file holds them: ``stages`` the node
    ranges ``[lo, hi)`` that ``--evaluate`` reads, the rest for the reader."""
    return {"pp": pipe.pp, "m": pipe.m, "micro": pipe.micro,
            **({"replicas": pipe.replicas} if pipe.replicas > 1 else {}), "schedule": str(pipe.schedule),
            "stages": [[s.nodes[0], s.nodes[-1] + 1] for s in pipe.stages],
            "step": pipe.step, "sync": pipe.sync, "bubble": pipe.bubble, "bound": pipe.bound or None,
            "stage_figures": [{"stage": s.index, "first_device": s.first, "devices": s.devices, "time": s.time,
                               "sends": s.sends, "sync": s.sync, "memory": s.memory, "in_flight": s.in_flight,
                               **({"host": s.host} if s.host > 0 else {})}  # of time: the wait on the host
                              for s in pipe.stages]}


def record(r: Result) -> dict:
    """The result as the document a plan file holds."""
    from cluster.config import record as cluster_record

    cm, cl = r.cost_model, r.cost_model.cluster
    rec = {
        "graph": r.graph, "procs": r.procs, "batch": r.param("batch"), "width": r.param("width"),
        "params": dict(r.params),
        "flops": cl.flops, "bw": cl.bw, "word_cost": cl.word,
        "algo": r.search.algo if r.search else None,
        "embedding_lookup": cm.embedding_lookup, "embedding_sync": cm.embedding_sync,
        "distinct_rows": cm.distinct_rows,
        "total_cost": r.total_cost, "search_seconds": r.search.seconds if r.search else None,
        "compute": r.compute, "communication": r.communication, "edges_cost": r.edges_cost,
        "operators_cost": r.operators_cost, "comm_bytes_per_device": r.comm_bytes_per_device,
        "step_seconds": r.step_seconds, "cluster": cluster_record(cl), "optimizer": cm.optimizer,
        "memory": {**{k.replace(" ", "_"): x for k, x in zip(MEMORY_PARTS, r.memory)}, "transient": r.transient,
                   "total": r.memory_bytes,
                   "capacity": r.capacity, "fits": r.fits},
        "layers": [_layer_record(layer) for layer in r.layers],
    }
    if r.host > 0:  # what dropless expert layers wait on the host's launches (frameworks.host), of total_cost
        rec["host"] = r.host
    if r.pooled > 0:  # what pooling each block's overlapped collectives saved, out of the operators' communication
        rec["pooled"] = r.pooled
    rec["parameters"] = r.parameters
    if r.active_parameters is not None:
        rec["active_parameters"] = r.active_parameters
    fw = cm.framework
    if fw is not None:  # the framework that runs it (--evaluate takes it again)
        reserve, outside = r.beyond_tensors
        rec["framework"] = {"name": fw.name, "compiled": fw.compiled, "float8": fw.float8, "sp": fw.sp,
                            "tp_overlap": fw.tp_overlap, "deepep": fw.deepep,
                            "recompute_modules": list(fw.recompute_modules),
                            "supplied": list(fw.supplied), "reserved": r.reserved_bytes, "outside": outside}
    if r.pipeline is not None:  # the layers are the micro-batch's graph, each on its stage's devices
        rec["pipeline"] = pipeline_record(r.pipeline)
    if r.model_source:  # a model read from a file: which one (--evaluate checks it)
        rec["model"] = model_record(r)
    if r.search is not None:
        st = r.search
        rec["search"] = {"order": st.order, "largest_K": st.largest_K, "largest_dependent_set":
                         st.largest_dependent_set, "largest_table": st.largest_table, "work": st.work,
                         "pruned": st.pruned, "largest_K_pruned": st.largest_K_pruned,
                         "configurations": st.configurations, "configurations_kept": st.configurations_kept,
                         "work_unpruned": st.work_unpruned, "work_computed": st.work_computed, "prune_seconds": st.prune_seconds,
                         "kernel": st.kernel, "repeated": list(st.repeated)}
        if r.bound is not None:
            b = r.bound
            rec["search"]["within_memory"] = {"capacity": b.capacity, "status": b.status, "lower_bound": b.lower_bound,
                                              "gap": b.gap, "lambda": b.lam, "searches": b.searches,
                                              "least_memory": b.least_memory}
    if r.mode == "baseline":
        rec["label"] = r.label
        rec["in_search_space"] = r.in_search_space
    if r.baselines:
        rec["speedup_over_data_parallel"] = r.speedup()
        rec["baselines"] = {b.key: {**record(b), "speedup_over_data_parallel": r.speedup(b)} for b in r.baselines}
    return rec


def dumps(obj, indent: int = 0) -> str:
    """JSON with one line per key and per list item of dicts: readable and diffable."""
    pad = " " * (indent + 2)
    if isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(k)}: {dumps(v, indent + 2)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        return "[\n" + ",\n".join(pad + json.dumps(x) for x in obj) + "\n" + " " * indent + "]"
    return json.dumps(obj)


# -- reading ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanFile:
    """What ``--evaluate`` takes from a plan file: the settings it records
    (``recorded``: the keys of :data:`READ` it has, a model's parameters
    flattened from ``params``) and ``layers``: ``(id, config, options)``."""

    path: str
    recorded: dict
    layers: tuple


def read(path: str, model_params: tuple[str, ...] = ("batch", "width", "seq", "vocab", "layers")) -> PlanFile:
    """The plan file at ``path``, its recorded keys type-checked; an
    :class:`errors.InputError` naming the file and the key otherwise."""
    from readers import read_json

    data = read_json(path, MAX_PLAN_BYTES, "file this tool wrote")
    if not isinstance(data, dict) or not isinstance(data.get("layers"), list):
        raise InputError(f"{path} has no \"layers\" list")
    layers = []
    for i, layer in enumerate(data["layers"]):
        if not isinstance(layer, dict) or "id" not in layer or "config" not in layer:
            raise InputError(f"{path}: layers[{i}] needs an \"id\" and a \"config\"")
        lid, cfg, opts = layer["id"], layer["config"], layer.get("options", {})
        if isinstance(lid, bool) or not isinstance(lid, int):
            raise InputError(f"{path}: layers[{i}] has id {shown(lid)}, not an integer")
        if not isinstance(cfg, list):
            raise InputError(f"{path}: layer {lid} has config {shown(cfg)}, not a list of integers")
        if not isinstance(opts, dict):
            raise InputError(f"{path}: layer {lid} has options {shown(opts)}, not an object")
        layers.append((lid, cfg, opts))
    recorded = {}
    for key, (kinds, _) in READ.items():
        value = data.get(key)
        if value is None or key == "layers":
            continue
        if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
            raise InputError(f"{path}: {key} is {shown(value)}, not {_KIND_NAMES[kinds]}")
        recorded[key] = value
    params = recorded.pop("params", {})  # the model's parameters (files written before it: batch, width only)
    for key, value in params.items():
        if key in model_params and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise InputError(f"{path}: params.{key} is {shown(value)}, not an integer or a name")
            recorded[key] = value
    model = recorded.get("model")  # a model read from a file: which one
    if model is not None and not all(isinstance(model.get(k), str) for k in ("source", "sha256")):
        raise InputError(f"{path}: \"model\" must name the model's file (source) and its sha256")
    return PlanFile(path, recorded, tuple(layers))


def decisions(g, plan: PlanFile, p: int | None = None) -> list:
    """One :class:`config_space.Decision` per node of ``g`` from the plan
    file's layers, each checked (with ``p``: the devices it uses too)."""
    from config_space import Decision
    from graph import operators

    n = g.number_of_nodes()
    by_id = {}
    for lid, cfg, opts in plan.layers:
        if not 0 <= lid < n:
            raise InputError(f"{plan.path}: layer id {lid} is not a node of {g.graph['name']} (0..{n - 1})")
        if lid in by_id:
            raise InputError(f"{plan.path}: layer {lid} appears twice")
        by_id[lid] = (cfg, opts)
    missing = [v for v in range(n) if v not in by_id]
    if missing:
        listed = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise InputError(f"{plan.path}: {len(missing)} of the {n} operators of {g.graph['name']} "
                         f"have no configuration ({listed})")
    ops = operators(g)
    try:
        return [Decision.of(ops[v], by_id[v][0], p, by_id[v][1], f"node {v} ({ops[v].name})") for v in range(n)]
    except InputError as e:
        raise InputError(f"{plan.path}: {e}") from None
