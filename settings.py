"""The settings of a run: every value a user gives, declared once.

Each setting is declared by a :class:`Setting` (its flags, the kind of
value, its help, whether a comma-separated list sweeps it, its axis label
in a sweep's plot and its tag in a plan file's name); the cluster's fields
are declared beside the fields themselves (:data:`cluster.FIELDS`) and
joined here.  :class:`Settings` is the record of a run's values, made from
those declarations: the command line (``cli/``) parses flags into one, a
library user builds one directly and passes it to :func:`planner.plan`::

    >>> s = Settings(graph="transformer", procs=16)
    >>> s.procs, s.flops is None
    (16, True)

A value of ``None`` keeps the default of whatever fills it later: the
model's own (batch, sequence), the device preset's, a cluster file's, a
strategy file's, or the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass

from cluster import FIELDS as CLUSTER_FIELDS
from frameworks import FRAMEWORKS

__all__ = ["Setting", "DECLARED", "Settings", "DEFAULTS", "MODEL_PARAMS", "flag_of", "SWEEPABLE", "CLUSTER_SETTINGS",
           "OPTION_SETTINGS"]


@dataclass(frozen=True)
class Setting:
    """The declaration of one setting: ``flags`` (the first long one names
    it in messages), ``kind`` of value (see ``cli/args.py``), ``default``,
    ``help``, ``metavar``, ``dest`` (when the flag's name is not the
    setting's), ``choices``, and for sweeps ``sweep``, ``label`` (a plot's
    axis, numeric settings only) and ``tag`` (a plan file's name)."""

    name: str
    flags: tuple[str, ...]
    kind: str
    help: str
    default: object = None
    metavar: str | None = None
    choices: tuple | None = None
    sweep: bool = False
    label: str = ""
    tag: str = ""
    group: str = ""

    @property
    def flag(self) -> str:
        """The flag named in messages: the first long one (``--procs``
        reads as ``-p`` where users know it so: the first given)."""
        return self.flags[0]


#: the models' parameters the flags set
MODEL_PARAMS = ("batch", "width", "seq", "vocab", "layers", "attention")

_MODEL = (
    Setting("graph", ("-g", "--graph"), "model", "network to parallelize (default: alexnet): a built-in model, an "
            "ONNX file, a Hugging Face config.json (llama, qwen3, deepseek_v3, gpt_oss ...: docs/models.md lists "
            "the families), or a directory holding one", "alexnet", metavar="NAME", sweep=True),
    Setting("procs", ("-p", "--procs"), "count", "number of devices (default: 32)", 32, sweep=True,
            label="devices p", tag="p"),
    Setting("batch", ("-b", "--batch"), "count", "global mini-batch size (default: 128)", sweep=True, label="batch",
            tag="b"),
    Setting("width", ("-m", "--model"), "count", "model width of rnnlm (hidden units, default 2048) or transformer "
            "(embedding width, default 512; heads = width/64)", metavar="WIDTH", sweep=True, label="model width",
            tag="m"),
    Setting("seq", ("--seq",), "count", "sequence length of rnnlm and transformer (default: 256), of a config.json "
            "model (default: 2048, or its limit when smaller) and of an ONNX model's symbolic dimensions",
            sweep=True, label="sequence length", tag="seq"),
    Setting("vocab", ("--vocab",), "count", "vocabulary size of rnnlm (default 100000) and transformer "
            "(default 50000)"),
    Setting("layers", ("--layers",), "count", "layers of rnnlm (LSTM layers, default 2) and transformer "
            "(encoder and decoder layers each, default 6)"),
    Setting("attention", ("--attention",), "name", "how attention is built: fused (one operator that never "
            "materialises the scores, as PyTorch's scaled_dot_product_attention runs it; the default of config.json "
            "and ONNX models) or materialized (scores, softmax and context; the built-in transformer's default)",
            choices=("fused", "materialized"), sweep=True),
)


def _option_settings() -> tuple[Setting, ...]:
    """The execution options (``options/``) as settings: a value every
    operator it applies to takes, or ``auto``, searched."""
    from options import OPTIONS

    return tuple(Setting(o.name, (f"--{o.name}",), "option", f"{o.help}; auto: searched per "
                         f"{'operator' if o.scope == 'operator' else 'block'} within the device memory "
                         f"(default: auto on a real device (a --device preset or a cluster file with a capacity), "
                         f"else {o.default})", choices=tuple(map(str, o.values)) + ("auto",), sweep=True)
                 for o in OPTIONS.values())


def _cluster_settings() -> tuple[Setting, ...]:
    """The cluster's declared fields as settings (default ``None``: the
    preset's, the file's or the paper's)."""
    return tuple(Setting(name, (d.flag,), d.kind, d.help, None, d.metavar, sweep=d.sweep, label=d.label, tag=d.tag)
                 for name, d in CLUSTER_FIELDS.items())


_PIPELINE = (
    Setting("pp", ("--pp",), "count_auto", "pipeline stages: 1 (none), a number, or auto (searched "
            "with the micro-batches, the schedule and each stage's plan); default: on a real device (a --device preset "
            "or a cluster file with a capacity) stages searched beside none at all for a model of repeated blocks, "
            "else 1", metavar="N|auto", sweep=True, label="stages",
            tag="pp"),
    Setting("microbatches", ("--microbatches",), "count_auto", "micro-batches a pipeline splits the batch into, or "
            "auto (searched; default); without --pp, gradient accumulation over that many", metavar="M|auto"),
    Setting("schedule", ("--schedule",), "schedule", "pipeline schedule: gpipe, 1f1b, interleaved[:V] (V chunks per "
            "device, default 2), or auto (1f1b and interleaved:2 searched); default: 1f1b with --pp N, auto with "
            "--pp auto", metavar="NAME"),
)

_RUN = (
    Setting("optimizer", ("--optimizer",), "name", "sgd, momentum or adam: 0, 1 or 2 extra copies of the weights in "
            "the memory model (default: adam)", metavar="NAME", sweep=True),
    Setting("framework", ("--framework",), "name", "the training framework that runs the plan: megatron, "
            "torchtitan (as installed today), torchtitan@2025-06 or torchtitan@2024-12 (its code of June 2025 "
            "or December 2024) or deepspeed (its model "
            "states, what sequence parallelism and recomputation keep, its kernels, its memory beyond tensors; see "
            "docs/frameworks.md), or none (default: the tool's own model)",
            choices=(*FRAMEWORKS, "none"), metavar="NAME"),
    Setting("compile", ("--compile",), "switch", "with --framework torchtitan or deepspeed: torch.compile fuses "
            "the element-wise work of each block, and torchtitan's loss (not torchtitan@2024-12's) (default: "
            "eager kernels)", False),
    Setting("float8", ("--float8",), "switch", "with --framework: the linear layers of the blocks multiply in "
            "FP8 (torchao's Float8Linear, Transformer Engine) at the device's FP8 peak; MFU stays against the "
            "training precision's peak", False),
    Setting("tp_overlap", ("--tp-overlap",), "switch", "with --framework megatron or torchtitan: a matrix "
            "product's tensor-parallel collectives run piece by piece under it (Megatron-LM's --tp-comm-overlap, "
            "torchtitan's asynchronous tensor parallelism, which needs --compile) (default: they block)", False),
    Setting("deepep", ("--deepep",), "switch", "with --framework megatron: a mixture of experts sends its tokens "
            "through DeepEP (--moe-flex-dispatcher-backend deepep): a token crosses once to each other node that "
            "holds one of its experts, and is forwarded inside it (default: an all-to-all of every copy)", False),
    Setting("recompute_modules", ("--recompute-modules",), "name", "with --framework megatron: the modules "
            "selective recomputation re-runs, comma-separated: core_attn (the attention core), layernorm (the norms "
            "no single linear layer takes in alone: a mixture of experts' pre-MLP norm), moe_act (the experts' "
            "activation), as Megatron-LM's --recompute-modules (default: core_attn)", metavar="LIST"),
    Setting("cluster", ("--cluster",), "path", "a cluster file (JSON or TOML) with any of "
            f"{', '.join(CLUSTER_FIELDS)}, and framework, compile, float8, tp_overlap, deepep, recompute_modules; "
            "flags override it",
            metavar="FILE"),
    Setting("algo", ("--algo",), "count", "search order: 0 GENERATESEQ, 1 breadth-first (default: 0)", 0,
            choices=(0, 1)),
    Setting("profile", ("--profile",), "switch", "profile the search with cProfile and print the top entries", False),
    Setting("measure", ("--measure",), "switch", "time 5 searches after 2 warm-up runs; print mean, min, max", False),
    Setting("dump_graph", ("-d", "--dump-graph"), "switch", "write the graph to ./graph.dot (Graphviz, via pydot)",
            False),
    Setting("output", ("--output",), "path", "write the result to PATH: .json (full record) or .csv (layer rows)",
            metavar="PATH"),
    Setting("export", ("--export",), "export", "also write the plan for a training framework: torchtitan, "
            "torchtitan@0.2, megatron, jax or dtensor (see docs/exports.md), to PATH (written as --output writes) or, without PATH (or with -), to stdout (the report "
            "then goes to stderr); repeatable", metavar="FORMAT[:PATH]"),
    Setting("draw", ("--draw",), "path", "draw the plan to FILE (.png, .svg or .pdf; matplotlib): the pipeline's "
            "schedule per stage, the memory per device against its capacity, the step time's parts beside the "
            "baselines of the compare flag, and the layers' splits", metavar="FILE"),
    Setting("calibrate", ("--calibrate",), "path", "fit the realistic model's constants to measurements in FILE "
            "(TOML or JSON: gemm, attention, nccl or nccl_file, step; or an nccl-tests output itself; see "
            "docs/calibration.md), print the fitted cluster, the measured and modelled collective times "
            "and, with --save-cluster, write it as a cluster file", metavar="FILE"),
    Setting("save_cluster", ("--save-cluster",), "path", "with --calibrate: write the fitted cluster to PATH (a "
            "TOML cluster file for --cluster)", metavar="PATH"),
    Setting("evaluate", ("--evaluate",), "path", "cost the strategy in PATH (a JSON file with 'layers': "
            "[{'id', 'config'}]) instead of searching", metavar="PATH"),
    Setting("search", ("--search",), "name", "what to search: plan (one configuration per operator, the default) or "
            "standard (the best standard configuration --plan can give: tp, dp, cp, ep, etp, sp, pp, micro-batch, "
            "schedule, zero, recompute, within the device memory; compared with the per-operator optimum by the "
            "compare flag)",
            choices=("plan", "standard"), metavar="WHAT"),
    Setting("plan", ("--plan",), "spec", "cost the standard configuration SPEC instead of searching: "
            "comma-separated key=value of tp, dp, cp, ep, etp, sp, pp, microbatch, schedule, recompute, zero, "
            "framework (Megatron-LM's rules; dp defaults to what is left of p), e.g. tp=8,recompute=full",
            metavar="SPEC"),
    Setting("mem_limit_gb", ("--mem-limit",), "positive", "memory the cost arrays and the search may use, in GB "
            "(default: half the memory available now; the process itself needs up to 100 MB more)",
            metavar="GB"),
    Setting("require_fit", ("--require-fit",), "switch", "exit with status 3 when the plan costed or found does not "
            "fit the device memory (the report is printed, no file is written); needs a device memory (--device, "
            "--device-memory or a cluster file giving one)", False),
    Setting("summary", ("-q", "--summary"), "switch", "print only the header, the totals and the search line, not "
            "a row per operator", False),
    Setting("compare", ("--compare",), "switch", "also cost data-parallel, expert and Parallax strategies and "
            "print predicted speedups", False),
    Setting("sparse_embeddings", ("--sparse-embeddings",), "switch", "model embeddings as row lookups with sparse "
            "gradient exchange (default: the original one-hot GEMM)", False),
    Setting("distinct_rows", ("--distinct-rows",), "count", "distinct vocabulary rows a device's tokens touch per "
            "step, for sparse embedding gradients (default: one per token)", metavar="U"),
    Setting("breakdown", ("--breakdown",), "switch", "where the cost goes: compute, communication and "
            "re-distribution by operator kind and by layer group (pandas); with --compare, the layers where the "
            "plan and data parallel differ most", False),
)

_SWEEPS = (
    Setting("jobs", ("--jobs",), "jobs", "settings run at once, one process each (default: every core)",
            metavar="N", group="sweeps"),
    Setting("plans", ("--plans",), "path", "also write each setting's plan (JSON) into DIR", metavar="DIR",
            group="sweeps"),
    Setting("plot", ("--plot",), "path", "plot --metric against the swept numeric setting: .png or .svg "
            "(matplotlib), one line per value of the other swept settings", metavar="FILE", group="sweeps"),
    Setting("metric", ("--metric",), "name", "what --plot shows: speedup over data parallel, predicted step time, "
            "or cost (default: speedup)", "speedup", choices=("speedup", "time", "cost"), group="sweeps"),
)

#: every setting the command line takes, in the order of its help (and of a sweep's axes)
DECLARED: tuple[Setting, ...] = _MODEL + _cluster_settings() + _option_settings() + _PIPELINE + _RUN + _SWEEPS
_BY_NAME = {s.name: s for s in DECLARED}
DEFAULTS = {s.name: s.default for s in DECLARED if s.default is not None}
#: the settings a comma-separated list sweeps, and their flags, in the sweep's axis order
SWEEPABLE = {s.name: s.flag for s in DECLARED if s.sweep}
#: the settings that describe the cluster (file-field names)
CLUSTER_SETTINGS = tuple(CLUSTER_FIELDS)
#: the settings of the execution options
OPTION_SETTINGS = tuple(s.name for s in DECLARED if s.kind == "option")
#: settings named by the library in errors without a flag of their own, and the words that name them
_OTHER_NAMES = {"p": "-p", "flops and bw": "--flops and --bw", "flops and inter_bw": "--flops and --inter-bw",
                "embedding_sync": "--evaluate: embedding_sync", "embedding_lookup": "--evaluate: embedding_lookup"}


def flag_of(name: str) -> str:
    """How the command line names setting ``name`` in a message."""
    s = _BY_NAME.get(name)
    if s is not None:
        return s.flag
    if name in _OTHER_NAMES:
        return _OTHER_NAMES[name]
    parts = name.split(" and ")  # several settings together: "--a, --b and --c"
    if len(parts) > 1 and all(p in _BY_NAME for p in parts):
        flags = [_BY_NAME[p].flag for p in parts]
        return ", ".join(flags[:-1]) + " and " + flags[-1]
    return name


def _make_settings():
    """The :class:`Settings` record: one field per declared setting, then
    ``threads`` (a sweep's worker's share of the cores), ``sweep`` (the
    settings given several values) and ``explicit`` (the flags given)."""
    specs = [(s.name, object, field(default=s.default)) for s in DECLARED]
    specs += [("threads", object, field(default=None)), ("sweep", tuple, field(default=())),
              ("explicit", frozenset, field(default=frozenset(), compare=False))]
    cls = make_dataclass("Settings", specs, frozen=True, namespace={"__doc__": (
        "Everything a run asks for (see the module docstring): one field per "
        "declared setting (:data:`DECLARED`), ``threads``, ``sweep`` (((setting, "
        "values), ...) of a sweep) and ``explicit`` (the flags given on the "
        "command line).")})
    cls.__module__ = __name__  # pickled by name for a sweep's workers
    return cls


Settings = _make_settings()
