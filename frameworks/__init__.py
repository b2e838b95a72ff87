"""Training frameworks: how Megatron-LM, torchtitan and DeepSpeed actually
run a plan, each one frozen value beside the cluster.

A plan says how every operator is split and which execution options it
takes; a framework says what running it keeps and costs beyond that: the
bytes per parameter of each model state and where each is sharded, what
sequence parallelism and each recomputation keep, the precision and the
buckets the gradients are reduced in, what overlaps, whether element-wise
work runs as eager kernels or fused, Float8, and the memory a process
holds beyond its tensors.  Each profile is a :class:`Framework` in
:data:`FRAMEWORKS`, declared in its module of this package with the source
of every figure (the framework's code or paper), and the published runs
that check it (``benchmarks/published.py``).  The cost model's time
(:mod:`cost.time`) and memory (:mod:`cost.memory`, ``options/``) read it;
without one (the default) the model is the tool's own, and the paper's
setting stays exact.

    >>> from frameworks import FRAMEWORKS
    >>> FRAMEWORKS["megatron"].states[0].whole
    18.0
"""

from __future__ import annotations

import importlib

from frameworks.base import FRAMEWORKS, Framework, States, known, register

__all__ = ["Framework", "States", "FRAMEWORKS", "known", "register", "resolve"]

#: the profiles' modules, each registering its :class:`Framework` (``eager`` holds eager PyTorch's kernels,
#: ``host`` what dropless expert layers wait on the host's launches, ``planning`` how the planner resolves one
#: from a run's settings)
PROFILES = ("megatron", "torchtitan", "deepspeed")
for _name in PROFILES:
    importlib.import_module(f"{__name__}.{_name}")


def resolve(name: str | None, *, compiled: bool = False, float8: bool = False, sp: bool = False,
            tp_overlap: bool = False):
    """The profile ``name`` names with what the run turns on, or ``None``
    (no framework) when ``name`` is ``None`` or ``"none"``."""
    if name is None or str(name).strip().lower() == "none":
        return None
    return known(name).run(compiled=compiled, float8=float8, sp=sp, tp_overlap=tp_overlap)
