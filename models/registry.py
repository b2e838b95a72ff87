"""The registry of built-in models: builder functions with declared parameters.

Each model is a :class:`ModelSpec`: a function that builds the graph with a
:class:`graph.GraphBuilder`, the parameters it takes (batch, width,
sequence, ...) with defaults and bounds, the cutoff of its configuration
space, and the recipe of its hand-written (expert) baseline.  ``MODELS`` maps
a name to its spec; :func:`build_model` checks the parameters and builds.
Models read from files (``models.sources``: ONNX graphs and Hugging Face
configs) go through the same builder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from errors import SettingError, shown

__all__ = ["MAX_SIZE", "MAX_LAYERS", "Param", "ModelSpec", "MODELS", "model", "build_model", "check_int", "BATCH",
           "ATTENTION_KINDS", "check_choice"]

MAX_SIZE = 10**9  # largest batch, width, sequence ... accepted: far beyond any real model
MAX_LAYERS = 1000  # largest stack of repeated layers (operators per layer times this): published models have < 200


def check_choice(name: str, value, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, or a :class:`SettingError`."""
    if value not in choices:
        raise SettingError(name, f"must be one of {', '.join(choices)}, got {shown(value)}")
    return value


def check_int(name: str, value, low: int = 1, high: int = MAX_SIZE) -> int:
    """``value`` as an int in ``[low, high]``, or a :class:`SettingError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SettingError(name, f"must be an integer from {low:,} to {high:,}, got {shown(value)}")
    return value


@dataclass(frozen=True)
class Param:
    """One parameter of a model: an integer from ``low`` to ``high``, or
    one of ``choices``."""

    name: str
    default: int | str
    help: str
    low: int = 1
    high: int = MAX_SIZE
    choices: tuple[str, ...] | None = None

    def check(self, value):
        if self.choices is not None:
            return check_choice(self.name, value, self.choices)
        return check_int(self.name, value, self.low, self.high)


@dataclass(frozen=True)
class ModelSpec:
    """A built-in model: ``build(B, **params)`` adds its operators to the
    :class:`graph.GraphBuilder` ``B``; ``check(params)`` validates the
    parameters together (e.g. heads dividing the width)."""

    name: str
    build: Callable
    params: tuple[Param, ...]
    cutoff: int
    expert: str  # one_weird_trick, gnmt, mesh_tensorflow (see baselines.py)
    description: str
    model_dims: str = ""  # letters Mesh-TensorFlow splits for model parallelism
    check: Callable[[dict], None] | None = field(default=None, compare=False)
    roles: tuple = ()  # (role, letters): what a standard configuration splits (see standard.py)

    def resolve(self, given: dict) -> dict:
        """Every parameter's value, checked; ``given`` overrides defaults."""
        known = {p.name: p for p in self.params}
        for name in given:
            if name not in known:
                raise SettingError(name, f"is not a parameter of {self.name} "
                                         f"(it takes {', '.join(known) or 'none'})")
        values = {p.name: p.check(given.get(p.name, p.default)) for p in self.params}
        if self.check is not None:
            self.check(values)
        return values


MODELS: dict[str, ModelSpec] = {}


def model(name: str, *, params: tuple[Param, ...], cutoff: int, expert: str, description: str,
          model_dims: str = "", check=None, roles: dict | None = None):
    """Decorator: register a builder function as a built-in model."""

    def register(build):
        if name in MODELS:
            raise ValueError(f"two built-in models are named {name!r}")
        MODELS[name] = ModelSpec(name, build, tuple(params), cutoff, expert, description, model_dims, check,
                                 tuple((roles or {}).items()))
        return build

    return register


def build_model(name: str, **params):
    """The graph of built-in model ``name`` with ``params`` (others default)."""
    from graph import GraphBuilder

    spec = MODELS.get(name)
    if spec is None:
        raise SettingError("graph", f"must be one of {', '.join(MODELS)}, got {name!r}")
    values = spec.resolve(params)
    B = GraphBuilder(name, spec.cutoff, params=values, expert=spec.expert, model_dims=spec.model_dims,
                     roles=dict(spec.roles), **{k: values[k] for k in ("batch", "width") if k in values})
    spec.build(B, **values)
    return B.graph


BATCH = Param("batch", 128, "global mini-batch size")
#: how attention is built: one fused operator (FlashAttention), or scores, softmax and context materialised
ATTENTION_KINDS = ("fused", "materialized")
