"""A cluster from its description: a device preset, a cluster file (JSON or
TOML), a strategy file's record, and explicit settings, in rising order of
precedence.

A cluster file holds any of :data:`FIELDS`, e.g. (TOML)::

    device = "a100-80gb"
    precision = "bf16"
    gpus_per_node = 8
    inter_bw = 25        # GB/s between nodes
    latency = 5          # microseconds per collective step

A strategy file written with ``--output`` records the same fields under
``"cluster"``, so it can serve as a cluster file too.  Beside the cluster's
fields a cluster file may name the training framework that runs on it
(:data:`RUN_KEYS`: ``framework``, ``compile``, ``float8``, ``tp_overlap``,
``deepep``, ``recompute_modules``; see
``frameworks/``), which :func:`read_cluster_file` returns with them and the
planner takes apart.
"""

from __future__ import annotations

from dataclasses import fields

from cluster import _BOUNDS, DEFAULT_PRECISION, FIELDS, PRECISIONS, Cluster, check_value
from cluster.presets import device as preset
from cluster.presets import known, network
from errors import InputError, SettingError, shown

__all__ = ["check_fields", "read_cluster_file", "record", "resolve", "RUN_KEYS"]

#: what a cluster file may say beside the cluster's fields: the framework running on it
RUN_KEYS = ("framework", "compile", "float8", "tp_overlap", "deepep", "recompute_modules")

MAX_FILE_BYTES = 1 << 20
#: what each kind of declared field holds, as a file's value
_TYPES = {"positive": "a number", "nonnegative": "a number", "fraction": "a number", "share": "a number",
          "count": "an integer",
          "device": "a string", "precision": "a string", "network": "a string"}


def _typed(kind: str, value) -> bool:
    if _TYPES[kind] == "a string":
        return isinstance(value, str)
    if kind == "count":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_fields(fields: dict, where: str) -> dict:
    """``fields`` with the keys and types of the cluster's declared fields
    (:data:`cluster.FIELDS`; ``None`` values dropped); ValueError naming
    ``where`` otherwise."""
    out = {}
    for key, value in fields.items():
        if value is None:
            continue
        if key in RUN_KEYS:
            out[key] = _run_value(key, value, where)
            continue
        if key not in FIELDS:
            raise InputError(f"{where}: unknown key {key!r}; the keys are {', '.join((*FIELDS, *RUN_KEYS))}")
        kind = FIELDS[key].kind
        if not _typed(kind, value):
            raise InputError(f"{where}: {key} must be {_TYPES[kind]}, got {value!r}")
        try:
            if key == "device":
                known(value)
            elif key == "network":
                network(value)
            elif kind == "precision" and value not in PRECISIONS and (key == "precision" or value != ""):
                raise SettingError(key, f"must be one of {', '.join(PRECISIONS)}, got {shown(value)}")
            elif kind in _BOUNDS:
                value = check_value(key, value)
        except SettingError as e:
            raise InputError(f"{where}: {key} {e.problem}") from None
        out[key] = value
    return out


def _run_value(key: str, value, where: str):
    """A cluster file's framework (a known name, or ``none``), switch (true
    or false) or modules (``recompute_modules``: a list of names, or
    comma-separated ones, checked where the framework is resolved)."""
    if key == "framework":
        from frameworks import FRAMEWORKS

        if not isinstance(value, str) or value.strip().lower() not in (*FRAMEWORKS, "none"):
            raise InputError(f"{where}: framework must be one of {', '.join(FRAMEWORKS)} or none, got {value!r}")
        return value.strip().lower()
    if key == "recompute_modules":
        if isinstance(value, str) or (isinstance(value, list) and all(isinstance(x, str) for x in value)):
            return value
        raise InputError(f"{where}: recompute_modules must be a list of module names, got {value!r}")
    if not isinstance(value, bool):
        raise InputError(f"{where}: {key} must be true or false, got {value!r}")
    return value


def read_cluster_file(path: str) -> dict:
    """The fields of a cluster file: ``.toml``, else JSON."""
    from readers import read_json, read_toml

    if path.lower().endswith(".toml"):
        data = read_toml(path, MAX_FILE_BYTES, "cluster file")
    else:
        data = read_json(path, MAX_FILE_BYTES, "cluster file")
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a table of cluster fields ({', '.join(FIELDS)})")
    return check_fields(data, path)


