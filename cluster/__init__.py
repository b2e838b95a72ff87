"""The machine a plan runs on: the devices and the network between them.

A :class:`Cluster` is one immutable value passed down to every cost formula;
the collectives are its methods, so how a group of devices communicates is
decided here and nowhere else.  Every cost is in FLOP: moving one element
costs ``W = bytes * 1000 * flops / bw`` FLOP, the work the device could have
done meanwhile (5000 with the defaults: the PaSE paper's 8-byte word at 10
TFLOPS and 16 GB/s), and a time ``t`` costs ``t * flops * 1e12`` FLOP, so a
step's predicted time is its cost divided by the device's FLOPS.

**Two levels.**  ``gpus_per_node = G`` devices share a node (links of ``bw``
GB/s); nodes are joined at ``inter_bw``.  Devices are numbered node-major:
node 0 holds devices 0..G-1, the last node holds what remains when G does not
divide p.  A configuration that uses ``P`` devices runs on devices
``0..P-1``; its *layout* numbers them by the coordinates of its splits in a
fixed order (mixed radix, slowest first): the sample letter ``b`` first, the
experts ``x`` and the sequence ``s`` next, then the other letters in the
order of the iteration space.  So the batch, split for data parallelism,
spreads across nodes, then the experts and the sequence (context
parallelism), and the model dimensions, whose reductions are the most
frequent, stay inside a node, in every operator alike: as the frameworks'
device meshes order them (Megatron-LM's ranks: tensor, context, expert,
data parallelism from the fastest), with tensor parallelism inside a node
(an attention's heads come before its sequence in its iteration space,
``bgusd``).  A split letter with
stride ``s`` (the product of the splits after it) and split ``c`` keeps
``min(c, max(1, G/s))`` of its ways inside a node and the rest across nodes;
this is exact when G and the splits are powers of two (more generally, when
each letter's block of devices is a multiple or a divisor of a node), an
approximation otherwise.

* An all-reduce over a group of ``q = q_in * q_out`` devices (``q_in`` per
  node, ``q_out`` nodes) is the hierarchical algorithm: reduce-scatter inside
  the node, all-reduce of the ``1/q_in`` shard across nodes, all-gather inside:
  ``2 w (q_in - 1)/q_in`` words at ``bw`` and ``2 (w/q_in)(q_out - 1)/q_out`` at
  ``inter_bw``; with one node it is the ring ``2 w (q - 1)/q``.  Inside a
  node it runs at ``bw * link_eff`` as every collective does, or at ``bw *
  allreduce_eff`` when that is given (in-switch reduction, NVLink SHARP,
  speeds up the all-reduce alone).
* A point-to-point exchange runs at ``inter_bw`` when its group spans nodes
  (the slowest link sets the step), else at ``bw``.
* An all-to-all (a mixture of experts' dispatch and combine) sends a
  device's ``w`` words spread evenly over its group: ``w (q_in - 1)/q`` to
  the devices of its node at ``bw`` and ``w (q - q_in)/q`` to other nodes at
  ``inter_bw``, one step of each level's latency.
* A re-distribution charges the words a device needs from other nodes at
  ``inter_bw`` and the rest at ``bw`` (see :meth:`Cluster.redistribute`).
* Every collective step pays ``latency`` microseconds: ``2(q_in - 1) +
  2(q_out - 1)`` steps for an all-reduce, one for an exchange, and one per
  direction (forward and backward) for a re-distribution.

Without ``gpus_per_node`` (or with ``G >= p``), no latency and the default
device, every number is the original tool's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from errors import SettingError, plain, shown

__all__ = ["Cluster", "PRECISIONS", "DEFAULT_PRECISION", "FIELDS", "Declared"]

MAX_WORD_COST = 1e15
MIN_WORD_COST = 1e-9
#: bytes of one element moved or kept, by training precision; the default is
#: the original tool's 8-byte word
PRECISIONS = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2}
DEFAULT_PRECISION = "fp64"


def shown_number(x: float) -> str:
    """A bound in a message: ``1,000,000`` rather than ``1e+06``."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


