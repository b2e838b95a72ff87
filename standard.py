"""Standard configurations: the parallelism training frameworks run, one
degree of each kind for every layer.

A :class:`Standard` configuration names the degrees of tensor (``tp``),
data (``dp``), context (``cp``) and expert (``ep``) parallelism, sequence
parallelism (``sp``, 0 or 1), the experts' tensor parallelism
(``etp``), the activation recomputation and ZeRO stage
of every layer, and for a pipeline its degree (``pp``), micro-batch size
and schedule.  :func:`strategy` turns one into a decision per operator, by
the rules Megatron-LM follows for transformers (Shoeybi et al. 2019,
Narayanan et al. 2021, Korthikanti et al. 2022):

* every operator splits its sample dimension ``b`` by ``dp``;
* an expert operator runs on the devices of the other layers' tensor,
  context and data parallelism (``tp x cp x dp``), regrouped (Megatron-LM's
  parallel folding, Liu et al. 2025): its experts split ``ep`` ways, each
  expert's hidden units ``etp`` ways (the experts' tensor parallelism:
  ``tp`` unless given), and the tokens over the rest: ``ep`` is carved out
  of the sequence the context-parallel and the freed tensor-parallel
  devices hold first (``cp x tp / etp`` ways), then out of the samples
  (``dp``), as Megatron-LM's ranks order the experts' groups (the
  experts' tensor, then expert, then data parallelism, from the fastest):
  an expert group holds the nearest devices;
* tensor parallelism splits, in each operator, the first of the model's
  tensor letters it has: the attention heads (the query-key-value
  projection column-parallel, the attention itself, the output projection
  row-parallel), the feed-forward hidden units (column-, then
  row-parallel), the vocabulary (the embedding and the head
  vocabulary-parallel, the loss over a split vocabulary);
* an operator without such a letter (a normalisation, a residual) is
  replicated over the tensor-parallel group, or with ``sp = 1`` splits its
  sequence ``tp`` ways (sequence parallelism);
* ``cp`` splits every operator's sequence (the attention's keys and values
  gathered by the re-distribution), ``ep`` the experts.

A model names the letters of these roles (``roles``: the sequence, the
tensor letters in order, the experts); a graph without them (an ONNX file,
a CNN) splits by ``tp`` what the expert baseline splits (each kind's model
dimensions: a classifier's units) and takes no ``cp``, ``ep`` or ``sp``.
Every degree must divide what it splits exactly, as the frameworks require;
one line names the key that cannot apply.

    >>> parse("tp=8,dp=4,recompute=full")
    Standard(tp=8, dp=4, recompute='full')
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from errors import InputError

__all__ = ["Standard", "parse", "complete", "strategy", "decide", "check_roles", "expert_tokens", "KEYS", "SCHEDULES"]

SCHEDULES = ("gpipe", "1f1b", "interleaved")
#: the keys of a specification, what each takes, and what it means
KEYS = {
    "tp": "tensor-parallel degree",
    "dp": "data-parallel degree (default: what is left of p)",
    "cp": "context-parallel degree (the sequence split)",
    "ep": "expert-parallel degree (ep x etp divides tp x cp x dp)",
    "etp": "the experts' tensor-parallel degree (default: tp; 1 spreads the experts over the tensor-parallel "
           "devices too)",
    "sp": "sequence parallelism of the norms and residuals, 0 or 1",
    "pp": "pipeline-parallel degree",
    "microbatch": "samples per micro-batch",
    "schedule": "pipeline schedule: gpipe, 1f1b, interleaved or interleaved:V",
    "recompute": "activation recomputation of every block: none, selective, full",
    "zero": "ZeRO stage of every operator: 0, 1, 2, 3",
    "framework": "the training framework that runs it: megatron, torchtitan, torchtitan@2025-06, torchtitan@2024-12, "
                 "deepspeed (as --framework)",
}


@dataclass(frozen=True)
class Standard:
    """One degree of each kind of parallelism for every layer (see the
    module docstring); ``dp = None`` until :func:`complete` fills it."""

    tp: int = 1
    dp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # the experts' tensor-parallel degree; None: tp
    sp: int = 0
    pp: int = 1
    microbatch: int | None = None
    schedule: str = "1f1b"
    chunks: int = 1  # interleaved schedule: model chunks per device
    recompute: str = "none"
    zero: int = 0
    framework: str | None = None  # the framework named by the specification, if any (planner.py reads it)

    def __repr__(self) -> str:
        default = Standard()
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if getattr(self, f.name) != getattr(default, f.name)]
        return f"Standard({', '.join(shown)})"

    def describe(self) -> str:
        """``tp=8, dp=4, pp=2 (1f1b, micro-batch 1), recompute=full``."""
        parts = [f"{k}={getattr(self, k)}" for k in ("tp", "dp", "cp", "ep", "etp", "pp")
                 if k in ("tp", "dp") or (self.folded if k == "etp" else getattr(self, k) not in (1, None))]
        if self.sp:
            parts.append("sp")
        if self.pp > 1:
            sched = self.schedule + (f":{self.chunks}" if self.schedule == "interleaved" else "")
            parts[-1] += f" ({sched}, micro-batch {self.microbatch})"
        parts += [f"recompute={self.recompute}"] if self.recompute != "none" else []
        parts += [f"zero={self.zero}"] if self.zero else []
        return ", ".join(parts)

    def spec(self) -> str:
        """The ``--plan`` specification of this configuration (complete:
        every degree, the micro-batch and the schedule)."""
        sched = self.schedule + (f":{self.chunks}" if self.schedule == "interleaved" else "")
        parts = [f"tp={self.tp}", f"dp={self.dp}", f"cp={self.cp}", f"ep={self.ep}"] + \
            ([f"etp={self.etp}"] if self.folded else []) + [f"sp={self.sp}", f"pp={self.pp}"]
        if self.microbatch is not None:
            parts.append(f"microbatch={self.microbatch}")
        if self.pp > 1:
            parts.append(f"schedule={sched}")
        parts += [f"recompute={self.recompute}", f"zero={self.zero}"]
        return ",".join(parts + ([f"framework={self.framework}"] if self.framework else []))

    @property
    def expert_tp(self) -> int:
        """The experts' tensor-parallel degree."""
        return self.tp if self.etp is None else self.etp

    @property
    def folded(self) -> bool:
        """Whether the experts' tensor-parallel degree differs from the
        other layers'."""
        return self.etp is not None and self.etp != self.tp

    @property
    def devices(self) -> int:
        return self.tp * (self.dp or 1) * self.cp * self.pp