def record(c: Cluster) -> dict:
    """The cluster as file fields (what ``--output`` records; an unset
    name as ``null``)."""
    return {f.name: getattr(c, f.name) if getattr(c, f.name) != "" else None for f in fields(Cluster)}


#: the figures of a device (a preset sets them all): a plan file's record of them is used again only for
#: the device and precision it was made for
DEVICE_FIGURES = ("flops", "bw", "device_memory", "mem_bw", "matmul_eff", "attention_eff", "memory_eff",
                  "link_eff", "allreduce_eff", "latency", "headroom", "sms", "fp8_flops", "power")
#: the figures of a network between nodes (a network preset sets them)
NETWORK_FIGURES = ("inter_bw", "net_eff", "inter_latency")


def resolve(settings: dict, *, device: str | None = None, file_fields: dict | None = None,
            recorded: dict | None = None) -> Cluster:
    """The cluster the settings, a cluster file, a plan file's record and
    the presets describe.  One rule, field by field: an explicit setting
    (``settings``; ``None`` values ignored) beats the cluster file's
    (``file_fields``), which beats the plan file's record (``recorded``),
    which beats the presets (the device's, at the precision in force; the
    network's); the paper's 10 TFLOPS and 16 GB/s fill what nothing sets.
    The device and the precision in force follow the same order (the
    precision last from the device's own).  Three refinements: a record
    made for another device keeps none of its device figures
    (:data:`DEVICE_FIGURES`: they describe that device); a record made at
    another precision keeps its peak only when it is not the device's
    table figure at that precision (a peak given by hand), so the peak is
    looked up again at the precision in force; a network given by the
    settings or the cluster file brings its preset's figures
    (:data:`NETWORK_FIGURES`) over the record's."""
    from cluster.presets import default_precision, network_fields

    file_fields = file_fields or {}
    settings = {k: v for k, v in settings.items() if v is not None}
    if device is not None:
        settings["device"] = device
    recorded = {k: v for k, v in (recorded or {}).items() if v is not None and k in FIELDS}
    given = {**file_fields, **settings}  # what this run says, over the plan file's record
    name = given.get("device", recorded.get("device"))
    precision = given.get("precision") or recorded.get("precision")
    if precision is None:
        precision = default_precision(name) if name is not None else DEFAULT_PRECISION
    if precision not in PRECISIONS:
        raise SettingError("precision", f"must be one of {', '.join(PRECISIONS)}, got {shown(precision)}")
    keep = dict(recorded)
    if name != recorded.get("device"):  # another device: the record's figures are the other one's
        for k in DEVICE_FIGURES:
            keep.pop(k, None)
    elif name is not None and precision != recorded.get("precision", precision) and "flops" in keep:
        if keep["flops"] == known(name).tflops.get(recorded["precision"]):  # the table's peak, not one by hand
            del keep["flops"]
    if "network" in given:
        for k in NETWORK_FIGURES:
            keep.pop(k, None)
    values = {}
    if name is not None:
        values.update(preset(name, precision))
    net = given.get("network", keep.get("network"))
    if net:
        fields = network_fields(net)
        if "inter_bw" not in fields:  # nodes joined as fast as inside one: the device's network figures go
            for k in NETWORK_FIGURES:
                values.pop(k, None)
        values.update(fields)
    values.update({k: v for k, v in keep.items() if k != "precision"})
    values.update({k: v for k, v in given.items() if k != "precision"})
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise SettingError(sorted(unknown)[0], "is not a cluster field")
    room, memory = values.get("headroom"), values.get("device_memory")
    if "device_memory" in given and "headroom" not in given and room and memory is not None and room >= memory:
        whose = f"the {values['device']}'s" if "headroom" not in keep and values.get("device") else "the"
        raise SettingError("device_memory", f"({memory:g} GB) must exceed {whose} headroom of {room:g} GB, which "
                                            "the plan leaves free; give a smaller --headroom")
    return Cluster(precision=precision, **values)
