"""Turn a PaSE plan (one configuration per operator) into JAX shardings.

One device mesh serves every layer: its axes are the prime factors of p
(8 devices: three axes of 2, named m0, m1, m2).  Each operator's split of a
dimension, c_i, is realised by a set of mesh axes whose sizes multiply to c_i;
the mesh axes an operator leaves unused replicate it.  A tensor's
PartitionSpec then follows from the dimensions its axes are made of (the
``Tensor.axes`` of graph.py), so the specs of an operator's inputs, weights and
outputs are those of its configuration.

Which mesh axes a dimension gets matters: when a producer and a consumer split
a tensor the same way but on different mesh axes, XLA must move data the plan
did not ask for.  So operators are assigned in graph order, and a dimension
first takes the mesh axes its input tensor already lives on (when the split
agrees).  The other dimensions take free axes from the front of the mesh in
the cost model's layout order (``cluster/``: the batch dimension first, then
the others in iteration-space order), so that a mesh position, which is the
device number, is where the cost model puts that piece: with devices numbered
node-major, the same devices form a node in both.

This module needs only graph.py; jax is imported by the functions that build
jax objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def prime_factors(p: int) -> list[int]:
    out, f = [], 2
    while p > 1:
        while p % f == 0:
            out.append(f)
            p //= f
        f += 1
    return out


class PlanNotExpressible(ValueError):
    """A split that no set of mesh axes can realise."""


@dataclass(frozen=True)
class LayerSharding:
    """Mesh axes of one operator: per iteration-space dimension, per tensor axis."""

    name: str
    dims: tuple[tuple[str, ...], ...]  # mesh axes of each iteration-space dimension
    inputs: tuple[tuple, ...]  # per input tensor, per tensor axis: tuple of mesh axes
    outputs: tuple[tuple, ...]


@dataclass(frozen=True)
class MeshPlan:
    """Mesh axes (name -> size) and every operator's sharding, by name."""

    axes: tuple[tuple[str, int], ...]
    layers: dict

    def mesh(self, devices=None):
        import jax
        import numpy as np
        from jax.sharding import Mesh

        devices = jax.devices() if devices is None else devices
        shape = tuple(size for _, size in self.axes) or (1,)
        names = tuple(name for name, _ in self.axes) or ("m0",)
        return Mesh(np.array(devices[: math.prod(shape)]).reshape(shape), names)

    @staticmethod
    def spec(tensor_axes) -> "object":
        from jax.sharding import PartitionSpec

        return PartitionSpec(*[None if not a else (a[0] if len(a) == 1 else a) for a in tensor_axes])


def _tensor_axes(tensor, dims, dim_axes):
    """Mesh axes of each tensor axis: those of the letters that split it."""
    return tuple(tuple(ax for d in group for ax in dim_axes[dims.index(d)]) for group in tensor.axes)


def assign(g, strategy, p: int) -> MeshPlan:
    """Mesh axes for every operator of graph ``g`` under ``strategy``."""
    from graph import operators

    primes = prime_factors(p)
    axes = tuple((f"m{i}", f) for i, f in enumerate(primes))
    size = dict(axes)
    ops = operators(g)
    layers, out_axes = {}, {}
    for v, (op, d) in enumerate(zip(ops, strategy)):
        cfg = [d[letter] for letter in op.dims] if hasattr(d, "dims") else list(d)  # a Decision, or splits in order
        preferred = {}
        for u, _, d in g.in_edges(v, data=True):  # the producer's mesh axes for the same split
            t_out = out_axes[(u, d["out"])]
            for j, group in enumerate(op.inputs[d["inp"]].axes):
                i = op.dims.index(group) if len(group) == 1 else None
                if i is not None and cfg[i] > 1 and math.prod(size[a] for a in t_out[j]) == cfg[i]:
                    preferred.setdefault(i, t_out[j])
        free = [name for name, _ in axes]
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
                        f"{cfg[i]}; the mesh of {p} devices is {' x '.join(map(str, primes)) or '1'}")
                chosen.sort(key=[name for name, _ in axes].index)
            for a in chosen:
                free.remove(a)
            dim_axes[i] = tuple(chosen)
        ins = tuple(_tensor_axes(t, op.dims, dim_axes) for t in op.inputs)
        outs = tuple(_tensor_axes(t, op.dims, dim_axes) for t in op.outputs)
        for j, t in enumerate(outs):
            out_axes[(v, j)] = t
        layers[op.name] = LayerSharding(op.name, tuple(dim_axes), ins, outs)
    return MeshPlan(axes, layers)