#: per kind of numeric field: (smallest, whether the smallest is allowed, default largest, what it is)
_BOUNDS = {"positive": (0.0, False, 1e12, "a number"), "nonnegative": (0.0, True, 1e6, "a number"),
           "fraction": (0.0, False, 1.0, "a number"), "share": (0.0, True, 1.0, "a number"),
           "count": (1, True, 10**6, "an integer")}


def check_value(name: str, value):
    """``value`` for the cluster field ``name``, checked against its
    declaration (its kind and bounds; a float for the numbers, an int for
    counts); a :class:`errors.SettingError` naming the rule otherwise.  The
    command line, cluster files and the fields themselves all check so."""
    d = FIELDS[name]
    low, inclusive, high, what = _BOUNDS[d.kind]
    high = d.high if d.high is not None else high
    if d.low is not None:
        low, inclusive = d.low, True
    if d.kind == "count":
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        if not ok:
            raise SettingError(name, f"must be an integer from {low:,} to {shown_number(high)}, got {shown(value)}")
        return value
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
        low <= value if inclusive else low < value) and value <= high
    if not ok:
        if high == math.inf:
            span = f"from {shown_number(low)} on" if inclusive else "above 0"
        else:
            span = (f"from {shown_number(low)} to " if inclusive else "above 0 and at most ") + shown_number(high)
        raise SettingError(name, f"must be {what} {span}, got {shown(value)}")
    return float(value)


@dataclass(frozen=True)
class Declared:
    """How a cluster field is given and shown, declared once beside the
    field (its ``metadata``): its command-line ``flag`` (the file key is
    the field's name), the ``kind`` of value (``positive``, ``nonnegative``,
    ``count``, ``device``, ``precision``), ``help``, ``metavar``, whether a
    comma-separated list sweeps it (``sweep``), its axis ``label`` in a
    sweep's plot (numeric fields) and its ``tag`` in a plan file's name."""

    flag: str
    kind: str
    help: str
    metavar: str | None = None
    sweep: bool = True
    label: str = ""
    tag: str = ""
    high: float | None = None  # the largest value (default: the kind's)
    low: float | None = None  # the smallest value, allowed (default: the kind's)


def _field(default, flag: str, kind: str, help: str, **how):
    return field(default=default, metadata={"declared": Declared(flag, kind, help, **how)})


