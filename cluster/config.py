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
``"cluster"``, so it can serve as a cluster file too.
"""

from __future__ import annotations

from dataclasses import fields

from cluster import DEFAULT_PRECISION, FIELDS, PRECISIONS, Cluster
from cluster.presets import device as preset
from cluster.presets import known
from errors import InputError, SettingError, shown

__all__ = ["check_fields", "read_cluster_file", "record", "resolve"]

MAX_FILE_BYTES = 1 << 20
#: what each kind of declared field holds, as a file's value
_TYPES = {"positive": "a number", "nonnegative": "a number", "count": "an integer", "device": "a string",
          "precision": "a string"}


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
        if key not in FIELDS:
            raise InputError(f"{where}: unknown key {key!r}; the keys are {', '.join(FIELDS)}")
        kind = FIELDS[key].kind
        if not _typed(kind, value):
            raise InputError(f"{where}: {key} must be {_TYPES[kind]}, got {value!r}")
        if key == "device":
            try:
                known(value)
            except SettingError as e:
                raise InputError(f"{where}: device {e.problem}") from None
        out[key] = value
    return out


def read_cluster_file(path: str) -> dict:
    """The fields of a cluster file: ``.toml``, else JSON."""
    from readers import read_json, read_text

    if path.lower().endswith(".toml"):
        import tomllib

        try:
            data = tomllib.loads(read_text(path, MAX_FILE_BYTES, "cluster file"))
        except tomllib.TOMLDecodeError as e:
            raise InputError(f"{path} is not valid TOML ({e})") from None
    else:
        data = read_json(path, MAX_FILE_BYTES, "cluster file")
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a table of cluster fields ({', '.join(FIELDS)})")
    return check_fields(data, path)


def record(c: Cluster) -> dict:
    """The cluster as file fields (what ``--output`` records)."""
    return {f.name: (getattr(c, f.name) if f.name != "device" else c.device or None) for f in fields(Cluster)}


def resolve(settings: dict, *, device: str | None = None, file_fields: dict | None = None,
            recorded: dict | None = None) -> Cluster:
    """The cluster: a device preset (``device``, or the file's), then the
    cluster file's fields, or else what a strategy file ``recorded``, then
    the explicit ``settings`` (file-field names; ``None`` values ignored).
    The paper's 10 TFLOPS and 16 GB/s fill what nothing sets."""
    file_fields = file_fields or {}
    settings = {k: v for k, v in settings.items() if v is not None}
    recorded = {k: v for k, v in (recorded or {}).items() if v is not None and k in FIELDS}
    described = device is not None or bool(file_fields)
    source = file_fields if described else recorded
    precision = settings.get("precision", source.get("precision", DEFAULT_PRECISION))
    if precision not in PRECISIONS:
        raise SettingError("precision", f"must be one of {', '.join(PRECISIONS)}, got {shown(precision)}")
    values = {}
    name = device if device is not None else source.get("device")
    if name is not None:
        values.update(preset(name, precision))
    values.update({k: v for k, v in source.items() if k not in ("device", "precision")})
    values.update({k: v for k, v in settings.items() if k not in ("device", "precision")})
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise SettingError(sorted(unknown)[0], "is not a cluster field")
    return Cluster(precision=precision, **values)
