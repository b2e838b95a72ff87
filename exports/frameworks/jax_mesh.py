"""The ``jax`` export: a plan as JAX shardings, for any plan.

One device mesh serves every operator: its axes are the prime factors of
the devices (8 devices: three axes of 2, named ``m0``, ``m1``, ``m2``).  An
operator's split of a dimension, ``c``, is a set of mesh axes whose sizes
multiply to ``c``; the mesh axes an operator leaves unused replicate it.
The ``PartitionSpec`` of each tensor an operator reads or writes follows
from the dimensions its axes are made of (``Tensor.axes``), so the specs
of its inputs, weights and outputs are those of its configuration.

Which mesh axes a dimension gets matters: when a producer and a consumer
split a tensor the same way but on different mesh axes, XLA moves data
the plan did not ask for.  So operators are assigned in graph order, and a
dimension first takes the mesh axes its input tensor already lives on
(when the split agrees).  The other dimensions take free axes from the
front of the mesh in the cost model's layout order (``cluster/``: the
batch dimension first, then the others in iteration-space order), so that
a mesh position, which is the device number, is where the cost model puts
that piece: with devices numbered node-major, the same devices form a
node in both.  A split no set of mesh axes can realise (3 on a 2 x 2 x 2
mesh) is refused (:class:`PlanNotExpressible`).

A pipelined plan is one such program per stage: every stage has a mesh of
the same shape over its own devices (stage ``i`` of ``q`` devices holds
devices ``i q .. (i + 1) q - 1``), and each operator names its stage.

The file (:func:`document`, written as JSON) holds the mesh's axes, the
stages, and per operator its id, name, kind, iteration space and
configuration, the mesh axes of each dimension, and the ``PartitionSpec``
of each tensor it reads (``inputs``, with their role: activation, data or
weight) and writes (``outputs``): one entry per tensor axis, ``null``
replicated, a mesh axis's name, or a list of names.  :mod:`exports.jax_loader`
reads it back into :class:`MeshPlan` and ``jax.sharding`` objects.  The
file follows ``jax.sharding`` as of jax 0.4.30 and later (``Mesh``,
``NamedSharding``, ``PartitionSpec``; tested with jax 0.10.2).  Nothing
here imports jax but the methods that build jax objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from errors import InputError

__all__ = ["prime_factors", "PlanNotExpressible", "LayerSharding", "MeshPlan", "assign", "document", "render",
           "FORMAT", "VERSION", "JAX_API"]

FORMAT = "pase-jax-shardings"
VERSION = 1
JAX_API = "jax.sharding (Mesh, NamedSharding, PartitionSpec) of jax 0.4.30 and later; tested with jax 0.10.2"


def prime_factors(p: int) -> list[int]:
    """The prime factors of ``p``, smallest first (``[]`` for 1)."""
    out, f = [], 2
    while p > 1:
        while p % f == 0:
            out.append(f)
            p //= f
        f += 1 if f == 2 else 2
        if f * f > p and p > 1:
            out.append(p)
            break
    return out


class PlanNotExpressible(InputError):
    """A split that no set of mesh axes can realise."""


@dataclass(frozen=True)
class LayerSharding:
    """The mesh axes of one operator: per iteration-space dimension
    (``dims``), and per axis of each input and output tensor (a tuple of
    mesh-axis names each; empty: replicated)."""

    name: str
    dims: tuple[tuple[str, ...], ...]
    inputs: tuple[tuple[tuple[str, ...], ...], ...]
    outputs: tuple[tuple[tuple[str, ...], ...], ...]
    stage: int = 0


@dataclass(frozen=True)
class MeshPlan:
    """The mesh's axes ((name, size), ...), every operator's sharding by
    name, and the stages ((first device, devices), ...; one for a plan
    without a pipeline)."""

    axes: tuple[tuple[str, int], ...]
    layers: dict
    stages: tuple[tuple[int, int], ...] = ()

    @property
    def devices(self) -> int:
        """Devices of one stage's mesh."""
        return math.prod(size for _, size in self.axes)

    def mesh(self, devices=None, stage: int = 0):
        """The ``jax.sharding.Mesh`` of ``stage`` over ``devices`` (default:
        ``jax.devices()``), its devices taken in order from the stage's
        first."""
        import jax
        import numpy as np
        from jax.sharding import Mesh

        devices = jax.devices() if devices is None else list(devices)
        first = self.stages[stage][0] if self.stages else 0
        shape = tuple(size for _, size in self.axes) or (1,)
        names = tuple(name for name, _ in self.axes) or ("m0",)
        need = first + math.prod(shape)
        if len(devices) < need:
            raise ValueError(f"the plan's stage {stage} needs devices {first}..{need - 1}; "
                             f"{len(devices)} are available")
        return Mesh(np.array(devices[first:need], dtype=object).reshape(shape), names)

    @staticmethod
    def spec(tensor_axes):
        """The ``PartitionSpec`` of a tensor whose axes lie on ``tensor_axes``."""
        from jax.sharding import PartitionSpec

        return PartitionSpec(*[None if not a else (a[0] if len(a) == 1 else tuple(a)) for a in tensor_axes])

    def sharding(self, mesh, name: str, which: str, i: int):
        """The ``NamedSharding`` of input or output (``which``) ``i`` of
        operator ``name`` on ``mesh``."""
        from jax.sharding import NamedSharding

        layer = self.layers[name]
        return NamedSharding(mesh, self.spec((layer.inputs if which == "inputs" else layer.outputs)[i]))


