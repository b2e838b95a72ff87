"""The ``dtensor`` export: a standard configuration as PyTorch DTensor
placements of every parameter and activation, on a named ``DeviceMesh``
(JSON).

It follows ``torch.distributed.tensor`` of PyTorch 2.6 (public since 2.5):
the placements ``Shard(dim)``, ``Replicate()`` and ``Partial()``, one per
mesh dimension, and a mesh made by
``torch.distributed.device_mesh.init_device_mesh(device_type, shape,
mesh_dim_names=names)``.

The mesh's dimensions, outermost first, are those of the configuration
with more than one device: ``pp``, the data-parallel one (``dp_shard``
under ZeRO stage 3, which FSDP shards the parameters over, else ``dp``),
``ep`` (expert parallelism, carved out of the data-parallel devices:
``dp`` is then what is left), ``cp`` and ``tp``.  An operator's tensors are
placed by the letters each mesh dimension splits in it (as
:func:`standard.strategy` decides): the data-parallel and ``ep``
dimensions the samples (an expert operator: ``ep`` its experts), ``cp``
the sequence, ``tp`` the operator's tensor-parallel letter (heads,
feed-forward units, vocabulary), or with sequence parallelism the sequence
of an operator without one.  A tensor is ``Shard(j)`` on a mesh dimension
that splits its axis ``j``, else ``Replicate()``.  An output whose
operator sums partial results over a split letter (a row-parallel
projection) is ``Partial()`` on that dimension where it is computed
(``computed``), and ``placements`` is what the operator's own reduction
leaves.  Under ZeRO stage 3 each parameter is stored ``Shard(0)`` over
the data-parallel dimensions that replicate it (``dp_shard``, and ``ep``
for a parameter that is not an expert's: ``stored``) and gathered to
``placements`` to be used (PyTorch writes a dimension 0 that another mesh
dimension also shards as a strided shard).  A pipeline's tensors are placed on the mesh of their
stage (the mesh without ``pp``).

Refused: ZeRO stages 1 and 2 are the optimizer's (its state and
gradients sharded), which placements do not describe; plans that are no
standard configuration.
"""

from __future__ import annotations

import json

from errors import InputError

FOLLOWS = "PyTorch 2.6 torch.distributed.tensor (Shard, Replicate, Partial) and init_device_mesh"
FORMAT = "pase-dtensor-placements"
VERSION = 1


