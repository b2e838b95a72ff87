"""The files the command line reads and writes: strategy files (read with a
bound, their recorded settings type-checked), and results written
atomically."""

from __future__ import annotations

import os

from cli.args import MODEL_PARAMS, UsageError
from errors import shown

# -- input files ---------------------------------------------------------------


MAX_STRATEGY_BYTES = 64 << 20  # a strategy file for any built-in graph at p = 10^6 is far smaller


def read_json(path: str, flag: str, limit: int = MAX_STRATEGY_BYTES):
    """The JSON document in ``path``, read up to ``limit`` bytes; one-line
    :class:`UsageError` (naming ``flag``) for anything unreadable."""
    from readers import read_json as read

    try:
        return read(path, limit, "file this tool wrote")
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None


# What a strategy file may record, and the types it must have.
_RECORDED = {"graph": (str,), "procs": (int,), "flops": (int, float), "bw": (int, float), "distinct_rows": (int,),
             "embedding_lookup": (bool,), "embedding_sync": (str,), "batch": (int,), "width": (int,),
             "optimizer": (str,), "cluster": (dict,), "params": (dict,)}
_KIND_NAMES = {(str,): "a string", (int,): "an integer", (int, float): "a number", (bool,): "true or false",
               (dict,): "an object"}


def read_strategy_file(path: str) -> tuple[dict, list]:
    """The settings a strategy file records and its ``[(id, config), ...]``."""
    data = read_json(path, "--evaluate")
    if not isinstance(data, dict) or not isinstance(data.get("layers"), list):
        raise UsageError(f"--evaluate: {path} has no \"layers\" list")
    layers = []
    for i, layer in enumerate(data["layers"]):
        if not isinstance(layer, dict) or "id" not in layer or "config" not in layer:
            raise UsageError(f"--evaluate: {path}: layers[{i}] needs an \"id\" and a \"config\"")
        lid, cfg, opts = layer["id"], layer["config"], layer.get("options", {})
        if isinstance(lid, bool) or not isinstance(lid, int):
            raise UsageError(f"--evaluate: {path}: layers[{i}] has id {shown(lid)}, not an integer")
        if not isinstance(cfg, list):
            raise UsageError(f"--evaluate: {path}: layer {lid} has config {shown(cfg)}, not a list of integers")
        if not isinstance(opts, dict):
            raise UsageError(f"--evaluate: {path}: layer {lid} has options {shown(opts)}, not an object")
        layers.append((lid, cfg, opts))
    recorded = {}
    for key, kinds in _RECORDED.items():
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
            raise UsageError(f"--evaluate: {path}: {key} is {shown(value)}, not {_KIND_NAMES[kinds]}")
        recorded[key] = value
    params = recorded.pop("params", {})  # the model's parameters (files written before it: batch, width only)
    for key, value in params.items():
        if key in MODEL_PARAMS and value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"--evaluate: {path}: params.{key} is {shown(value)}, not an integer")
            recorded[key] = value
    model = data.get("model")  # a model read from a file: which one
    if model is not None:
        if not isinstance(model, dict) or not all(isinstance(model.get(k), str) for k in ("source", "sha256")):
            raise UsageError(f"--evaluate: {path}: \"model\" must name the model's file (source) and its sha256")
        recorded["model"] = model
    return recorded, layers


def strategy_from_layers(g, layers, path: str, p: int | None = None) -> list:
    """One :class:`config_space.Decision` per node of ``g`` from a file's
    ``[(id, config, options)]``, checked (with ``p``: the devices each uses)."""
    from config_space import Decision
    from graph import operators

    n = g.number_of_nodes()
    by_id = {}
    for lid, cfg, opts in layers:
        if not 0 <= lid < n:
            raise UsageError(f"--evaluate: {path}: layer id {lid} is not a node of {g.graph['name']} (0..{n - 1})")
        if lid in by_id:
            raise UsageError(f"--evaluate: {path}: layer {lid} appears twice")
        by_id[lid] = (cfg, opts)
    missing = [v for v in range(n) if v not in by_id]
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise UsageError(f"--evaluate: {path}: {len(missing)} of the {n} operators of {g.graph['name']} "
                         f"have no configuration ({shown})")
    ops = operators(g)
    try:
        return [Decision.of(ops[v], by_id[v][0], p, by_id[v][1], f"node {v} ({ops[v].name})") for v in range(n)]
    except ValueError as e:
        raise UsageError(f"--evaluate: {path}: {e}") from None


# -- output files ---------------------------------------------------------------


def check_writable(path: str, flag: str) -> None:
    """Refuse, before any work, a path we could not write."""
    if not path:
        raise UsageError(f"{flag}: the path is empty")
    target = os.path.realpath(path)
    if os.path.isdir(target):
        raise UsageError(f"{flag}: {path} is a directory")
    if os.path.exists(target) and not os.path.isfile(target):  # /dev/null, a FIFO: written in place
        if not os.access(target, os.W_OK):
            raise UsageError(f"{flag}: {path} is not writable")
        return
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        if os.path.islink(path):
            raise UsageError(f"{flag}: {path} is a link to {target}, whose directory {parent} does not exist")
        raise UsageError(f"{flag}: directory {os.path.dirname(path) or '.'} does not exist")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise UsageError(f"{flag}: {path} is not writable")
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".pase-", suffix=".tmp"):
            pass
    except OSError as e:
        raise UsageError(f"{flag}: cannot write in {parent}: {e.strerror}") from None


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place,
    so that an error never leaves a half-written file.  A symbolic link is
    followed (the link stays), an existing file keeps its permissions, and a
    special file (``/dev/null``) is simply written."""
    import tempfile

    target = os.path.realpath(path)
    if os.path.exists(target) and not os.path.isfile(target):
        with open(target, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        return
    mode = os.stat(target).st_mode & 0o7777 if os.path.exists(target) else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".pase-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