def _tensor_axes(tensor, dims, dim_axes):
    """Mesh axes of each tensor axis: those of the letters that split it."""
    return tuple(tuple(ax for d in group for ax in dim_axes[dims.index(d)]) for group in tensor.axes)


def _splits(op, d) -> list[int]:
    """The splits of ``op``'s dimensions under ``d`` (a Decision, or splits in order)."""
    return [d[letter] for letter in op.dims] if hasattr(d, "dims") else [int(c) for c in d]


def assign(g, strategy, p: int, stages=None) -> MeshPlan:
    """Mesh axes for every operator of graph ``g`` under ``strategy`` (one
    decision per operator) on ``p`` devices; ``stages``: a pipeline's node
    ranges ``[(lo, hi), ...]``, each on ``p / len(stages)`` devices."""
    from graph import operators

    ranges = list(stages) if stages else [(0, g.number_of_nodes())]
    q = p // len(ranges)
    primes = prime_factors(q)
    axes = tuple((f"m{i}", f) for i, f in enumerate(primes))
    size = dict(axes)
    names = [name for name, _ in axes]
    ops = operators(g)
    stage_of = {v: i for i, (lo, hi) in enumerate(ranges) for v in range(lo, hi)}
    layers, out_axes = {}, {}
    for v, (op, d) in enumerate(zip(ops, strategy)):
        cfg = _splits(op, d)
        preferred = {}
        for u, _, e in g.in_edges(v, data=True):  # the producer's mesh axes for the same split, in the same stage
            if stage_of[u] != stage_of[v]:
                continue
            t_out = out_axes[(u, e["out"])]
            for j, group in enumerate(op.inputs[e["inp"]].axes):
                i = op.dims.index(group) if len(group) == 1 else None
                if i is not None and cfg[i] > 1 and math.prod(size[a] for a in t_out[j]) == cfg[i]:
                    preferred.setdefault(i, t_out[j])
        free = list(names)
        dim_axes = [()] * len(cfg)
        order = sorted((i for i in range(len(cfg)) if cfg[i] > 1),
                       key=lambda i: (i not in preferred, op.dims[i] != "b", i))  # the layout order
        for i in order:
            want = preferred.get(i)
            if want and all(a in free for a in want):
                chosen = list(want)
            else:
                chosen, rest = [], cfg[i]
                for a in free:
                    if rest % size[a] == 0 and rest > 1:
                        chosen.append(a)
                        rest //= size[a]
                if rest != 1:
                    raise PlanNotExpressible(
                        f"{op.name}: splitting {op.dims[i]} {cfg[i]} ways needs mesh axes that multiply to "
                        f"{cfg[i]}; the mesh of {q} devices is {' x '.join(map(str, primes)) or '1'}")
                chosen.sort(key=names.index)
            for a in chosen:
                free.remove(a)
            dim_axes[i] = tuple(chosen)
        ins = tuple(_tensor_axes(t, op.dims, dim_axes) for t in op.inputs)
        outs = tuple(_tensor_axes(t, op.dims, dim_axes) for t in op.outputs)
        for j, t in enumerate(outs):
            out_axes[(v, j)] = t
        layers[op.name] = LayerSharding(op.name, tuple(dim_axes), ins, outs, stage_of[v])
    return MeshPlan(axes, layers, tuple((i * q, q) for i in range(len(ranges))))


def _spec_json(tensor_axes) -> list:
    return [None if not a else (a[0] if len(a) == 1 else list(a)) for a in tensor_axes]


def document(g, strategy, p: int, stages=None, about: dict | None = None) -> dict:
    """The JSON document of ``strategy`` on ``g`` (see the module
    docstring); ``about``: what the file says of where the plan came from."""
    from graph import operators

    mp = assign(g, strategy, p, stages)
    ops = []
    for v, (op, d) in enumerate(zip(operators(g), strategy)):
        layer = mp.layers[op.name]
        ops.append({
            "id": v, "name": op.name, "kind": op.kind.name, "dims": op.dims, "space": list(op.space),
            "config": _splits(op, d), "stage": layer.stage,
            "options": dict(getattr(d, "options", ())),
            "dim_axes": [list(a) for a in layer.dims],
            "inputs": [{"role": t.role, "shape": list(t.shape), "spec": _spec_json(a)}
                       for t, a in zip(op.inputs, layer.inputs)],
            "outputs": [{"shape": list(t.shape), "spec": _spec_json(a)} for t, a in zip(op.outputs, layer.outputs)],
        })
    return {
        "format": FORMAT, "version": VERSION, "api": JAX_API, **(about or {}),
        "mesh": {"axes": [name for name, _ in mp.axes], "shape": [size for _, size in mp.axes],
                 "devices": mp.devices},
        "stages": [{"first_device": first, "devices": n} for first, n in mp.stages],
        "operators": ops,
    }


def render(plan) -> str:
    """The ``jax`` export of a planned run (:class:`exports.frameworks.PlanView`)."""
    from exports.frameworks.common import json_text

    r = plan.result
    about = {"model": plan.model_name, **plan.source, "procs": plan.procs, "plan": plan.describe(),
             "predicted_step_seconds": r.step_seconds, "device": r.cost_model.cluster.device or None,
             "precision": plan.precision}
    return json_text(document(plan.graph, plan.decisions, plan.procs, plan.stage_ranges, about))
