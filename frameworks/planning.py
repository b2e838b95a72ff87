"""The framework a run's settings name, resolved once by the planner
(``planner.cost_model_for``), and the cluster fields it sets by default."""

from __future__ import annotations

from dataclasses import replace

from errors import InputError, SettingError

__all__ = ["framework_for", "framework_cluster", "framework_defaults", "recorded_defaults", "stated",
           "FRAMEWORK_FIELDS"]


def framework_for(s, recorded: dict, cluster, file: dict):
    """The framework the settings ``s`` name (:mod:`frameworks`):
    ``--framework``, else the ``--plan`` specification's, the cluster
    file's (``file``), the plan file's record; ``--compile`` and
    ``--float8`` and ``--tp-overlap`` (or the file's, or the record's) turn
    on what they name.
    ``None``: no framework (the tool's own model)."""
    import frameworks

    rec = recorded.get("framework") if isinstance(recorded.get("framework"), dict) else {}
    for key in ("compiled", "float8", "sp", "tp_overlap", "deepep"):  # a plan file's switches
        if key in rec and not isinstance(rec[key], bool):
            raise InputError(f"--evaluate: {s.evaluate}: framework.{key} must be true or false, got "
                             f"{rec[key]!r}")
    name = s.framework
    if name is None and s.plan is not None:
        from standard import parse

        name = parse(s.plan).framework
    if name is None:
        name = file.get("framework", rec.get("name"))
    compiled = bool(s.compile or file.get("compile") or rec.get("compiled"))
    float8 = bool(s.float8 or file.get("float8") or rec.get("float8"))
    overlap = bool(s.tp_overlap or file.get("tp_overlap") or rec.get("tp_overlap"))
    deepep = bool(s.deepep or file.get("deepep"))
    if s.recompute_modules is not None:
        modules = _modules(s.recompute_modules, None)
    else:
        modules = _modules(file.get("recompute_modules"), f"--cluster: {s.cluster}: recompute_modules")
    try:  # sequence parallelism as the plan file recorded it (a --plan sets its own)
        fw = frameworks.resolve(name, compiled=compiled, float8=float8, sp=bool(rec.get("sp")), tp_overlap=overlap)
    except SettingError as e:
        raise InputError(f"--evaluate: {s.evaluate}: {e}") from None
    if fw is not None:  # DeepEP and the recomputed modules: the flag's or the cluster file's, else the plan file's
        # record where the framework in force has the switch (a Megatron plan file evaluated under another drops them)
        if fw.deepep_by:
            deepep = deepep or bool(rec.get("deepep"))
        if fw.recompute_modules_by and not modules:
            modules = _modules(rec.get("recompute_modules"), f"--evaluate: {s.evaluate}: framework.recompute_modules")
        fw = replace(fw, deepep=deepep, recompute_modules=modules or fw.recompute_modules)
    if overlap:
        if fw is None or not fw.tp_overlap_by:
            raise SettingError("tp_overlap", "needs --framework megatron (--tp-comm-overlap) or torchtitan "
                                             "(asynchronous tensor parallelism)")
        if fw.tp_overlap_compiled and not fw.compiled:
            raise SettingError("tp_overlap", f"needs --compile under {fw.title} ({fw.tp_overlap_by} runs under "
                                             "torch.compile)")
        if not cluster.realistic:
            raise SettingError("tp_overlap", "needs a real device (--device h100, ...): the paper's model prices "
                                             "no overlap")
        if s.plan is None and s.evaluate is None and s.search != "standard":
            raise SettingError("tp_overlap", "overlaps the all-gathers and reduce-scatters of sequence "
                                             "parallelism: give a plan with it (--plan ...,sp=1), --search standard "
                                             "or --evaluate a plan file")
    if modules and (fw is None or not fw.recompute_modules_by):
        raise SettingError("recompute_modules", "needs --framework megatron (its --recompute-modules)")
    if deepep and (fw is None or not fw.deepep_by):
        raise SettingError("deepep", "needs --framework megatron (--moe-flex-dispatcher-backend deepep)")
    if fw is None and compiled:
        raise SettingError("compile", "needs --framework torchtitan or deepspeed (torch.compile of their eager "
                                      "kernels)")
    if fw is None and float8:
        raise SettingError("float8", "needs --framework megatron, torchtitan or deepspeed")
    if compiled and fw.kernels != "eager":  # refused where asked beside the framework: the flag, or a cluster
        # file's compile with the framework it names in force (a plan record, or a cluster file under another
        # framework, carries it along)
        why = (f"changes nothing under {fw.title}, whose kernels are fused already (torch.compile applies to "
               "--framework torchtitan or deepspeed)")
        if s.compile:
            raise SettingError("compile", why)
        if file.get("compile") and file.get("framework") == name:
            raise InputError(f"--cluster: {s.cluster}: compile {why}")
    if fw is not None and fw.float8 and not (cluster.realistic and cluster.fp8_flops):
        from cluster.presets import DEVICES

        with_fp8 = ", ".join(name for name, d in DEVICES.items() if d.fp8)
        raise SettingError("float8", f"needs a device with an FP8 peak (--device {with_fp8}, or --fp8-flops)")
    return None if fw is None else fw.on_device(cluster.device)


def _modules(given, where: str | None) -> tuple:
    """The modules a run's selective recomputation names: a comma-separated
    text (a flag, a file) or a list of names (a file), each one of
    ``options.base.MODULES``, none twice; ``()`` where none is given (a
    record's empty list: the profile's own).  ``where`` names the file
    and key in a refusal (``None``: the flag)."""
    from options.base import MODULES

    if given is None or (isinstance(given, list) and not given):
        return ()
    names = given.split(",") if isinstance(given, str) else given
    if isinstance(names, (list, tuple)) and all(isinstance(x, str) for x in names):
        names = [x.strip().lower() for x in names]
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(x, str) and x in MODULES
                                                                     for x in names) or len(set(names)) < len(names):
        why = f"must name some of {', '.join(MODULES)}, each once, comma-separated, got {given!r}"
        if where is None:
            raise SettingError("recompute_modules", why)
        raise InputError(f"{where} {why}")
    return tuple(names)