@dataclass(frozen=True)
class Cluster:
    """Identical devices of ``flops`` peak TFLOPS and ``device_memory`` GB,
    ``G = gpus_per_node`` per node joined by links of ``bw`` GB/s, nodes
    joined at ``inter_bw`` GB/s, ``latency`` microseconds per collective
    step, training in ``precision`` (see the module docstring).  ``device``
    names the preset the figures came from, if any.  Each field declares
    how it is given (:class:`Declared`): the command line, cluster files,
    sweeps and strategy files all follow from these declarations."""

    flops: float = _field(10.0, "--flops", "positive", "peak TFLOPS per device (default: 10.0, or the --device's)",
                          label="peak TFLOPS per device", tag="flops")
    bw: float = _field(16.0, "--bw", "positive", "peak interconnect bandwidth in GB/s, inside a node "
                       "(default: 16.0, or the --device's)", label="bandwidth (GB/s)", tag="bw")
    inter_bw: float | None = _field(None, "--inter-bw", "positive", "bandwidth between nodes (default: --bw; "
                                    "needs --gpus-per-node)",
                                    metavar="GB/s", label="bandwidth between nodes (GB/s)", tag="ibw")
    gpus_per_node: int | None = _field(None, "--gpus-per-node", "count", "devices per node, numbered node-major "
                                       "(default: one node holds them all)", metavar="G", label="devices per node",
                                       tag="G")
    latency: float = _field(0.0, "--latency", "nonnegative", "microseconds per collective step (default: 0)",
                            metavar="US", label="latency (us)", tag="lat")
    device: str = _field("", "--device", "device", "a device preset: peak TFLOPS at the precision, memory and "
                         "bandwidth inside a node (v100, a100-40gb, a100-80gb, h100, h100-96gb, h100-nvl, h800, "
                         "h200, b200, b300, gb200, gb300, paper); flags override it",
                         metavar="NAME")
    precision: str = _field(DEFAULT_PRECISION, "--precision", "precision", "training precision: fp64 (the original "
                            "8-byte word, default), fp32, bf16 or fp16 (mixed precision)", metavar="P")
    device_memory: float | None = _field(None, "--device-memory", "positive", "memory of one device: the search "
                                         "returns the cheapest strategy that fits (default: the --device's, else "
                                         "unbounded)", metavar="GB", label="device memory (GB)", tag="mem", high=1e6)
    network: str = _field("", "--network", "network", "the network between nodes, a preset (ib-edr, ib-hdr, "
                          "ib-ndr, ib-xdr, roce-400, or the same speed as inside a node: nvlink); --inter-bw "
                          "overrides its bandwidth (default: the --device's)", metavar="NAME")
    # -- the realistic model (a real device): what the device and NCCL reach, not only their peaks --
    mem_bw: float | None = _field(None, "--mem-bw", "positive", "device memory bandwidth in GB/s: with it, the "
                                  "realistic time model (roofline, vendor FLOP, overlap) applies (default: the "
                                  "--device's; none for the paper's model)", metavar="GB/s",
                                  label="memory bandwidth (GB/s)", tag="hbm")
    matmul_eff: float = _field(1.0, "--matmul-eff", "fraction", "share of the peak large matrix products reach "
                               "(realistic model; default: the --device's)", metavar="F",
                               label="matrix-product efficiency", tag="mm")
    attention_eff: float = _field(1.0, "--attention-eff", "fraction", "share of the peak a fused attention kernel "
                                  "reaches (realistic model; default: the --framework's attention kernel's on the "
                                  "device where it has a figure, else the --device's)", metavar="F",
                                  label="attention efficiency", tag="att")
    sms: int | None = _field(None, "--sms", "count", "streaming multiprocessors of a device: a matrix product runs "
                             "in waves of 128 x 128 output tiles, one per multiprocessor, a last partial wave costing "
                             "a whole one (realistic model; default: the --device's)", metavar="N",
                             label="multiprocessors", tag="sms", high=10**4)
    memory_eff: float = _field(1.0, "--memory-eff", "fraction", "share of the memory bandwidth memory-bound kernels "
                               "reach (realistic model; default: the --device's)", metavar="F",
                               label="memory-bound efficiency", tag="mem_eff")
    link_eff: float = _field(1.0, "--link-eff", "fraction", "share of --bw that collectives reach inside a node "
                             "(NCCL's bus bandwidth; default: the --device's, else 1)", metavar="F",
                             label="link efficiency", tag="le")
    allreduce_eff: float | None = _field(None, "--allreduce-eff", "positive", "share of --bw an all-reduce's bus "
                                         "bandwidth reaches inside a node where it differs from the other "
                                         "collectives' (--link-eff): in-switch reduction (NVLink SHARP) takes it "
                                         "above 1, up to 2 (realistic model; default: --link-eff)", metavar="F",
                                         label="all-reduce efficiency", tag="are", high=2.0)
    net_eff: float = _field(1.0, "--net-eff", "fraction", "share of --inter-bw that collectives reach between "
                            "nodes (default: the --network's, else 1)", metavar="F", label="network efficiency",
                            tag="ne")
    inter_latency: float | None = _field(None, "--inter-latency", "nonnegative", "microseconds per collective step "
                                         "between nodes (default: --latency, or the --network's)", metavar="US",
                                         label="latency between nodes (us)", tag="ilat")
    bucket_mb: float = _field(25.0, "--bucket-mb", "positive", "size of the gradient buckets synchronised together "
                              "(realistic model: a bucket pays one collective's latency; default: 25, PyTorch DDP's)",
                              metavar="MB", label="gradient bucket (MB)", tag="bucket", low=1e-3, high=1e6)
    overlap: float = _field(1.0, "--overlap", "share", "share of the gradients' reduction and ZeRO's weight gathers "
                            "that overlaps computation (realistic model): 1 (default) as PyTorch DDP, FSDP and "
                            "Megatron-LM with --overlap-grad-reduce run them, 0 after the backward pass",
                            metavar="F", label="overlapped share", tag="ovl")
    grad_precision: str = _field("", "--grad-precision", "precision", "precision the gradients are reduced in "
                                 "(realistic model; default: fp32 under 16-bit training, as Megatron-LM and "
                                 "torchtitan reduce them, else the training precision)", metavar="P", sweep=False)
    fp8_flops: float | None = _field(None, "--fp8-flops", "positive", "peak dense FP8 TFLOPS per device, at which "
                                     "--float8 runs the linear layers' products (realistic model; default: the "
                                     "--device's, none without a device)", metavar="TFLOPS",
                                     label="peak FP8 TFLOPS per device", tag="fp8")
    power: float = _field(1.0, "--power", "fraction", "share of its peak a device's matrix units sustain under its "
                          "power limit (realistic model; default: the --device's, 1 at its rated power)",
                          metavar="F", label="power-limit factor", tag="pow")
    host_ms: float | None = _field(None, "--host-ms", "nonnegative", "milliseconds the host takes to launch the "
                                   "kernels of a token-dropless expert layer for a micro-batch, forward and backward, "
                                   "which the layer waits on where its device time is shorter (realistic model; "
                                   "default: the --framework's figure, Megatron-LM's; 0: no wait)", metavar="MS",
                                   label="host launches per expert layer (ms)", tag="host", high=1e4)
    headroom: float | None = _field(None, "--headroom", "nonnegative", "memory of a device the plan leaves free for "
                                    "the framework, the CUDA context, workspaces and fragmentation, in GB (default: "
                                    "the --device's)", metavar="GB", label="memory headroom (GB)", tag="free")

    def __post_init__(self):
        for name, d in FIELDS.items():
            value = getattr(self, name)
            if d.kind in _BOUNDS and value is not None:
                object.__setattr__(self, name, check_value(name, value))
        if self.headroom is not None and self.device_memory is not None and self.headroom >= self.device_memory:
            raise SettingError("headroom", f"({self.headroom:g} GB) must be less than the device memory "
                                           f"({self.device_memory:g} GB)")
        for name in ("precision", "grad_precision"):
            value = getattr(self, name)
            if value not in PRECISIONS and (name == "precision" or value != ""):
                raise SettingError(name, f"must be one of {', '.join(PRECISIONS)}, got {shown(value)}")
        for name in ("allreduce_eff", "host_ms"):
            if getattr(self, name) is not None and not self.realistic:
                raise SettingError(name, "belongs to the realistic model: give a real --device (or --mem-bw)")
        link = " and link_eff" if self.link_eff != 1.0 else ""
        net = (" and net_eff" if self.net_eff != 1.0 else "") if self.inter_bw is not None else link
        checks = ((f"flops and bw{link}", self.bw, self.word), (f"flops and inter_bw{net}", self.inter_bw,
                                                               self.inter_word))
        for name, bw, w in checks:
            if bw is not None and not MIN_WORD_COST <= w <= MAX_WORD_COST:
                raise SettingError(name, f"({self.flops:g} TFLOPS, {bw:g} GB/s) make one word cost {w:.3g} FLOP; "
                                         "the model needs 1e-9 to 1e15 (flops in TFLOPS, bw in GB/s)")
        if self.realistic:  # the realistic model's rates, each in FLOP at the peak: within the same span
            rates = [("matmul_eff and power", "one FLOP of a matrix product", 1.0 / (self.matmul_eff * self.power)),
                     ("attention_eff and power", "one FLOP of fused attention",
                      1.0 / (self.attention_eff * self.power)),
                     ("flops and mem_bw and memory_eff", "one byte of memory traffic",
                      1000.0 * self.flops / (self.mem_bw * self.memory_eff))]
            if self.fp8_flops is not None:
                rates.append(("fp8_flops and matmul_eff and power", "one FP8 FLOP of a matrix product",
                              self.flops / (self.fp8_flops * self.matmul_eff * self.power)))
            if self.allreduce_eff is not None:
                rates.append(("flops and bw and allreduce_eff", "one word of an all-reduce", self.allreduce_word))
            for name, what, cost in rates:
                if not MIN_WORD_COST <= cost <= MAX_WORD_COST:
                    raise SettingError(name, f"make {what} cost {cost:.3g} FLOP at the peak; the model needs 1e-9 "
                                             "to 1e15")

    # -- derived figures --------------------------------------------------------------
    @property
    def word_bytes(self) -> int:
        return PRECISIONS[self.precision]

    @property
    def grad_bytes(self) -> int:
        """Bytes of one gradient element reduced (see ``grad_precision``)."""
        if self.grad_precision:
            return PRECISIONS[self.grad_precision]
        return max(self.word_bytes, 4) if self.realistic else self.word_bytes

    @property
    def realistic(self) -> bool:
        """Whether the realistic time model applies: the device's memory
        bandwidth is known (a real device preset, or a calibration)."""
        return self.mem_bw is not None

    @property
    def word(self) -> float:
        """``W``: FLOP equivalent of moving one element inside a node (at
        the bus bandwidth collectives reach, ``bw * link_eff``)."""
        bw = self.bw if self.link_eff == 1.0 else self.bw * self.link_eff
        return self.word_bytes * 1000.0 * self.flops / bw

    @property
    def allreduce_word(self) -> float:
        """FLOP equivalent of moving one element of an all-reduce inside a
        node: ``W``, or at ``bw * allreduce_eff`` when that is given."""
        if self.allreduce_eff is None:
            return self.word
        return self.word_bytes * 1000.0 * self.flops / (self.bw * self.allreduce_eff)

    @property
    def inter_word(self) -> float:
        """FLOP equivalent of moving one element between nodes."""
        bw = self.bw if self.inter_bw is None else self.inter_bw
        eff = self.link_eff if self.inter_bw is None else self.net_eff
        return self.word_bytes * 1000.0 * self.flops / (bw if eff == 1.0 else bw * eff)

    @property
    def step_cost(self) -> float:
        """FLOP equivalent of one collective step's latency (inside a node)."""
        return self.latency * 1e-6 * self.flops * 1e12

    @property
    def inter_step_cost(self) -> float:
        """FLOP equivalent of one collective step's latency between nodes."""
        lat = self.latency if self.inter_latency is None else self.inter_latency
        return lat * 1e-6 * self.flops * 1e12

    @property
    def capacity(self) -> float | None:
        """Bytes of a device a plan may use: its memory less the headroom."""
        if self.device_memory is None:
            return None
        return (self.device_memory - (self.headroom or 0.0)) * 1e9

    @property
    def headroom_account(self) -> str:
        """How :attr:`capacity` was reached, for a message ("80 GB less 3 GB
        of headroom"); ``""`` without a headroom."""
        if not self.headroom or self.device_memory is None:
            return ""
        return f"{self.device_memory:.4g} GB less {self.headroom:.4g} GB of headroom"

    @property
    def two_level(self) -> bool:
        return self.gpus_per_node is not None

    def nodes(self, p: int) -> int:
        return 1 if self.gpus_per_node is None else -(-p // self.gpus_per_node)

    def seconds(self, flop):
        """Time of ``flop`` FLOP (computed, or equivalent to data moved)."""
        return flop / (self.flops * 1e12)

    def describe(self, p: int | None = None) -> str:
        """The cluster in words, for the report's header."""
        dev = f"{self.device}: " if self.device else ""
        head = f"{dev}{plain(self.flops)} TFLOPS"
        if self.device_memory is not None:
            head += f", {plain(self.device_memory)} GB"
        if self.precision != DEFAULT_PRECISION:
            head += f" ({self.precision})"
        if not self.two_level:
            net = f"{plain(self.bw)} GB/s per device"
        else:
            G = self.gpus_per_node
            layout = "" if p is None else f"{self.nodes(p)} node{'s' * (self.nodes(p) > 1)} of {G}"
            if p is not None and p % G and p > G:
                layout += f" (the last holds {p % G})"
            inter = self.bw if self.inter_bw is None else self.inter_bw
            net = f"{layout or f'{G} per node'}, {plain(self.bw)} GB/s inside a node, {plain(inter)} GB/s between nodes"
            if self.network:
                from cluster.presets import network

                net += f" ({self.network}: {network(self.network).description})"
            elif self.inter_bw is None and (p is None or p > G):
                net += " (no network given: as fast as inside a node)"
        lat = f", {self.latency:g} us per collective step" if self.latency else ""
        if self.inter_latency is not None and self.inter_latency != self.latency:
            lat += f" ({self.inter_latency:g} us between nodes)"
        return f"{head}{' and ' if not self.two_level else '; '}{net}{lat}"

    # -- layouts ------------------------------------------------------------------------
    def _inter(self, C):
        """Per letter of ``C`` (K, n): how many of its ways cross nodes (the
        rest stay inside one).  See the module docstring."""
        import numpy as np  # here, so that importing the cluster stays light

        cache = C.cache
        if "inter" not in cache:
            first = [c for c in "bxs" if c in C.dims]  # the batch, the experts, the sequence: outermost
            order = [C.dims.index(c) for c in first] + [i for i, c in enumerate(C.dims) if c not in first]
            splits = C.array[..., order]  # (K, n) slowest first
            after = np.cumprod(splits[..., ::-1], axis=-1)[..., ::-1]  # product from j on
            stride = np.concatenate([after[..., 1:], np.ones(after.shape[:-1] + (1,))], axis=-1)
            inside = np.clip(self.gpus_per_node / stride, 1.0, splits)
            inter = np.empty_like(splits)
            inter[..., order] = splits / inside
            cache["inter"] = inter
        return cache["inter"]

    def tensor_nodes(self, t, C):
        """(K, rank): over how many nodes the pieces of each axis of tensor
        ``t`` are spread under the configurations ``C``."""
        import numpy as np  # here, so that importing the cluster stays light

        inter = self._inter(C)
        cols = [np.prod(inter[..., [C.dims.index(c) for c in a]], axis=-1) if a else np.ones(inter.shape[:-1])
                for a in t.axes]
        return np.stack(cols, axis=-1) if cols else np.ones(inter.shape[:-1] + (0,))

    def across(self, C, letters: str):
        """How many nodes the group over ``letters`` spans, per configuration."""
        import numpy as np  # here, so that importing the cluster stays light

        if not self.two_level:
            return np.ones(C.array.shape[:-1]) if C.array.ndim > 1 else 1.0
        inter = self._inter(C)
        out = np.ones(inter.shape[:-1])
        for c in letters:
            out = out * inter[..., C.dims.index(c)]
        return out

    # -- collectives --------------------------------------------------------------------
    def _steps(self, q_in, q_out, per_ring: float, latency_scale):
        """Latency of ``per_ring * (q - 1)`` steps over ``q_in`` devices in a
        node and ``q_out`` nodes (a share ``latency_scale`` of it: a bucket's
        share of one collective's latency)."""
        if self.inter_latency is None:
            steps = self.step_cost * per_ring * (q_in - 1.0 + q_out - 1.0)
        else:
            steps = per_ring * (self.step_cost * (q_in - 1.0) + self.inter_step_cost * (q_out - 1.0))
        return steps if latency_scale is None else steps * latency_scale

    def allreduce(self, words, C, letters: str, latency_scale=None):
        """All-reduce of ``words`` among the ``q = C[letters]`` devices that
        split ``letters``: the ring ``W w/q 2(q - 1)`` on one node, the
        hierarchical algorithm across nodes, plus the steps' latency
        (times ``latency_scale`` when given)."""
        q = C[letters]
        if not self.two_level:
            cost = self.allreduce_word * (words / q) * 2.0 * (q - 1.0)
            if not self.latency:
                return cost
            steps = self.step_cost * 2.0 * (q - 1.0)
            return cost + (steps if latency_scale is None else steps * latency_scale)
        q_out = self.across(C, letters)
        q_in = q / q_out
        inside = self.allreduce_word * 2.0 * words * (q_in - 1.0) / q_in
        between = self.inter_word * 2.0 * (words / q_in) * (q_out - 1.0) / q_out
        return inside + between + self._steps(q_in, q_out, 2.0, latency_scale)

    def allgather(self, words, C, letters: str, latency_scale=None):
        """All-gather over the ``q = C[letters]`` devices that split
        ``letters``, each ending with ``words`` (having ``words / q``): half
        an all-reduce, the ring ``W w/q (q - 1)`` (hierarchical across
        nodes), and half its steps."""
        q = C[letters]
        if not self.two_level:
            cost = self.word * (words / q) * (q - 1.0)
            if not self.latency:
                return cost
            steps = self.step_cost * (q - 1.0)
            return cost + (steps if latency_scale is None else steps * latency_scale)
        q_out = self.across(C, letters)
        q_in = q / q_out
        inside = self.word * words * (q_in - 1.0) / q_in
        between = self.inter_word * (words / q_in) * (q_out - 1.0) / q_out
        return inside + between + self._steps(q_in, q_out, 1.0, latency_scale)

    def send(self, words, C, letters: str, times=1):
        """Each device sends ``words`` to the devices that differ from it only
        in the ``letters`` coordinates (nothing when there are none), in
        ``times`` rounds."""
        import numpy as np  # here, so that importing the cluster stays light

        q = C[letters]
        if not self.two_level:
            word, step = self.word, self.step_cost
        else:
            spans = self.across(C, letters) > 1
            word = np.where(spans, self.inter_word, self.word)
            step = self.step_cost if self.inter_latency is None else np.where(spans, self.inter_step_cost,
                                                                              self.step_cost)
        return np.where(q > 1, word * words + times * step, 0.0)

    def alltoall(self, words, C, letters: str, once: tuple = ()):
        """All-to-all among the ``q = C[letters]`` devices that split
        ``letters``: each sends ``words`` spread evenly over the group,
        ``(q_in - 1)/q`` of them inside its node and ``(q - q_in)/q`` to the
        other nodes, on the link each crosses; one step per level.

        With ``once`` ``(k, E)`` (DeepEP's dispatch and combine), the words
        are tokens' copies to ``k`` distinct of ``E`` experts spread evenly
        over the group, ``E / q_out`` on each of its ``q_out`` nodes; a
        token crosses to each other node that holds any of its experts
        once, with the chance ``1 - C(E - E/q_out, k) / C(E, k)`` (the
        experts chosen alike, as forced balance makes them), and that node
        forwards the copies for its other devices inside it: between
        nodes ``words / k x (q_out - 1) x`` that chance, inside the node
        the copies for the node's own other devices and the forwarded
        ``(q - q_in)/q x (q_in - 1)/q_in`` of ``words``.  With ``once``
        ``(k, E, G, M)`` (node-limited routing, DeepSeek-V3's: the experts
        in ``G`` groups, contiguous as the devices hold them, a token's
        from ``M`` of them, each chosen group holding some): the chance a
        node holds none of them is :func:`_missed_limited`'s."""
        import numpy as np  # here, so that importing the cluster stays light

        q = C[letters]
        if not self.two_level:
            return np.where(q > 1, self.word * words * (q - 1.0) / q + self.step_cost, 0.0)
        q_out = self.across(C, letters)
        inside_words, between_words = self.alltoall_words(words, C, letters, once)
        inside = self.word * inside_words + np.where(q / q_out > 1, self.step_cost, 0.0)
        between = self.inter_word * between_words + np.where(q_out > 1, self.inter_step_cost, 0.0)
        return np.where(q > 1, inside + between, 0.0)

    def alltoall_words(self, words, C, letters: str, once: tuple = ()):
        """The elements a device's all-to-all (:meth:`alltoall`) sends
        inside its node and to other nodes: ``(inside, between)``."""
        q = C[letters]
        q_out = self.across(C, letters)
        q_in = q / q_out
        inside_words = words * (q_in - 1.0) / q
        between_words = words * (q - q_in) / q
        if once:
            k, experts = once[:2]
            held = experts / q_out  # experts on each node of the group
            if len(once) == 4:
                missed = _missed_limited(k, experts, once[2], once[3], q_out)
            else:
                missed = _missed(experts, held, k)  # the chance a node holds none of a token's k experts
            between_words = words / k * (q_out - 1.0) * (1.0 - missed)
            inside_words = inside_words + words * (q - q_in) / q * (q_in - 1.0) / q_in
        return inside_words, between_words

    def redistribute(self, words, cross=None, times=1):
        """A device receives ``words`` from others when a tensor changes split,
        ``cross`` of them from other nodes (``None``: all inside a node), in
        ``times`` rounds."""
        import numpy as np  # here, so that importing the cluster stays light

        step = np.where(words > 0, times * self.step_cost, 0.0) if self.latency else 0.0
        if cross is None:
            return self.word * words + step
        return self.word * (words - cross) + self.inter_word * cross + step


def _missed(n, held, k):
    """The chance that none of ``k`` of ``n`` things, chosen alike, is among
    the ``held`` ones (arrays or numbers): ``C(n - held, k) / C(n, k)``."""
    import numpy as np  # here, so that importing the cluster stays light

    missed = np.ones_like(np.asarray(held, dtype=float))
    for i in range(int(k)):
        missed = missed * np.clip((n - held - i) / (n - i), 0.0, None)
    return missed


def _missed_limited(k: int, experts: int, groups: int, chosen: int, q_out):
    """The chance that a node of ``q_out`` (an array) holds none of a
    token's ``k`` experts when they come from ``chosen`` of ``groups``
    groups of ``experts`` experts (node-limited routing), the groups
    contiguous over the nodes, each chosen group holding some of the
    token's experts (at most ``k`` groups, ``k / chosen`` experts each):
    a node holding whole groups (``q_out <= groups``) is missed when none
    of its ``groups / q_out`` is chosen; one holding part of a group, when
    that group is not chosen or its share of the token's experts falls on
    its other nodes."""
    import numpy as np  # here, so that importing the cluster stays light

    q_out = np.asarray(q_out, dtype=float)
    m = min(int(chosen), int(k))
    whole = _missed(float(groups), groups / q_out, m)
    per_group = experts / groups
    part = 1.0 - m / groups * (1.0 - _missed(per_group, experts / q_out, max(1, round(k / m))))
    return np.where(q_out <= groups, whole, part)


#: every cluster field and its declaration, in the order of the fields
FIELDS: dict[str, Declared] = {f.name: f.metadata["declared"] for f in fields(Cluster)}
