"""Execution options: what a plan decides for an operator beside its split.

An option changes what one training step of an operator does, not how the
operator is split: recomputing the forward pass instead of keeping the
activations (``recompute``), sharding the weights, gradients and optimizer
state over the devices that replicate them (``zero``).  Each is an
:class:`Option` in :data:`OPTIONS`, defined once in its module of this
package: its values and default, which operators it applies to, and its
effect on the operator's work record (:class:`kinds.base.Work`, what the
cost model prices) and on its memory (:class:`kinds.base.Footprint`).  A
new option is its definition here, those two effects, and its test.

An option's *scope* says who chooses: each operator (``operator``), or one
choice for every operator of a block of layers (``block``: recomputation
re-runs a whole block's forward pass).  Options at their default change
nothing, bit for bit.
"""

from __future__ import annotations

import importlib
import os

from options.base import OPTIONS, Context, Option, check_options, contexts, register

__all__ = ["Option", "OPTIONS", "register", "check_options", "Context", "contexts"]

for _file in sorted(os.listdir(__path__[0])):  # every option's module (os: cheaper than pkgutil)
    if _file.endswith(".py") and _file not in ("__init__.py", "base.py"):
        importlib.import_module(f"{__name__}.{_file[:-3]}")
