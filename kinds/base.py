"""What every operator kind shares: the records kinds build, the per-letter
views the formulas read, the base class, and the formulas several kinds use.

A *kind* (``Conv``, ``FC``, ``Norm`` ...) is a frozen dataclass whose fields
are its typed attributes (a convolution's stride, a normalisation's axis).
Its class says, in one place, everything the tool needs about it:

* ``build``: the operator it makes from its input tensors: the letters of
  its iteration space (one per dimension, ``b`` the sample), the sizes, and
  every tensor it reads or writes with its role (activation, weight, data)
  and the letters whose splits split each tensor axis;
* ``never_split`` and ``contiguous_only``: the split constraints;
* ``work``: what one training step of the operator does, for all
  configurations at once, read by letter (``C["n"]`` is the split of ``n``
  of every configuration): a :class:`Work` record of its compute (forward
  and backward), its matrix work, and each collective it needs with its
  role and its elements, not yet priced (``cost_model`` prices a record on
  a cluster);
* ``saved`` and ``memory``: the tensors kept for the backward pass, and
  per-device elements of weights and of those tensors;
* ``model_dims`` and ``stage_dim``: what the expert baselines split.

Formulas follow the PaSE paper (Elango, IPDPS 2021, section III) as the
original tool implements them; symbols are the paper's (``mm, nn, kk`` per
device extents of a GEMM's M, N, K, split ``m, n, k`` ways).  Nothing here
checks that a configuration divides the sizes (``cost_model`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import ClassVar, NamedTuple

import numpy as np

from errors import InputError

__all__ = ["ROLES", "COMM_ROLES", "KINDS", "register", "Tensor", "Operator", "Ref", "Extents", "Comm", "Work",
           "Footprint", "Kind", "normalize_axis", "shard", "shard_bytes", "tensor_splits", "gemm", "gemm_extents",
           "halo", "need"]

ROLES = ("activation", "weight", "data")
#: what each collective of a :class:`Work` record does
COMM_ROLES = {
    "gradients": "weight gradients summed over the devices that hold the same shard of the weight",
    "partial sums": "partial results summed over the devices that split a reduced dimension",
    "input gradients": "partial input gradients summed over the devices that split an output dimension",
    "statistics": "statistics of a normalisation or a softmax over a split axis",
    "halo": "ghost cells of a window exchanged with the neighbouring devices",
    "exchange": "elements sent point to point",
    "weights": "weights gathered from the devices that shard them (ZeRO stage 3), before the forward and the "
               "backward pass",
    "inputs": "an input kept as this device's shard and all-gathered again for the backward pass (Megatron-LM's "
              "sequence parallelism)",
}
#: the roles whose collectives a real device overlaps with computation: gradients with the backward pass
#: (the layers before), gathered weights with the pass that needs them (prefetched), inputs gathered again
#: with the backward pass that needs them (its input-gradient product)
OVERLAPPED = ("gradients", "weights", "inputs")
COMM_PATTERNS = ("allreduce", "allgather", "reducescatter", "send", "alltoall", "cheapest")


@dataclass(frozen=True)
class Tensor:
    """One input or output of an operator and how it is split.

    ``axes[j]`` holds the iteration-space letters whose splits multiply into
    the split of tensor axis ``j``: ``("b", "n", "h", "w")`` for a
    convolution's output, ``("bchw",)`` for the flat side of a reshape, ``""``
    for an axis that is never split.  ``role`` is ``activation`` (written by
    another operator or read by one), ``weight`` (a trained parameter) or
    ``data`` (fed to the network).  ``bytes``: bytes per element when they
    are not the training precision's (a dropout's mask: 1).
    """

    shape: tuple[int, ...]
    axes: tuple[str, ...]
    role: str = "activation"
    bytes: int = 0

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "axes", tuple(self.axes))
        if len(self.shape) != len(self.axes):
            raise InputError(f"tensor shape {self.shape} and axes {self.axes} differ in rank")
        if self.role not in ROLES:
            raise InputError(f"tensor role must be one of {ROLES}, got {self.role!r}")

    @property
    def size(self) -> int:
        return prod(self.shape)


class Ref(NamedTuple):
    """A tensor while a graph is being built: who writes it and its letters."""

    node: int | None  # None for a graph input (weights, data)
    index: int  # which output of ``node``
    shape: tuple[int, ...]
    letters: str
    role: str = "activation"


@dataclass(frozen=True)
class Operator:
    """One node of a computation graph; independent of ``p`` and the hardware.

    ``kind`` is the kind with its attributes; ``dims`` one letter per
    iteration-space dimension (``b`` the sample); ``space`` the sizes.  Two
    operators that differ only in ``name`` compare equal, so identical layers
    share their cost arrays.
    """

    kind: "Kind"
    dims: str
    space: tuple[int, ...]
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    name: str = field(default="", compare=False)

    def __post_init__(self):
        object.__setattr__(self, "space", tuple(int(s) for s in self.space))
        if len(self.dims) != len(self.space) or len(set(self.dims)) != len(self.dims):
            raise InputError(f"{self.name}: letters {self.dims!r} do not name the space {self.space} one to one")
        if "b" not in self.dims:
            raise InputError(f"{self.name}: iteration space {self.dims!r} has no sample dimension 'b'")
        for t in self.inputs + self.outputs:
            stray = set("".join(t.axes)) - set(self.dims)
            if stray:
                raise InputError(f"{self.name}: tensor axes {t.axes} use letters {sorted(stray)} not in {self.dims!r}")
        # worked out once: operators key the cost arrays they share, and are hashed many times
        object.__setattr__(self, "_hash", hash((self.kind, self.dims, self.space, self.inputs, self.outputs)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):  # made again where it is read: a hash is only good in the process that made it
        return (type(self), (self.kind, self.dims, self.space, self.inputs, self.outputs, self.name))

    @property
    def never_split(self) -> str:
        return self.kind.never_split(self)

    @property
    def contiguous_only(self) -> bool:
        return self.kind.contiguous_only

    def size(self, letters: str) -> int:
        """The product of the sizes of ``letters``."""
        return prod(self.space[self.dims.index(c)] for c in letters)

    def __repr__(self) -> str:
        space = ", ".join(f"{d}={s}" for d, s in zip(self.dims, self.space))
        return f"Operator({self.kind.name} {self.name!r}: {space})"


class Extents:
    """Per-letter view of sizes, splits or per-device extents.

    ``array`` is ``(n,)`` (one value per letter) or ``(K, n)`` (one row per
    configuration); ``E["n"]`` is the column of ``n``, ``E["bhw"]`` the
    product of three columns, ``E[""]`` is 1.
    """

    __slots__ = ("dims", "array", "cache")

    def __init__(self, dims: str, array):
        self.dims = dims
        self.array = np.asarray(array, dtype=float)
        self.cache = {}  # figures derived from the splits once (the cluster's layouts)

    def __getitem__(self, letters: str):
        out = None
        for c in letters:
            col = self.array[..., self.dims.index(c)]
            out = col if out is None else out * col
        if out is None:
            return np.ones(self.array.shape[:-1]) if self.array.ndim > 1 else 1.0
        return out

    def __len__(self) -> int:
        return self.array.shape[0] if self.array.ndim > 1 else 1

    @property
    def all(self):
        """The product over every letter: devices used (splits), volume (extents)."""
        return np.prod(self.array, axis=-1)

    def other(self, letters: str) -> str:
        """The letters not in ``letters``, in order."""
        return "".join(c for c in self.dims if c not in letters)

    def __truediv__(self, other: "Extents") -> "Extents":
        return Extents(self.dims, self.array / other.array)


@dataclass(frozen=True)
class Comm:
    """One collective an operator needs in a training step, not yet priced.

    ``pattern``: ``allreduce`` (a sum over the group, each device ending
    with all of it), ``allgather`` (each device ends with ``words``, having
    held its share), ``reducescatter`` (a sum of ``words``, each device
    ending with its share), or ``send`` (each device sends ``words`` to the
    others of the group, in ``rounds`` rounds), ``alltoall`` (each device
    sends ``words`` spread evenly over the group, itself included: a share
    ``(q - 1) / q`` leaves it; with ``once`` ``(k, experts)``: the words
    are tokens' copies to ``k`` of ``experts`` experts spread over the
    group, and a token crosses to another node once, however many of its
    experts the node holds: DeepEP's dispatch; ``(k, experts, G, M)``: the
    experts in ``G`` groups, a token's from ``M`` of them, node-limited
    routing); ``cheapest``: whichever of
    ``options`` costs less.  The group is the devices that differ from one
    another only in the coordinates of ``letters``.  ``words``: elements per
    device, a vector over the configurations (K,) or a number; ``count``:
    how many such collectives.  ``role`` is one of :data:`COMM_ROLES`.
    """

    role: str
    pattern: str
    words: object
    letters: str
    count: float = 1.0
    rounds: object = 1
    options: tuple = ()
    once: tuple = ()

    def __post_init__(self):
        if self.role not in COMM_ROLES:
            raise ValueError(f"collective role must be one of {', '.join(COMM_ROLES)}, got {self.role!r}")
        if self.pattern not in COMM_PATTERNS:
            raise ValueError(f"collective pattern must be one of {', '.join(COMM_PATTERNS)}, got {self.pattern!r}")


@dataclass(frozen=True)
class Work:
    """What one training step of an operator does, for each configuration.

    ``compute``: FLOP of the forward and backward passes as the PaSE paper
    counts them (one per multiply-add, one per pointwise operation), and
    ``forward`` its forward part (what a recomputation repeats; a third of
    ``compute`` unless the kind says); ``macs``: the multiply-adds of the
    forward pass done as matrix products (on a real device: two FLOP each,
    at the matrix units' rate; ``kernel`` says which rate, ``matmul`` or
    ``attention``), and ``backward_macs`` those of the backward pass
    (default twice ``macs``: the gradients of both operands); ``comms``: the
    collectives, in the order their costs are added; ``moved`` and
    ``moved_back``: the elements the forward and the backward pass read
    and write in the device's memory (``None``: what the operator's tensors
    say, see :func:`cost_model.traffic`); ``replays``: how many more times
    the forward pass runs (a recomputation); ``shape``: a matrix product's
    per-device extents ``(batch, M, N, K)``, for the device's tiling;
    ``epilogue``: the elements of a matrix product's output an activation
    (its pointwise work) reads and writes in a pass of its own.  What a
    training framework adds as it runs the operator (``cost.time.as_run``):
    ``extra`` and ``extra_back``, bytes the forward and the backward pass
    move beyond the operator's own passes (an eager kernel's intermediate
    results, Float8 casts); ``kernels``, the (forward, backward) kernels it
    launches; ``fp8``: its matrix products run in FP8; ``updated``: the
    weight elements the device updates at the optimizer step (``None``:
    those it holds); ``ring``: the letter of the sequence split over the
    devices when attention runs as ring attention (``""``: it does not;
    ``cost.time.ring_parts`` prices its steps).  Arrays are (K,) or
    numbers; nothing here is priced.
    """

    compute: object
    forward: object = None
    comms: tuple = ()
    macs: object = 0.0
    backward_macs: object = None
    kernel: str = "matmul"
    moved: object = None
    moved_back: object = None
    replays: float = 0.0
    shape: tuple = ()  # a matrix product's per-device (batch, M, N, K) extents, (K,) each
    epilogue: object = 0.0  # elements of its output a pointwise pass (an activation) reads and writes again
    extra: object = 0.0  # bytes the forward pass moves beyond its own passes, as a framework runs it
    extra_back: object = 0.0  # the same, backward
    kernels: tuple = (0.0, 0.0)  # kernels launched (forward, backward), as a framework runs it
    fp8: bool = False  # the matrix products run in FP8 (Float8 training)
    updated: object = None  # weight elements the device updates at the optimizer step (None: those it holds)
    ring: str = ""  # the split sequence's letter when the operator runs as ring attention
    sharded: bool = False  # its gradients are sharded over the replicas (ZeRO 2 and 3)

    def __post_init__(self):
        if self.forward is None:
            object.__setattr__(self, "forward", self.compute / 3.0)
        if self.backward_macs is None:
            object.__setattr__(self, "backward_macs", 2.0 * self.macs)

    def of(self, role: str) -> tuple:
        """The collectives of ``role``."""
        return tuple(c for c in self.comms if c.role == role)


@dataclass(frozen=True)
class Footprint:
    """Bytes one device holds for an operator, by part, for each
    configuration ((K,) arrays or numbers): its ``weights``, their
    ``gradients``, the ``optimizer`` state, the ``activations`` kept for the
    backward pass, and the ``transient``: what it holds only while it runs
    (weights gathered for it, activations recomputed for it), which counts
    in the peak but not in what stays from layer to layer."""

    weights: object
    gradients: object
    optimizer: object
    activations: object
    transient: object = 0.0

    @property
    def kept(self):
        """What the operator holds for the whole step."""
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def parts(self) -> tuple:
        return self.weights, self.gradients, self.optimizer, self.activations


class Kind:
    """Base of every operator kind (see the module docstring).

    Subclasses are frozen dataclasses registered with
    :func:`kinds.register`; ``build`` and ``work`` must be defined, the rest
    have defaults.
    """

    contiguous_only: ClassVar[bool] = False
    #: the weight gradient touches only the rows the ids select (an
    #: embedding): what Parallax exchanges sparsely
    sparse_rows: ClassVar[bool] = False

    @property
    def name(self) -> str:
        return type(self).__name__

    def build(self, name: str, refs: tuple[Ref, ...]) -> tuple[Operator, tuple[str, ...]]:
        """The operator and the letters of each of its outputs."""
        raise NotImplementedError

    def never_split(self, op: Operator) -> str:
        """Letters enumerated as if their size were 1."""
        return ""

    def work(self, op: Operator, D: Extents, C: Extents, rules) -> Work:
        """What one step does per device, for each configuration: ``D`` the
        sizes, ``C`` the splits (K rows), ``rules`` the
        :class:`cost_model.CostModel` (the modelling rules some kinds read,
        e.g. how an embedding's gradient is exchanged)."""
        raise NotImplementedError

    def arriving(self, op: Operator, i: int, rules) -> Tensor:
        """Input ``i`` as its edge re-distributes it to the operator under
        the modelling rules ``rules`` (default: as the operator reads it;
        an operator that moves the rest itself, ring attention's keys and
        values, takes it split otherwise)."""
        return op.inputs[i]

    def saved(self, op: Operator) -> tuple[Tensor, ...]:
        """The tensors kept for the backward pass (default: every input that
        is not a weight; weights are counted as weights)."""
        return tuple(t for t in op.inputs if t.role != "weight")

    def memory(self, op: Operator, C: Extents) -> tuple[np.ndarray, np.ndarray]:
        """Per-device elements of (weights, saved activations) for each
        configuration: each tensor's shard under the configuration; a weight
        not split along the sample or M letters is held whole by each of the
        devices that split them."""
        zero = np.zeros(len(C))
        weights = sum((shard(t, C) for t in op.inputs if t.role == "weight"), zero)
        acts = sum((shard(t, C) for t in self.saved(op)), zero)
        return weights, acts

    def model_macs(self, op: Operator, work: Work) -> float:
        """Multiply-adds of the whole operator, forward and backward, as
        model FLOP utilisation counts them (``work`` is its record on one
        device): the record's matrix work."""
        return float(np.sum(work.macs + work.backward_macs))

    def model_dims(self, op: Operator) -> str:
        """Letters a practitioner splits for model parallelism in this layer
        ("one weird trick": a classifier's units); empty for data parallel."""
        return ""

    def stage_dim(self, op: Operator) -> str:
        """A letter that stacks layers which may go to different devices (GNMT)."""
        return ""


#: every kind by name (filled by :func:`register` as the kinds' modules load)
KINDS: dict[str, type[Kind]] = {}


def register(cls: type[Kind]) -> type[Kind]:
    """Class decorator: add a kind to :data:`KINDS` under its class name."""
    if not issubclass(cls, Kind):
        raise TypeError(f"{cls.__name__} is not a Kind")
    if KINDS.get(cls.__name__, cls) is not cls:
        raise ValueError(f"two operator kinds are named {cls.__name__}")
    KINDS[cls.__name__] = cls
    return cls


def normalize_axis(axis: int, rank: int, name: str) -> int:
    """``axis`` (negative from the end) as an index into ``rank`` axes."""
    if not -rank <= axis < rank:
        raise InputError(f"{name}: axis {axis} is out of range for rank {rank}")
    return axis % rank


# -- shared formulas -------------------------------------------------------------


def tensor_splits(t: Tensor, C: Extents) -> np.ndarray:
    """How tensor ``t`` is split under the configurations ``C``: (K, rank)."""
    return np.stack([np.broadcast_to(C[a], (len(C),)) for a in t.axes], axis=-1) if t.axes else \
        np.ones((len(C), 0))


def shard(t: Tensor, C: Extents) -> np.ndarray:
    """Elements of ``t`` one device holds under each configuration (K,)."""
    return t.size / np.prod(tensor_splits(t, C), axis=-1)


def shard_bytes(t: Tensor, C: Extents, word_bytes: int) -> np.ndarray:
    """Bytes of ``t`` one device holds (its own bytes per element, else
    ``word_bytes``) under each configuration (K,)."""
    return shard(t, C) * float(t.bytes or word_bytes)


def gemm(D: Extents, C: Extents, batch: str, m: str, n: str, k: str, pw: float = 0, weight_sync=None) -> Work:
    """A GEMM whose batch, M, N and K dimensions are the letters ``batch``,
    ``m``, ``n``, ``k`` of the space: :func:`gemm_extents` at the per-device
    extents ``bb = B/b``, ``mm = M/m``, ``nn = N/n``, ``kk = K/k``."""
    bb = D[batch] / C[batch]  # (K,)
    return gemm_extents(bb, D[m] / C[m], D[n] / C[n], D[k] / C[k], m, n, k, pw, weight_sync)


def gemm_extents(bb, mm, nn, kk, m: str, n: str, k: str, pw: float = 0, weight_sync=None) -> Work:
    """GEMM of per-device extents ``mm x kk`` by ``kk x nn``, repeated ``bb``
    times, whose M, N, K are split by the letters ``m``, ``n``, ``k``:

        compute = bb * (3*mm*nn*kk + 3*pw*mm*nn)   # forward GEMM, two backward GEMMs; pointwise
        forward = bb * (mm*nn*kk + pw*mm*nn)
        comms   = AR(mm*nn, k) + AR(mm*kk, n) + AR(nn*kk, m)   # partial sums, input gradients, gradients

    (the ``bb`` repeats reduce together: one collective of ``bb`` times the
    words each).  ``weight_sync`` replaces the weight-gradient all-reduce
    ``AR(nn*kk, m)`` by another :class:`Comm`.
    """
    comp = 3.0 * mm * nn * kk + 3.0 * pw * mm * nn  # (K,)
    fwd = mm * nn * kk + pw * mm * nn  # (K,)
    sync = Comm("gradients", "allreduce", bb * nn * kk, m) if weight_sync is None else weight_sync
    comms = (Comm("partial sums", "allreduce", bb * mm * nn, k), Comm("input gradients", "allreduce", bb * mm * kk, n),
             sync)
    return Work(bb * comp, bb * fwd, comms, macs=bb * mm * nn * kk, shape=(bb, mm, nn, kk),
                epilogue=bb * mm * nn if pw else 0.0)


def halo(image: Tensor, C: Extents, r: float, s: float) -> Comm:
    """Ghost-cell exchange of an image ``(b, c, h, w)`` split by its tensor
    configuration ``Q``, for an ``r x s`` window:
    ``((t_h + r[Q_h > 1]) (t_w + s[Q_w > 1]) - t_h t_w) t_b t_c`` words."""
    Q = tensor_splits(image, C)  # (K, 4)
    t = np.asarray(image.shape, dtype=float) / Q  # (K, 4) per-device extents
    th, tw = t[:, 2], t[:, 3]
    ghost = ((th + r * (Q[:, 2] > 1)) * (tw + s * (Q[:, 3] > 1)) - th * tw) * t[:, 0] * t[:, 1]
    return Comm("halo", "send", ghost, image.axes[2] + image.axes[3])


def need(src, tgt, ps, pt):
    """Elements a target device lacks ("area needed"):
    ``prod(tgt) - (0 if pt > ps else prod(min(src, tgt)))``, clipped at 0.

    ``src``, ``tgt``: per-device extents (..., r), broadcastable;
    ``ps``, ``pt``: device counts, broadcastable to the result.
    """
    r = src.shape[-1]
    # worked out in place: an edge's pairs of splits run to millions, each a temporary array of the full size
    overlap = np.array(np.minimum(src[..., 0], tgt[..., 0]), dtype=np.result_type(src.dtype, tgt.dtype, np.float16))
    part = np.empty_like(overlap) if r > 1 else None
    volume = tgt[..., 0]
    for j in range(1, r):
        overlap *= np.minimum(src[..., j], tgt[..., j], out=part)
        volume = volume * tgt[..., j]
    shape = np.broadcast_shapes(overlap.shape, np.shape(volume), np.shape(ps), np.shape(pt))
    if shape != overlap.shape:
        overlap = np.array(np.broadcast_to(overlap, shape))
    overlap[np.broadcast_to(np.greater(pt, ps), shape)] = 0.0
    np.subtract(volume, overlap, out=overlap)
    return np.maximum(overlap, 0.0, out=overlap)[()]  # extents of one tensor (no pairs): a number
