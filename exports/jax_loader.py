"""Read a ``--export jax`` file back: its mesh and every operator's
shardings, as :class:`exports.frameworks.jax_mesh.MeshPlan` and
``jax.sharding`` objects.

    >>> plan = load("plan_jax.json")                       # doctest: +SKIP
    >>> mesh = plan.mesh()                                 # jax.sharding.Mesh over jax.devices()
    >>> plan.sharding(mesh, "layer0/mlp/up", "inputs", 1)  # the weight's NamedSharding

The file is checked (its format, version, mesh and specs) and a bad one
is refused with one :class:`LoaderError` line.  jax is imported only by
the methods that build jax objects (:meth:`MeshPlan.mesh`,
:meth:`MeshPlan.spec`, :meth:`MeshPlan.sharding`), so reading a file needs
no jax.
"""

from __future__ import annotations


from errors import InputError

__all__ = ["load", "from_document", "LoaderError", "MAX_BYTES"]

MAX_BYTES = 256 << 20  # a file for a model of 1,000 layers is a few tens of MB


class LoaderError(InputError):
    """A file that is not a ``--export jax`` file this tool can read."""


def load(source):
    """The :class:`MeshPlan` of a ``--export jax`` file (a path), or of its
    text or parsed document."""
    if isinstance(source, dict):
        return from_document(source)
    from readers import document

    return from_document(document(source, MAX_BYTES, "sharding file", LoaderError))


def _spec(value, axes: set, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n in axes for n in names) or not names:
        raise LoaderError(f"{where}: {value!r} is not null, a mesh axis or a list of mesh axes")
    return tuple(names)


def from_document(doc: dict):
    """The :class:`MeshPlan` of a parsed ``--export jax`` document."""
    from exports.frameworks.jax_mesh import FORMAT, VERSION, LayerSharding, MeshPlan

    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise LoaderError(f"not a {FORMAT} document (written by scheduler.py --export jax)")
    if doc.get("version") != VERSION:
        raise LoaderError(f"version {doc.get('version')!r} of {FORMAT}; this loader reads version {VERSION}")
    try:
        mesh = doc["mesh"]
        names, shape = list(mesh["axes"]), [int(s) for s in mesh["shape"]]
        if len(names) != len(shape) or len(set(names)) != len(names) or min(shape, default=2) < 2:
            raise LoaderError("the mesh's axes and shape do not match")
        axes = set(names)
        stages = tuple((int(s["first_device"]), int(s["devices"])) for s in doc.get("stages", ()))
        layers = {}
        for op in doc["operators"]:
            name = op["name"]
            ins = tuple(tuple(_spec(a, axes, f"{name} input {i}") for a in t["spec"])
                        for i, t in enumerate(op["inputs"]))
            outs = tuple(tuple(_spec(a, axes, f"{name} output {j}") for a in t["spec"])
                         for j, t in enumerate(op["outputs"]))
            dims = tuple(tuple(_spec(a or None, axes, f"{name} dimension {i}")) for i, a in enumerate(op["dim_axes"]))
            for where, specs in (("input", ins), ("output", outs)):
                for i, spec in enumerate(specs):
                    used = [a for axis in spec for a in axis]
                    if len(used) != len(set(used)):
                        raise LoaderError(f"{name} {where} {i}: a mesh axis shards two of its axes")
            if name in layers:
                raise LoaderError(f"two operators are named {name!r}")
            layers[name] = LayerSharding(name, dims, ins, outs, int(op.get("stage", 0)))
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, LoaderError):
            raise
        raise LoaderError(f"a malformed {FORMAT} document ({type(e).__name__}: {e})") from None
    return MeshPlan(tuple(zip(names, shape)), layers, stages)
