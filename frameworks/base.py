"""What every training framework's profile declares: the :class:`Framework`
record, the model states of a ZeRO stage (:class:`States`), and the
registry (see ``frameworks/``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from cluster.presets import ATTENTION_KERNELS, attention_share, device_arch
from errors import SettingError, shown

__all__ = ["States", "Framework", "FRAMEWORKS", "register", "known", "KERNELS", "SELECTIVE", "SEQUENCE_PARALLEL",
           "RINGS", "FLOAT8_GATHERS", "PIPELINE_SPLITS"]

FRAMEWORKS: dict[str, "Framework"] = {}
KERNELS = ("fused", "eager")
SELECTIVE = ("attention", "ops")
SEQUENCE_PARALLEL = ("gathered", "shard")
RINGS = ("", "allgather", "p2p")
PIPELINE_SPLITS = ("", "embedding_loss")
EXPERT_RULES = ("", "megatron", "torchtitan")
#: each rule of EXPERT_RULES, as a report says it (Framework.refuses)
EXPERT_RULE_TEXT = {
    "": "",
    "megatron": "its MoE layer splits the experts by tensor parallelism only under sequence parallelism (sp=1)",
    "torchtitan": "it splits the experts by tensor parallelism only without expert parallelism; with it, each "
                  "expert whole (tp=1 or etp=1, under sequence parallelism) over its FSDP ranks (zero=3)",
}
EXPERT_WEIGHTS = ("", "activation")
ARCHITECTURES = ("volta", "ampere", "hopper", "blackwell")  # the device presets' (cluster.presets.Device.arch)
FLOAT8_GATHERS = ("weights", "inputs")


@dataclass(frozen=True)
class States:
    """Bytes per trained parameter of the model states at one ZeRO stage
    (mixed-precision Adam), each part as ``(held whole, sharded)``: a
    device holds ``whole + sharded / N`` bytes per parameter of its shard,
    ``N`` the data-parallel replicas."""

    weights: tuple[float, float]
    gradients: tuple[float, float]
    optimizer: tuple[float, float]

    @property
    def whole(self) -> float:
        return self.weights[0] + self.gradients[0] + self.optimizer[0]

    @property
    def sharded(self) -> float:
        return self.weights[1] + self.gradients[1] + self.optimizer[1]


@dataclass(frozen=True)
class Framework:
    """How a training framework runs a plan: what it keeps and how it runs
    each piece of work (see ``frameworks/``).  A profile module declares one
    with the source of every figure; :meth:`run` turns on what a run asks
    for (``torch.compile``, Float8, sequence parallelism).

    Model states: ``states[z]`` the :class:`States` at ZeRO stage ``z``
    (Adam's two moments of ``moment`` bytes each in the optimizer part; an
    optimizer with fewer keeps ``moment`` bytes less per moment);
    ``gathered`` bytes per parameter of a block held whole while the block
    runs when its weights are sharded (stage 3: the gathered weights, the
    next block's prefetched, their gradients before the reduce-scatter);
    ``staged``: (weights, gradients) bytes per parameter a pipeline stage
    holds whole for the whole step when its weights are sharded (gathered
    once, gradients accumulated over the micro-batches unsharded).

    Activations: ``sequence_parallel`` what a tensor-parallel product keeps
    of an input that arrives all-gathered from a sequence-parallel region
    (``gathered``, or ``shard``: this device's part, gathered again for the
    backward pass); ``activation_input``: a product's activation keeps its
    input beside its output; ``expert_weights``: where a mixture of experts
    applies each token's routing weights, ``""`` to the experts' outputs as
    they are combined (the combine keeps them for the weights' gradient) or
    ``activation`` in the experts' activation (the combine keeps the
    routing alone); ``recompute_modules``: the modules its selective
    recomputation re-runs (:data:`options.base.MODULES`; ``()``: the
    ``selective`` rule), which ``recompute_modules_by``, its switch, lets a
    run name (``--recompute-modules``); ``selective``: what selective recomputation
    drops (``attention``: the attention core; ``ops``: every operator's
    result but the saved products'); ``loss``: (kept, held beside it at
    its peak) bytes per logit of the loss, and ``loss_split`` the same
    when the vocabulary is split (a vocabulary-parallel loss);
    ``compiled_loss``: the same when the run compiles and the framework
    compiles the loss too (``None``: the loss stays eager under
    ``torch.compile``); :attr:`loss_kept` is what a run keeps.

    ``grad_buffer``: the gradients are kept in the precision they are
    reduced in (the cluster's ``grad_precision``), the ``states``' 4 bytes
    an fp32 gradient's.

    Time: ``grad_precision``, ``bucket_mb`` and ``overlap`` as the cluster's
    fields of those names (the framework's defaults); ``sharded_overlap``:
    the share of the gathers and gradient reduce-scatters of ZeRO stages 2
    and 3 that runs under computation whatever ``overlap`` says, where the
    framework always overlaps them (``None``: ``overlap``); ``kernels``: ``fused``
    (one kernel per operator) or ``eager`` (each element-wise operation its
    own kernel and pass over memory, unless compiled); ``loss_passes``
    bytes per logit the loss moves (forward, backward), and
    ``compiled_loss_passes`` the same for a compiled loss (with
    ``compiled_loss``; :attr:`loss_moved` is what a run moves); ``optimizer_bytes``
    bytes moved per updated parameter by the optimizer step;
    ``gather_bytes`` bytes moved per parameter at each gather (ZeRO stage
    3's copies out of the collectives' buffers) and ``reduce_bytes`` at
    each reduction of its gradient (copies into them): a micro-batch
    gathers twice and reduces where the framework reduces after every
    micro-batch, a pipeline stage kept whole gathers and reduces once a
    step (:func:`cost.time.copies`);
    ``launch_us`` microseconds per kernel launched; ``contention``:
    seconds of computation lost per second of collective running under it
    (the collectives' multiprocessors and memory traffic); ``overhead``:
    seconds lost per second of computation to what the model does not
    price otherwise (a framework's hooks, copies and synchronisation), and
    ``overhead_by_arch`` the same on the device architectures that lose a
    different share (``(arch, overhead)`` pairs; :meth:`on_device`).

    Context parallelism: ``ring`` how attention runs over a split sequence
    (ring attention, :func:`cost.time.ring_parts`): ``""`` the tool's own
    (the keys and values all-gathered before the operator, on its input
    edges), ``allgather`` (keys and values all-gathered under the first
    step's attention; PyTorch's default rotation) or ``p2p`` (passed to the
    next device step by step under each step's attention); the keys' and
    values' gradients are passed step by step at ``ring_grad_bytes`` bytes
    per element (0: the training precision's); ``repeat_kv``: the model
    repeats each key and value head for every query head of its group
    before the kernel, so the ring passes (and accumulates the gradients
    of) the repeated heads.

    Attention: ``attention_kernel`` the fused attention kernel the
    framework runs (a name in ``cluster.presets.ATTENTION_KERNELS``; ``""``:
    whatever the device's own figure assumes): its share of the peak on the
    device's architecture becomes the cluster's ``attention_eff`` unless a
    flag, a cluster file or a plan file's record sets that.

    Float8: ``float8_gathers`` the collectives that move a Float8 product's
    operands at a byte per element: ``weights`` (ZeRO stage 3's all-gathers
    of its weights, cast before gathering) and ``inputs`` (its input
    re-distributed into it, e.g. tensor parallelism's all-gather, cast
    before; the gradient goes back in the training precision);
    ``float8_saved`` the bytes per element at which a Float8 product keeps
    its input for the backward pass (0: the training precision's, the
    input as it came; 1: its FP8 cast).

    Tensor parallelism: ``tp_overlap_by`` the framework's switch that runs
    a matrix product's tensor-parallel collectives piece by piece under it
    (``""``: none; ``--tp-overlap`` turns it on, :func:`cost.tables.tp_room`),
    and ``tp_overlap_compiled`` whether that needs ``torch.compile``.

    Pipelines: ``schedules`` the pipeline schedules the framework runs
    (``gpipe``, ``1f1b``, ``interleaved``: what ``--search standard`` and
    ``--schedule auto`` try).

    ZeRO: ``zero_stages`` the stages the framework runs (what ``--search
    standard`` tries), ``pipeline_zero_stages`` those it runs beside
    pipeline stages; ``sharded_every_micro_batch``: where gradients are
    sharded (stages 2 and 3) and a step accumulates several micro-batches,
    each micro-batch's are reduce-scattered after its own backward pass,
    under it (there is no whole gradient to accumulate them in), rather
    than once a step; a framework that keeps a pipeline stage's gradients
    whole over its micro-batches (``staged``) reduces them once in a
    pipeline of several stages (:func:`cost.rules.keeps_stage_whole`).

    Experts: ``experts`` the rule by which the framework parallelises a
    mixture of experts (:meth:`runs_experts`): ``""`` any standard
    configuration; ``megatron``: tensor parallelism only with sequence
    parallelism (Megatron Core's MoE layer refuses it without);
    ``torchtitan``: the experts split by tensor parallelism exactly when
    without expert parallelism (with it, over ranks borrowed from ``dp_shard
    x cp x tp``, under sequence parallelism), and expert parallelism only
    over FSDP (ZeRO 3); ``deepep_by`` the framework's switch that sends the
    experts' tokens through DeepEP (``""``: none; ``--deepep`` turns it on):
    a token crosses once to each other node that holds one of its experts,
    where the all-to-all sends each of its copies
    (:meth:`cluster.Cluster.alltoall`); ``moe_host_ms``: the milliseconds
    the host takes to launch a token-dropless expert layer's kernels for a
    micro-batch, forward and backward, which the layer waits on when its
    device time is shorter (``frameworks.host``; 0: never).

    Pipelines: ``pipeline_split`` how a standard configuration's stages
    share blocks that do not divide evenly over their model chunks (``""``:
    as evenly as they divide, the first stages taking one more;
    ``embedding_loss``: the embedding and the loss each counted as a block,
    the first and the last stage one block short, where that divides;
    :func:`pipeline.split_counts`).

    Memory beyond tensors: ``reserve`` what the caching allocator holds
    beyond the tensors' peak, as a share of it; ``outside_gb`` what the
    process holds outside the allocator (CUDA context, NCCL's buffers).

    ``compiled``, ``float8``, ``sp``, ``tp_overlap``: what the run turns on
    (:meth:`run`); ``supplied``: the cluster fields nothing set for the
    run, the framework's or the device's defaults (a plan file records
    them, so that evaluating it under another framework takes that one's)."""

    name: str
    title: str
    states: tuple[States, States, States, States]
    moment: float
    gathered: float
    staged: tuple[float, float]
    sequence_parallel: str
    activation_input: bool
    selective: str
    loss: tuple[float, float]
    loss_split: tuple[float, float]
    grad_precision: str
    bucket_mb: float
    overlap: float
    kernels: str
    loss_passes: tuple[float, float]
    optimizer_bytes: float
    gather_bytes: float
    launch_us: float
    contention: float
    overhead: float
    reserve: float
    outside_gb: float
    ring: str = ""
    ring_grad_bytes: float = 0.0
    reduce_bytes: float = 0.0
    repeat_kv: bool = False
    float8_gathers: tuple[str, ...] = ()
    float8_saved: float = 0.0
    grad_buffer: bool = False
    tp_overlap_by: str = ""
    tp_overlap_compiled: bool = False
    deepep_by: str = ""
    moe_host_ms: float = 0.0
    expert_weights: str = ""
    recompute_modules: tuple = ()
    recompute_modules_by: str = ""
    attention_kernel: str = ""
    compiled_loss: tuple[float, float] | None = None
    compiled_loss_passes: tuple[float, float] | None = None
    overhead_by_arch: tuple[tuple[str, float], ...] = ()
    pipeline_split: str = ""
    experts: str = ""
    sharded_overlap: float | None = None
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    pipeline_zero_stages: tuple[int, ...] = (0, 1)
    schedules: tuple[str, ...] = ("gpipe", "1f1b", "interleaved")
    sharded_every_micro_batch: bool = False
    fitted: tuple[str, ...] = ()  # the published rows its fitted constants come from ("source: row")
    compiled: bool = False
    float8: bool = False
    sp: bool = False
    tp_overlap: bool = False
    deepep: bool = False
    supplied: tuple[str, ...] = ()  # the cluster fields left to defaults in the run (planning.framework_cluster)

    def runs_experts(self, std, zero: int | None = None) -> bool:
        """Whether the framework runs the experts of the standard
        configuration ``std`` (a model with experts) as it is costed, at the
        ZeRO stage ``zero`` when given (see ``experts`` above)."""
        if self.experts == "megatron":
            return std.tp == 1 or bool(std.sp)
        if self.experts == "torchtitan":
            if std.ep == 1:
                return not std.folded
            return (std.tp == 1 or (std.expert_tp == 1 and bool(std.sp))) and zero in (None, 3)
        return True

    def refuses(self, std, experts: bool) -> str:
        """Why the framework does not run the standard configuration
        ``std`` (of a model with ``experts`` or without) as it is costed:
        a ZeRO stage it does not run (beside pipeline stages, its
        ``pipeline_zero_stages``), a pipeline schedule it does not run, or
        experts parallelised against its rule; ``""`` where it runs it
        (what ``--search standard`` tries)."""
        staged = std.pp > 1
        if staged and (why := self.refuses_schedule(std.schedule)):
            return why
        zeros = self.pipeline_zero_stages if staged else self.zero_stages
        if std.zero not in zeros:
            return (f"{self.title} runs ZeRO {_either(zeros)}{' beside pipeline stages' if staged else ''}, "
                    f"not zero={std.zero}")
        if experts and not self.runs_experts(std, std.zero):
            return f"{self.title} does not parallelise the experts so: {EXPERT_RULE_TEXT[self.experts]}"
        return ""

    def refuses_schedule(self, name: str) -> str:
        """Why the framework does not run a pipeline of the schedule
        ``name`` (``gpipe``, ``1f1b``, ``interleaved``); ``""`` where it
        does."""
        return "" if name in self.schedules else f"{self.title} runs {_either(self.schedules)} pipelines, not {name}"

    def overlap_of(self, overlap: float, sharded: bool) -> float:
        """The share of gradient collectives and weight gathers that runs
        under computation, the cluster's being ``overlap``: its
        ``sharded_overlap`` where the operators shard their gradients
        (``sharded``: ZeRO 2 and 3)."""
        return self.sharded_overlap if sharded and self.sharded_overlap is not None else overlap

    def __post_init__(self):
        if len(self.states) != 4 or not all(isinstance(s, States) for s in self.states):
            raise ValueError(f"{self.name}: states must give ZeRO stages 0 to 3")
        for field, allowed in (("kernels", KERNELS), ("selective", SELECTIVE),
                               ("sequence_parallel", SEQUENCE_PARALLEL), ("ring", RINGS),
                               ("pipeline_split", PIPELINE_SPLITS), ("experts", EXPERT_RULES),
                               ("expert_weights", EXPERT_WEIGHTS)):
            if getattr(self, field) not in allowed:
                raise ValueError(f"{self.name}: {field} must be one of {', '.join(map(repr, allowed))}")
        if self.attention_kernel and self.attention_kernel not in ATTENTION_KERNELS:
            raise ValueError(f"{self.name}: attention_kernel must be one of {', '.join(ATTENTION_KERNELS)}")
        if any(g not in FLOAT8_GATHERS for g in self.float8_gathers):
            raise ValueError(f"{self.name}: float8_gathers must name some of {', '.join(FLOAT8_GATHERS)}")
        if not set(self.zero_stages) | set(self.pipeline_zero_stages) <= {0, 1, 2, 3} or not self.zero_stages \
                or not self.pipeline_zero_stages:
            raise ValueError(f"{self.name}: zero_stages and pipeline_zero_stages name some of 0, 1, 2, 3")
        if not self.schedules or any(x not in ("gpipe", "1f1b", "interleaved") for x in self.schedules):
            raise ValueError(f"{self.name}: schedules must name some of 'gpipe', '1f1b', 'interleaved'")
        if any(arch not in ARCHITECTURES for arch, _ in self.overhead_by_arch):
            raise ValueError(f"{self.name}: overhead_by_arch must name some of {', '.join(ARCHITECTURES)}")
        if not self.moe_host_ms >= 0.0:
            raise ValueError(f"{self.name}: moe_host_ms must be 0 or more")
        if (self.compiled_loss is None) != (self.compiled_loss_passes is None):
            raise ValueError(f"{self.name}: compiled_loss and compiled_loss_passes go together")

    def run(self, *, compiled: bool = False, float8: bool = False, sp: bool = False,
            tp_overlap: bool = False) -> "Framework":
        """The profile with what a run turns on (its experts' switches,
        ``deepep`` and ``recompute_modules``, set where the planner finds
        them: ``frameworks.planning``)."""
        return replace(self, compiled=bool(compiled), float8=bool(float8), sp=bool(sp), tp_overlap=bool(tp_overlap))

    def on_device(self, device: str | None) -> "Framework":
        """The profile on the device preset ``device``: its ``overhead`` the
        figure for the device's architecture where ``overhead_by_arch``
        gives one (else, and on a device that is no preset, its own)."""
        arch = device_arch(device)
        by_arch = dict(self.overhead_by_arch)
        if arch not in by_arch:
            return self
        return replace(self, overhead=by_arch[arch], overhead_by_arch=())

    @property
    def modules_named(self) -> bool:
        """Whether the run names other modules for selective recomputation
        than the profile re-runs by default (``--recompute-modules``)."""
        return bool(self.recompute_modules_by) and self.recompute_modules != FRAMEWORKS[self.name].recompute_modules

    @property
    def eager(self) -> bool:
        """Whether element-wise work runs as eager PyTorch kernels."""
        return self.kernels == "eager" and not self.compiled

    @property
    def loss_compiled(self) -> bool:
        """Whether the run compiles the loss (``torch.compile`` on a
        framework that compiles it with the model)."""
        return self.compiled and self.compiled_loss is not None

    @property
    def loss_kept(self) -> tuple[float, float]:
        """(kept, held at its peak) bytes per logit of the loss over a
        whole vocabulary as the run keeps it: ``compiled_loss`` or ``loss``."""
        return self.compiled_loss if self.loss_compiled else self.loss

    @property
    def loss_moved(self) -> tuple[float, float]:
        """(forward, backward) bytes per logit the run's loss moves:
        ``compiled_loss_passes`` or ``loss_passes``."""
        return self.compiled_loss_passes if self.loss_compiled else self.loss_passes

    def state_bytes(self, stage: int, copies: int) -> States:
        """The :class:`States` at ZeRO stage ``stage`` with ``copies``
        optimizer moments (Adam: 2)."""
        s = self.states[stage]
        less = self.moment * (2 - copies)
        o_whole, o_sharded = s.optimizer
        if o_sharded:
            o_sharded -= less
        else:
            o_whole -= less
        return replace(s, optimizer=(o_whole, o_sharded))

    def beyond(self, peak: float) -> tuple[float, float]:
        """Bytes a process holds beyond the tensors' ``peak``: the caching
        allocator's reserve, and what lies outside the allocator."""
        return self.reserve * peak, self.outside_gb * 1e9

    def describe(self, cluster=None) -> str:
        """The framework in a few words, for the report's header: with the
        ``cluster`` it runs on, its attention kernel where the kernel's
        figure is the one in force."""
        how = []
        if self.kernels == "eager":
            how.append("torch.compile" if self.compiled else "eager kernels")
        if self.float8:
            how.append("Float8 linear layers")
        if self.sp:
            how.append("sequence parallel")
        if self.tp_overlap:
            how.append("tensor-parallel collectives overlapped" if self.sp else
                       "no tensor-parallel overlap without sequence parallelism")
        if self.deepep:
            how.append("DeepEP dispatch")
        if self.modules_named:
            *rest, last = self.recompute_modules
            how.append(f"selective recomputation of {', '.join(rest) + ' and ' if rest else ''}{last}")
        if (self.attention_kernel and cluster is not None and "attention_eff" in self.supplied
                and attention_share(self.attention_kernel, cluster.device) is not None):
            how.append(ATTENTION_KERNELS[self.attention_kernel].title)
        return self.title + (f" ({', '.join(how)})" if how else "")


def register(fw: Framework) -> Framework:
    """Add a profile to :data:`FRAMEWORKS`."""
    if fw.name in FRAMEWORKS:
        raise ValueError(f"two frameworks are named {fw.name!r}")
    FRAMEWORKS[fw.name] = fw
    return fw


def known(name: str) -> Framework:
    """The profile ``name`` names (any case), or a :class:`SettingError`
    listing them."""
    fw = FRAMEWORKS.get(str(name).strip().lower())
    if fw is None:
        raise SettingError("framework", f"{shown(name)} is not a known framework; choose one of "
                                        f"{', '.join(FRAMEWORKS)}")
    return fw


def _either(values) -> str:
    """``0 or 3``: the values, the last after "or"."""
    v = [str(x) for x in values]
    return v[0] if len(v) == 1 else f"{', '.join(v[:-1])} or {v[-1]}"
