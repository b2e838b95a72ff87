"""Plans a framework can run: the ``--export FORMAT[:PATH]`` formats.

Each :class:`Framework` of :data:`FRAMEWORKS` renders a planned run
(:class:`exports.frameworks.plans.PlanView`) as what a training framework
reads, and says which plans it can express:

* ``torchtitan``: torchtitan 0.3's command line (a named model and
  config with overrides, as a bash array) for a standard configuration
  (:mod:`standard`) of a Hugging Face config;
* ``torchtitan@0.2``: the ``[training]``, ``[parallelism]`` and
  ``[activation_checkpoint]`` sections of a torchtitan 0.2 job config
  (TOML) for a standard configuration;
* ``megatron``: Megatron-LM's command-line arguments for a standard
  configuration, as a bash array, with the environment it needs;
* ``jax``: the JAX mesh and every operator's ``PartitionSpec`` (JSON), for
  any plan; :mod:`exports.jax_loader` turns the file into ``jax.sharding``
  objects;
* ``dtensor``: a PyTorch plan keyed by the module names of the
  ``transformers`` model class (``parallelize_module`` styles, ``fully_shard``
  units, pipeline stages; JSON) for a standard configuration of a Hugging
  Face config; :mod:`exports.torch_apply` applies it to the model.

A standard configuration is the one ``--plan`` gives, or a searched or
evaluated plan that is one (every operator split as a set of degrees
would split it: see :func:`exports.frameworks.plans.recognise`).  What a
format cannot express is refused in one line before anything is written.
Each format's module names the framework version whose names it follows.
The modules are imported only when their format is asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from errors import InputError

__all__ = ["Framework", "FRAMEWORKS", "parse_export", "Export"]


@dataclass(frozen=True)
class Framework:
    """One export format: ``name``, a one-line ``description``, the plans
    it ``expresses``, the conventional file ``suffix``, and the module
    whose ``render(plan) -> str`` writes it."""

    name: str
    description: str
    expresses: str
    suffix: str
    module: str

    def render(self, plan) -> str:
        """The text of this format for ``plan`` (a :class:`plans.PlanView`);
        :class:`errors.InputError` for a plan it cannot express."""
        return importlib.import_module(self.module).render(plan)


FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("torchtitan", "torchtitan 0.3 command line: --module, --config and overrides (a bash array)",
              "standard configurations of Hugging Face configs", ".sh", "exports.frameworks.torchtitan"),
    Framework("torchtitan@0.2", "torchtitan 0.2 job config (TOML): [training], [parallelism], "
              "[activation_checkpoint]", "standard configurations", ".toml", "exports.frameworks.torchtitan_v02"),
    Framework("megatron", "Megatron-LM command-line arguments (a bash array) and its environment",
              "standard configurations", ".sh", "exports.frameworks.megatron"),
    Framework("jax", "JAX mesh and per-operator PartitionSpecs (JSON; read by exports/jax_loader.py)",
              "any plan", ".json", "exports.frameworks.jax_mesh"),
    Framework("dtensor", "PyTorch plan keyed by the transformers model's module names (JSON; applied by "
              "exports/torch_apply.py)", "standard configurations of Hugging Face configs", ".json",
              "exports.frameworks.dtensor"),
)}


@dataclass(frozen=True)
class Export:
    """One ``--export``: the format and where it goes (``None``: stdout)."""

    framework: Framework
    path: str | None

    @property
    def flag(self) -> str:
        return f"--export {self.framework.name}"


def parse_export(text: str) -> Export:
    """``FORMAT`` or ``FORMAT:PATH``, checked (``FORMAT:-`` is stdout, as
    ``FORMAT`` alone); one line naming the known formats for an unknown
    one."""
    name, colon, path = text.partition(":")
    fmt = FRAMEWORKS.get(name.strip().lower())
    if fmt is None:
        from errors import shown

        raise InputError(f"--export: unknown format {shown(name)} (the formats are {', '.join(FRAMEWORKS)})")
    if colon and not path:
        raise InputError(f"--export {fmt.name}: the path after ':' is empty")
    return Export(fmt, path if colon and path != "-" else None)
