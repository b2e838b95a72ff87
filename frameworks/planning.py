"""The framework a run's settings name, resolved once by the planner
(``planner.cost_model_for``), and the cluster fields it sets by default."""

from __future__ import annotations

from dataclasses import replace

from errors import InputError, SettingError

__all__ = ["framework_for", "framework_cluster"]


def framework_for(s, recorded: dict, cluster, file: dict):
    """The framework the settings ``s`` name (:mod:`frameworks`):
    ``--framework``, else the ``--plan`` specification's, the cluster
    file's (``file``), the plan file's record; ``--compile`` and
    ``--float8`` (or the file's, or the record's) turn on what they name.
    ``None``: no framework (the tool's own model)."""
    import frameworks

    rec = recorded.get("framework") if isinstance(recorded.get("framework"), dict) else {}
    name = s.framework
    if name is None and s.plan is not None:
        from standard import parse

        name = parse(s.plan).framework
    if name is None:
        name = file.get("framework", rec.get("name"))
    compiled = bool(s.compile or file.get("compile") or rec.get("compiled"))
    float8 = bool(s.float8 or file.get("float8") or rec.get("float8"))
    try:  # sequence parallelism as the plan file recorded it (a --plan sets its own)
        fw = frameworks.resolve(name, compiled=compiled, float8=float8, sp=bool(rec.get("sp")))
    except SettingError as e:
        raise InputError(f"--evaluate: {s.evaluate}: {e}") from None
    if fw is None and (compiled or float8):
        raise SettingError("compile" if compiled else "float8", "needs --framework megatron, torchtitan or "
                                                                "deepspeed")
    if fw is not None and fw.float8 and not (cluster.realistic and cluster.fp8_flops):
        raise SettingError("float8", "needs a device with an FP8 peak (--device h100, h100-96gb, h100-nvl, h800, "
                                     "h200, b200, or --fp8-flops)")
    return fw


def framework_cluster(s, recorded: dict, cluster, fw, file: dict):
    """``cluster`` with the framework's defaults where no flag, cluster
    file or plan file's record set them: the gradients' precision, their
    buckets, the overlap, the share of the peak its attention kernel
    reaches on the device (``cluster.presets.attention_share``), and the
    headroom, which becomes what the
    framework holds beyond tensors at the device's capacity (its
    allocator's reserve, the CUDA context and NCCL's buffers), so that a
    plan's tensors fit exactly when the whole process does."""
    from cluster.presets import attention_share
    from settings import CLUSTER_SETTINGS

    given = {k for k in CLUSTER_SETTINGS if getattr(s, k) is not None} | set(file)
    if isinstance(recorded.get("framework"), dict):  # written under the framework: its record is what it set
        given |= {k for k, v in (recorded.get("cluster") or {}).items() if v is not None}
    changes = {}
    if "grad_precision" not in given:
        changes["grad_precision"] = fw.grad_precision or cluster.precision
    if "bucket_mb" not in given:
        changes["bucket_mb"] = fw.bucket_mb
    if "overlap" not in given:
        changes["overlap"] = fw.overlap
    if "attention_eff" not in given and fw.attention_kernel and cluster.realistic:
        share = attention_share(fw.attention_kernel, cluster.device)
        if share is not None:
            changes["attention_eff"] = share
    if "headroom" not in given and cluster.device_memory is not None:
        reserve, outside = fw.beyond(1.0)
        tensors = (cluster.device_memory - outside / 1e9) / (1.0 + reserve)
        changes["headroom"] = round(cluster.device_memory - tensors, 6)
    return replace(cluster, **changes)