def _int(key: str, text: str, low: int = 1) -> int:
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= 10**6:
        raise InputError(f"--plan: {key} must be an integer from {low} to 1,000,000, got {text!r}")
    return int(text)


def parse(spec: str) -> Standard:
    """A :class:`Standard` configuration from ``key=value,...`` (see
    :data:`KEYS`); one line naming the key for anything else."""
    from options import OPTIONS

    values: dict = {}
    for item in spec.split(","):
        key, eq, text = item.strip().partition("=")
        key, text = key.strip().lower(), text.strip()
        if not eq or not key:
            raise InputError(f"--plan: {item.strip()!r} is not key=value (the keys are {', '.join(KEYS)})")
        if key not in KEYS:
            raise InputError(f"--plan: unknown key {key!r} (the keys are {', '.join(KEYS)})")
        if key in values:
            raise InputError(f"--plan: {key} is given twice")
        if key in ("recompute", "zero"):
            try:
                values[key] = OPTIONS[key].parse(text)
            except InputError as e:
                raise InputError(f"--plan: {e}") from None
        elif key == "schedule":
            name, colon, chunks = text.lower().partition(":")
            if name not in SCHEDULES or (colon and name != "interleaved") or (colon and not chunks):
                raise InputError(f"--plan: schedule must be gpipe, 1f1b, interleaved or interleaved:V, got {text!r}")
            values["schedule"] = name
            values["chunks"] = _int("schedule's chunks", chunks, 2) if chunks else (2 if name == "interleaved" else 1)
        elif key == "framework":
            from frameworks import FRAMEWORKS

            if text.lower() not in FRAMEWORKS:
                raise InputError(f"--plan: framework must be one of {', '.join(FRAMEWORKS)}, got {text!r}")
            values["framework"] = text.lower()
        elif key == "sp":
            if text not in ("0", "1"):
                raise InputError(f"--plan: sp must be 0 or 1, got {text!r}")
            values["sp"] = int(text)
        else:
            values[key] = _int(key, text)
    if "schedule" in values and values.get("pp", 1) == 1:  # what --schedule without --pp is told too
        name = values["schedule"]
        raise InputError(f"--plan: a{'n' * (name == 'interleaved')} {name} schedule needs pp > 1")
    return Standard(**values)