def mesh_dims(std) -> list[tuple[str, int]]:
    """(name, size) of the mesh's dimensions, outermost first, without ``pp``."""
    dp = "dp_shard" if std.zero == 3 else "dp"
    dims = [(dp, std.dp // std.ep), ("ep", std.ep), ("cp", std.cp), ("tp", std.tp)]
    kept = [(n, s) for n, s in dims if s > 1]
    return kept or [(dp, 1)]


def _letters(op, std, roles, dims) -> dict[str, str]:
    """The letter each mesh dimension splits in ``op`` (absent: none)."""
    from exports.frameworks.plans import _tensor_letter

    seq, expert = roles.get("seq", ""), roles.get("expert", "")
    is_expert = bool(expert) and expert in op.dims
    seq_ok = bool(seq) and seq in op.dims and seq not in op.never_split
    t = _tensor_letter(op, roles)
    out = {}
    for name, _ in dims:
        if name in ("dp", "dp_shard"):
            out[name] = "b"
        elif name == "ep":
            out[name] = expert if is_expert else "b"
        elif name == "cp" and seq_ok:
            out[name] = seq
        elif name == "tp":
            if t is not None:
                out[name] = t
            elif std.sp and seq_ok and not is_expert:
                out[name] = seq
    return out


def _place(tensor, letters: dict, dims) -> list[str]:
    out = []
    for name, _ in dims:
        letter = letters.get(name)
        j = next((j for j, group in enumerate(tensor.axes) if letter and letter in group), None)
        out.append("Replicate()" if j is None else f"Shard({j})")
    return out


def _summed(op, decision, model) -> str:
    """The letters whose split makes ``op`` sum partial results."""
    from cost_model import op_work

    work = op_work(op, [decision.config], model)
    return "".join(c.letters for c in work.comms if c.role == "partial sums")


def _tuple(items) -> str:
    """A Python tuple's text, strings in double quotes."""
    inner = ", ".join(json.dumps(x) for x in items)
    return f"({inner},)" if len(items) == 1 else f"({inner})"


def document(plan) -> dict:
    from exports.frameworks.common import standard_for
    from graph import operators

    std = standard_for(plan, "dtensor", needs_roles=False)
    if std.zero in (1, 2):
        raise InputError(f"--export dtensor: zero={std.zero} shards the optimizer's state"
                         f"{' and the gradients' if std.zero == 2 else ''}, which DTensor placements of parameters "
                         "and activations do not describe (zero=0 or zero=3 do)")
    g = plan.graph
    roles = dict(g.graph.get("roles", {}))
    dims = mesh_dims(std)
    ranges = plan.stage_ranges or [(0, g.number_of_nodes())]
    stage_of = {v: i for i, (lo, hi) in enumerate(ranges) for v in range(lo, hi)}
    shared = set(map(tuple, g.graph.get("shared", ())))
    model = plan.result.cost_model
    params, acts, data = [], [], []
    for v, (op, d) in enumerate(zip(operators(g), plan.decisions)):
        letters = _letters(op, std, roles, dims)
        summed = _summed(op, d, model)
        w = 0
        for i, t in enumerate(op.inputs):
            if t.role == "weight":
                placements = _place(t, letters, dims)
                entry = {"name": f"{op.name}.{'weight' if w == 0 else 'bias' if w == 1 else f'weight{w}'}",
                         "operator": op.name, "input": i, "shape": list(t.shape), "stage": stage_of[v],
                         "placements": placements}
                if std.zero == 3:
                    entry["stored"] = ["Shard(0)" if n in ("dp_shard", "ep") and p == "Replicate()" else p
                                       for (n, _), p in zip(dims, placements)]
                if (v, i) in shared:
                    entry["tied"] = True
                params.append(entry)
                w += 1
            elif t.role == "data":
                data.append({"operator": op.name, "input": i, "shape": list(t.shape), "stage": stage_of[v],
                             "placements": _place(t, letters, dims)})
        for j, t in enumerate(op.outputs):
            entry = {"name": op.name if len(op.outputs) == 1 else f"{op.name}:{j}", "operator": op.name,
                     "output": j, "shape": list(t.shape), "stage": stage_of[v], "placements": _place(t, letters, dims)}
            computed = ["Partial()" if letters.get(n) and letters[n] in summed and p == "Replicate()" else p
                        for (n, _), p in zip(dims, entry["placements"])]
            if computed != entry["placements"]:
                entry["computed"] = computed
            acts.append(entry)
    names = [n for n, _ in dims]
    shape = [s for _, s in dims]
    if std.pp > 1:
        names, shape = ["pp"] + names, [std.pp] + shape
    init = f"init_device_mesh(\"cuda\", {_tuple(shape)}, mesh_dim_names={_tuple(names)})"
    doc = {
        "format": FORMAT, "version": VERSION, "api": FOLLOWS, "model": plan.model_name, "procs": plan.procs,
        "plan": f"standard configuration {std.describe()}",
        "standard": {"tp": std.tp, "dp": std.dp, "cp": std.cp, "ep": std.ep, "sp": std.sp, "pp": std.pp,
                     "microbatch": std.microbatch, "schedule": std.schedule if std.pp > 1 else None,
                     "recompute": std.recompute, "zero": std.zero},
        "mesh": {"dim_names": names, "shape": shape, "init": init},
        "placements_on": names[1:] if std.pp > 1 else names,
        "pipeline": None if std.pp == 1 else {"pp": std.pp, "stages": [
            {"pp_index": i, "operators": [g.nodes[lo]["op"].name, g.nodes[hi - 1]["op"].name]}
            for i, (lo, hi) in enumerate(ranges)]},
        "parameters": params, "activations": acts, "data": data,
    }
    return doc


def render(plan) -> str:
    from exports.frameworks.common import json_text

    return json_text(document(plan))