#: the cluster fields a framework sets by default (:func:`framework_cluster`)
FRAMEWORK_FIELDS = ("grad_precision", "bucket_mb", "overlap", "attention_eff", "headroom", "host_ms")


def framework_defaults(fw, cluster) -> dict:
    """The cluster fields ``fw`` sets on ``cluster`` where nothing else sets
    them: the gradients' precision, their buckets, the overlap, the share
    of the peak its attention kernel reaches on the device
    (``cluster.presets.attention_share``; none where no figure is known),
    the host's time to launch a dropless expert layer (on a real device),
    and the headroom, which becomes what the framework holds beyond
    tensors at the device's capacity (its allocator's reserve, the CUDA
    context and NCCL's buffers), so that a plan's tensors fit exactly when
    the whole process does."""
    from cluster.presets import attention_share

    out = {"grad_precision": fw.grad_precision or cluster.precision, "bucket_mb": fw.bucket_mb,
           "overlap": fw.overlap}
    if cluster.realistic:  # its host's launches of a dropless expert layer (frameworks.host)
        out["host_ms"] = fw.moe_host_ms
    if fw.attention_kernel and cluster.realistic:
        share = attention_share(fw.attention_kernel, cluster.device)
        if share is not None:
            out["attention_eff"] = share
    if cluster.device_memory is not None:
        reserve, outside = fw.beyond(1.0)
        if cluster.device_memory > outside / 1e9:  # else no room for tensors (refused where it is used)
            tensors = (cluster.device_memory - outside / 1e9) / (1.0 + reserve)
            out["headroom"] = round(cluster.device_memory - tensors, 6)
    return out


def recorded_defaults(recorded: dict, where: str) -> set:
    """The fields of a plan file's recorded cluster that were defaults, not
    someone's choice: what its framework or the device supplied (the
    record's ``framework.supplied``), or, in a record that does not say
    (written without a framework, or before records said), the
    :data:`FRAMEWORK_FIELDS` at a value given by default: by its framework
    (and the device's attention share, which frameworks did not set
    before they named kernels), or without one by the tool or the device
    preset.  Evaluating the file, the framework in force
    (or none) supplies its own in their place; the other fields stay the
    record's."""
    from cluster import Cluster
    from cluster.config import resolve
    from cluster.presets import device as preset

    rec_fw = recorded.get("framework") if isinstance(recorded.get("framework"), dict) else None
    cl = recorded.get("cluster") if isinstance(recorded.get("cluster"), dict) else {}
    if rec_fw is not None and "supplied" in rec_fw:
        said = rec_fw["supplied"]
        if not isinstance(said, list) or any(k not in FRAMEWORK_FIELDS for k in said):
            raise InputError(f"--evaluate: {where}: framework's supplied must list some of "
                             f"{', '.join(FRAMEWORK_FIELDS)}, got {said!r}")
        return set(said)
    usual = {k: set() for k in FRAMEWORK_FIELDS}
    name, precision = cl.get("device"), cl.get("precision")
    try:
        on = preset(name, precision) if name and precision else {}
        if rec_fw is None:  # the tool's own defaults, and the device's
            tool = Cluster()
            for k in usual:
                usual[k] = {getattr(tool, k), *([on[k]] if k in on else [])}
        else:  # its framework set its own defaults (and the attention's share was the device's, before kernels)
            import frameworks

            if "attention_eff" in on:
                usual["attention_eff"].add(on["attention_eff"])
            base = resolve({}, recorded={k: v for k, v in cl.items() if v is not None})
            for k, v in framework_defaults(frameworks.known(rec_fw.get("name")), base).items():
                usual[k].add(v)
    except (SettingError, TypeError, ValueError):  # a record the reading refuses elsewhere, or by hand
        pass
    return {k for k in FRAMEWORK_FIELDS if cl.get(k) is not None and cl[k] in usual[k]}


def stated(s, file: dict) -> set:
    """The cluster fields the settings ``s`` (a flag) or the cluster file's
    fields ``file`` give."""
    from settings import CLUSTER_SETTINGS

    return {k for k in CLUSTER_SETTINGS if getattr(s, k) is not None} | set(file)


def framework_cluster(s, recorded: dict, cluster, fw, file: dict, where: str = ""):
    """``cluster`` with the framework's defaults (:func:`framework_defaults`)
    where no flag, cluster file or plan file's record (what
    :func:`recorded_defaults` leaves of it) set them, and the names of the
    :data:`FRAMEWORK_FIELDS` nothing set (the framework's or the device's
    defaults: what a plan file records as its framework's ``supplied``)."""
    given = stated(s, file)
    rec = recorded.get("cluster") if isinstance(recorded.get("cluster"), dict) else {}
    given |= {k for k, v in rec.items() if v is not None} - recorded_defaults(recorded, where)
    if "headroom" not in given and cluster.device_memory is not None:
        outside = fw.beyond(1.0)[1] / 1e9
        if cluster.device_memory <= outside:
            raise SettingError("device_memory", f"({cluster.device_memory:g} GB) must exceed the {outside:.3g} GB "
                                                f"{fw.title} holds outside its tensors (the CUDA context and NCCL's "
                                                "buffers)")
    changes = {k: v for k, v in framework_defaults(fw, cluster).items() if k not in given}
    return replace(cluster, **changes), tuple(k for k in FRAMEWORK_FIELDS if k not in given)