def complete(std: Standard, p: int, batch: int) -> Standard:
    """``std`` with ``dp`` filled (what is left of ``p``) and checked
    against ``p`` devices and the batch; micro-batches default to one
    sample."""
    from dataclasses import replace

    other = std.tp * std.cp * std.pp
    if p % other:
        raise InputError(f"--plan: tp x cp x pp = {other} does not divide the {p} devices")
    dp = p // other if std.dp is None else std.dp
    if dp * other != p:
        raise InputError(f"--plan: tp x dp x cp x pp = {dp * other}, not the {p} devices")
    if std.etp is not None and std.tp % std.etp:
        raise InputError(f"--plan: etp={std.etp} does not divide tp={std.tp} (an expert's tensor-parallel devices "
                         "are some of one tensor-parallel group's)")
    group, experts = std.tp * std.cp * dp, std.ep * std.expert_tp
    if group % experts and std.etp is None:
        hint = "; etp=1 spreads them over the tensor-parallel devices too" if std.tp > 1 else ""
        raise InputError(f"--plan: ep={std.ep} does not divide cp x dp = {std.cp * dp} (the experts are spread over "
                         f"the data- and context-parallel devices{hint})")
    if group % experts:
        raise InputError(f"--plan: ep x etp = {experts} does not divide tp x cp x dp = {group} (the experts run on "
                         "the other layers' devices)")
    if batch % dp:
        raise InputError(f"--plan: dp={dp} does not divide the batch of {batch}")
    micro = std.microbatch if std.microbatch is not None else 1
    if std.pp == 1 and std.microbatch is None:
        micro = batch // dp
    if (batch // dp) % micro:
        raise InputError(f"--plan: a micro-batch of {micro} does not divide the {batch // dp} samples of a "
                         f"data-parallel group")
    if std.schedule == "interleaved" and std.pp == 1:
        raise InputError("--plan: an interleaved schedule needs pp > 1")
    m = batch // (dp * micro)
    if std.schedule == "interleaved" and m < std.pp:  # its chunks take the micro-batches in groups of the stages
        raise InputError(f"--plan: an interleaved schedule needs at least as many micro-batches as its {std.pp} "
                         f"stages; micro-batches of {micro} make {m} of the {batch // dp} samples of a "
                         "data-parallel group")
    return replace(std, dp=dp, microbatch=micro)


def _tensor_letter(op, letters: str) -> str | None:
    """The first of the model's tensor letters ``op`` may split."""
    never = op.never_split
    return next((c for c in letters if c in op.dims and c not in never), None)


def strategy(g, std: Standard, ctx=None) -> list:
    """One :class:`config_space.Decision` per operator of ``g`` for the
    complete standard configuration ``std`` (see the module docstring);
    ``ctx`` the operators' :func:`options.contexts` when known.  Operators
    alike (equal up to names, in the same context) decide alike: each is
    decided once."""
    from blocks import find_chains
    from graph import operators
    from options import contexts

    roles = check_roles(g, std)
    ops = operators(g)
    if ctx is None:
        ctx = contexts(g, find_chains(g)) if std.recompute != "none" or std.zero else [None] * len(ops)
    out, seen = [], {}
    for op, c in zip(ops, ctx):
        key = (op, None if c is None else c.key)
        if key not in seen:
            seen[key] = decide(op, std, roles, c)
        out.append(seen[key])
    return out


def check_roles(g, std: Standard) -> dict:
    """The model's roles (:mod:`standard`), once the degrees that need one
    are known to apply to ``g``."""
    roles = dict(g.graph.get("roles", {}))
    name = g.graph["name"]
    if not roles:
        for key in ("cp", "ep", "sp"):
            if getattr(std, key) not in ((0,) if key == "sp" else (0, 1)):  # sp=1 splits a sequence too
                raise InputError(f"--plan: {key} does not apply to {name}: it names no sequence or experts "
                                 "(only tp, dp, pp, recompute, zero do)")
    if (std.ep > 1 or std.etp is not None) and not has_experts(g):
        key = f"ep={std.ep}" if std.ep > 1 else f"etp={std.etp}"
        raise InputError(f"--plan: {key} does not apply to {name}: it has no experts")
    return roles


def has_experts(g) -> bool:
    """Whether graph ``g`` has experts: an operator over its ``expert``
    role's letter."""
    from graph import operators

    expert = g.graph.get("roles", {}).get("expert", "")
    return bool(expert) and any(expert in op.dims for op in operators(g))


def expert_tokens(std: Standard) -> tuple[int, int]:
    """``(samples, sequence)``: the ways an expert operator of the
    complete ``std`` splits its tokens (see the module docstring): ``ep``
    carved out of the ``cp x tp / etp`` ways of the sequence first, then
    out of ``dp``."""
    import math

    seq = std.tp * std.cp // std.expert_tp  # the devices that share a sample, over an expert's (etp divides tp)
    # where neither ep nor seq divides the other (a cp of 3, 6, ...), the frameworks' consecutive expert groups
    # straddle samples: the split is then the nearest whole one
    first = math.gcd(std.ep, seq)
    return std.dp // (std.ep // first), seq // first


def decide(op, std: Standard, roles: dict, ctx=None):
    """The :class:`config_space.Decision` of one operator ``op`` (in the
    context ``ctx``: its options need one) for the complete standard
    configuration ``std`` of a model whose roles are ``roles``."""
    from config_space import Decision
    from options import OPTIONS

    seq, tensor, expert = roles.get("seq", ""), roles.get("tensor", ""), roles.get("expert", "")
    want = {}
    t = _tensor_letter(op, tensor) if roles else next((c for c in op.kind.model_dims(op) if c not in
                                                      op.never_split), None)
    if expert and expert in op.dims:
        want[expert] = std.ep
        want["b"], seq_split = expert_tokens(std)
        width = std.expert_tp
    else:
        want["b"], seq_split, width = std.dp, std.cp, std.tp
    if t is not None:
        want[t] = width
    elif std.sp:
        seq_split *= width
    if seq and seq in op.dims and seq not in op.never_split:
        want[seq] = want.get(seq, 1) * seq_split
    cfg = []
    for letter, size in zip(op.dims, op.space):
        c = want.get(letter, 1)
        if size % c:
            moe = bool(expert) and expert in op.dims
            key = {"b": "dp", t: "etp" if std.folded and moe else "tp",
                   seq: "etp" if std.folded and moe else "cp" if std.cp > 1 and not (t is None and std.sp) else "sp",
                   expert: "ep"}.get(letter, "tp")
            hint = ""
            if letter == "v" and key == "tp":  # the vocabulary
                pad = -(-size // (128 * c)) * 128 * c
                hint = (f"; Megatron-LM pads the vocabulary to a multiple of 128 x tp: give the model a "
                        f"vocabulary of {pad}")
            raise InputError(f"--plan: {key}: {op.name} cannot split {letter} ({size}) {c} ways{hint}")
        cfg.append(c)
    if op.contiguous_only and cfg != [1] * len(cfg):
        import numpy as np

        from config_space import contiguous

        if not contiguous(np.asarray([cfg]), op.space)[0]:
            raise InputError(f"--plan: {op.name} (a reshape) cannot be split {tuple(cfg)}: only from the left")
    opts = {}
    for key in ("recompute", "zero"):
        value = getattr(std, key)
        if value != OPTIONS[key].default and OPTIONS[key].applies(op, ctx):
            opts[key] = value
    return Decision(op.dims, tuple(cfg)).with_options(**opts)
