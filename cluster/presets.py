"""Device and network presets: what the data sheets say, and what software
reaches on them.

**Devices** (peak dense TFLOPS by precision, memory and its bandwidth, the
per-device NVLink bandwidth inside a node in one direction, from the
vendors' data sheets):

* ``v100``: NVIDIA Tesla V100 SXM2 32 GB (V100 data sheet, 2020): FP64 7.8,
  FP32 15.7, FP16 tensor 125 TFLOPS (no BF16); HBM2 900 GB/s; NVLink 300
  GB/s in total, 150 GB/s each way;
* ``a100-40gb``, ``a100-80gb``: NVIDIA A100 SXM4 (A100 data sheet, 2021):
  FP64 tensor 19.5, FP32 19.5, BF16 and FP16 tensor 312 TFLOPS (dense);
  HBM2 1,555 GB/s (40 GB) and HBM2e 2,039 GB/s (80 GB); NVLink 600 GB/s in
  total, 300 GB/s each way;
* ``h100``: NVIDIA H100 SXM5 80 GB (H100 data sheet, 2023): FP64 tensor 67,
  FP32 67, BF16 and FP16 tensor 989.5 TFLOPS, FP8 1,979 (dense; twice that
  with sparsity); HBM3 3,350 GB/s; NVLink 900 GB/s in total, 450 GB/s each
  way;
* ``h100-96gb``: NVIDIA H100 SXM5 96 GB, the HBM2e part of Meta's Grand
  Teton hosts that torchtitan's benchmarks ran on (torchtitan's
  ``benchmarks/llama3_h100_202412_torchtitan.md``: "96GB HBM2e with 2.4
  TB/sec peak memory bandwidth", "the default 500W power limit", "the
  actual peak TFLOPs number is between SXM and NVL"): the H100 SXM5's
  peaks (989.5 bf16, 1,979 FP8 dense) and NVLink; 2,400 GB/s; at 500 W its
  matrix units sustain ``power`` 0.896 of the SXM5's peak, the H100 NVL's
  835 TFLOPS at 400 W and the SXM5's 989.5 at 700 W interpolated at 500 W;
  400 Gb/s RoCE per device between hosts;
* ``h100-nvl``: NVIDIA H100 NVL 94 GB (H100 NVL product brief, 2024): 835
  bf16 and 1,671 FP8 TFLOPS dense (twice with sparsity), FP32 60, HBM3
  3,900 GB/s; an NVLink bridge of 600 GB/s joins a pair (300 each way), so
  a node here is a pair;
* ``h800``: NVIDIA H800 SXM5 80 GB: the H100 SXM5's compute and memory,
  NVLink 400 GB/s in total, 200 each way;
* ``h200``: NVIDIA H200 SXM 141 GB (H200 data sheet, 2024): the H100
  SXM5's peaks (989.5 bf16, 1,979 FP8), HBM3e 4,800 GB/s, NVLink 900 GB/s;
* ``b200``: NVIDIA B200 in an HGX/DGX B200 (DGX B200 data sheet, 2024: 72
  PFLOPS FP8 training and 1,440 GB of HBM3e at 64 TB/s for 8 GPUs;
  NVLink 5 at 1.8 TB/s per GPU): 2,250 bf16 and 4,500 FP8 TFLOPS dense,
  180 GB at 8,000 GB/s, 900 GB/s each way, 148 multiprocessors; the data
  sheet gives no FP32 or FP64 rate the model uses, so it trains in bf16 or
  fp16 only;
* ``b300``: NVIDIA B300 (Blackwell Ultra) in an HGX/DGX B300 (HGX B300
  table: 36 PFLOPS BF16 and 72 FP8 for 8 GPUs with sparsity; NVIDIA's
  Blackwell Ultra brief: 288 GB of HBM3e at 8 TB/s; DGX B300: eight
  ConnectX-8 at 800 Gb/s): 2,250 bf16 and 4,500 FP8 TFLOPS dense, 900
  GB/s of NVLink each way, 148 multiprocessors enabled (as CUDA reports
  them), 800 Gb/s InfiniBand per device between nodes;
* ``gb200``: NVIDIA GB200 in a GB200 NVL72 rack (its table: 360 PFLOPS
  BF16 and 720 FP8 for 72 GPUs with sparsity, up to 13.4 TB of HBM3e at
  576 TB/s, NVLink 130 TB/s; the GPU at 1,200 W where an HGX B200's runs at
  1,000 W): 2,500 bf16 and 5,000 FP8 TFLOPS dense, 186 GB at 8,000 GB/s,
  900 GB/s each way to any of the rack's 72 GPUs (a node here is the
  NVLink domain), 152 multiprocessors, and the DGX GB200's ConnectX-7 at
  400 Gb/s per GPU between racks;
* ``gb300``: NVIDIA GB300 (Blackwell Ultra) in a GB300 NVL72 rack (its
  table: 360 PFLOPS BF16 and 720 FP8 for 72 GPUs with sparsity, 576 TB/s;
  the Blackwell Ultra brief: 288 GB a GPU): 2,500 bf16 and 5,000 FP8
  TFLOPS dense, 8,000 GB/s, the NVL72's NVLink domain of 72, 152
  multiprocessors (the B300 enables 148), ConnectX-8 at 800 Gb/s per GPU
  between racks;
* ``paper``: the PaSE paper's device, 10 TFLOPS and 16 GB/s at every
  precision, memory unbounded, no memory bandwidth: the paper's model.

``memory`` is what CUDA gives a process on the device (the "total
capacity" PyTorch's out-of-memory message names), in GB of 10^9 bytes: a
data sheet's "80 GB" of HBM is 80 GiB (85.9 GB), of which the driver keeps
a little. PyTorch reports 79.1 GiB on the H100 SXM5 80 GB (nvidia-smi:
81,559 MiB), 139.8 GiB on the H200 141 GB, 178.35 GiB on the B200 180 GB,
184.31 GiB on the GB200 186 GB, 267.69 GiB on the B300 288 GB and 39.4 GiB
on the A100 40 GB; the GB300 276.8 GiB (its nvidia-smi total, 284,208
MiB, less the 0.7 to 0.9 GiB the GB200 and B300 report below theirs); the
others take the same 99 % of their GiB (the A100 80 GB 79.2, the V100 32
GB 31.7, the H100 NVL 94 GB 93.1, the H100 96 GB 95.0 GiB). A plan of 81
GB of tensors fits an "80 GB" part.

``fp8`` is a device's dense FP8 peak (``--float8`` runs the linear layers'
products at it); ``power`` the share of its peak its matrix units sustain
under the power limit it runs at (1 at its rated power).

A real device implies its training precision (bf16; fp16 on the V100), the
node of its DGX system (8 devices) and that system's network (below), and
keeps ``headroom`` GB free for the framework, the CUDA context, NCCL's
buffers, workspaces and fragmentation.  Its *efficiencies* say what
software reaches (the realistic model's constants, the same for every
model and plan):

* ``matmul_eff``: large dense matrix products reach 80 % of the peak on the
  V100 and the A100 and 75 % on the H100 (cuBLAS on square bf16/fp16 GEMMs
  of a few thousand: NVIDIA's "Matrix Multiplication Background" guide and
  the public cuBLAS benchmarks; smaller products are slower by the
  roofline, their memory traffic);
* ``attention_eff``: a fused attention kernel, forward and backward, reaches
  55 % of the peak on the A100 (FlashAttention-2, Dao 2023: 50-73 %) and
  45 % on the H100 (FlashAttention-2 35-40 %, cuDNN and FlashAttention-3
  up to 75 %); a framework that names the kernel it runs
  (its ``attention_kernel``) takes that kernel's figure on the device's
  architecture instead (:data:`ATTENTION_KERNELS`, below);
* ``memory_eff``: memory-bound kernels (normalisations, softmax,
  elementwise work) move 80 % of the memory bandwidth (STREAM-like copies
  reach 85-92 %);
* ``link_eff``: NCCL's all-reduce reaches a bus bandwidth of 80 % of the
  NVLink peak (nccl-tests on DGX A100: about 230 of 300 GB/s; DGX H100:
  about 360 of 450 GB/s without NVLink SHARP), with ``latency`` 1 us per
  ring step inside a node.  The H100's variants (``h100-96gb``,
  ``h100-nvl``, ``h800``, ``h200``) and the Blackwell parts (``b200``,
  ``b300``, ``gb200``, ``gb300``) take the H100's efficiencies: no
  published figure of their own.

**Attention kernels** (:data:`ATTENTION_KERNELS`): the share of the peak a
named kernel reaches, forward and backward, on each architecture (``arch``:
``volta``, ``ampere``, ``hopper``, ``blackwell``) where a publication gives
it, counting FLOP as FlashAttention does (the backward 2.5 times the
forward):

* ``fa2``: FlashAttention-2 (Dao 2023), the kernel of PyTorch's
  ``scaled_dot_product_attention`` flash backend: 55 % on Ampere (its
  paper: 50-73 % of the A100's peak forward, somewhat less backward: the
  A100 presets' figure) and 35 % on Hopper (Shah et al. 2024,
  FlashAttention-3, abstract: "FlashAttention-2 achieving only 35%
  utilization on the H100 GPU"; it uses none of Hopper's asynchronous
  matrix instructions); on other architectures, the device's own figure.

**Networks between nodes** (per device, one direction; ``net_eff`` the
share of it NCCL's bus bandwidth reaches across nodes, ``inter_latency``
microseconds per step):

* ``ib-edr``: 100 Gb/s InfiniBand EDR per device, 12.5 GB/s;
* ``ib-hdr``: 200 Gb/s InfiniBand HDR per device, 25 GB/s (DGX A100: 8 HDR
  adapters for 8 GPUs);
* ``ib-ndr``: 400 Gb/s InfiniBand NDR per device, 50 GB/s (DGX H100,
  DGX B200, DGX GB200);
* ``ib-xdr``: 800 Gb/s InfiniBand XDR per device, 100 GB/s (ConnectX-8:
  DGX B300, DGX GB300);
* ``roce-400``: 400 Gb/s RoCE per device, 50 GB/s, a lower efficiency;
* ``nvlink``: nodes joined as fast as devices inside a node (one NVLink
  domain).

InfiniBand reaches 85 % (nccl-tests across DGX nodes: 20-23 GB/s bus
bandwidth on HDR, 40-46 on NDR; XDR takes the same share, no published
figure of its own), RoCE 75 %, with 5 us (RoCE 8 us) per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from errors import SettingError, shown

__all__ = ["Device", "DEVICES", "Network", "NETWORKS", "AttentionKernel", "ATTENTION_KERNELS", "device", "known",
           "network", "default_precision", "attention_share"]


@dataclass(frozen=True)
class Device:
    name: str
    tflops: dict  # precision -> peak dense TFLOPS
    memory: float | None  # GB
    bw: float  # GB/s per device inside a node, one direction
    mem_bw: float | None = None  # GB/s; None: the paper's model
    precision: str = "fp64"  # the training precision it implies
    network: str = ""  # the network of its system
    gpus_per_node: int | None = None
    headroom: float | None = None  # GB kept free
    matmul_eff: float = 1.0
    attention_eff: float = 1.0
    memory_eff: float = 1.0
    link_eff: float = 1.0
    latency: float = 0.0  # microseconds per ring step inside a node
    sms: int | None = None  # streaming multiprocessors: a matrix product runs in waves of tiles over them
    fp8: float | None = None  # peak dense FP8 TFLOPS
    power: float = 1.0  # share of the peak sustained under the power limit it runs at
    arch: str = ""  # its architecture (volta, ampere, hopper, blackwell): what a named attention kernel reaches


@dataclass(frozen=True)
class AttentionKernel:
    """A fused attention kernel a framework may name: ``shares`` the share
    of a device's peak it reaches, forward and backward, by architecture."""

    name: str
    title: str
    shares: dict  # arch -> share of the training precision's peak


@dataclass(frozen=True)
class Network:
    name: str
    inter_bw: float | None  # GB/s per device, one direction; None: as inside a node
    net_eff: float | None  # None: as inside a node
    inter_latency: float | None  # microseconds per step; None: as inside a node
    description: str


def _gib(x: float) -> float:
    """GB (10^9 bytes, to a tenth) of ``x`` GiB."""
    return round(x * 2**30 / 1e9, 1)


_REAL = dict(gpus_per_node=8, memory_eff=0.8, link_eff=0.8, latency=1.0)

DEVICES = {d.name: d for d in (
    Device("v100", {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}, _gib(31.7), 150.0, 900.0, "fp16", "ib-edr",
           headroom=2.0, matmul_eff=0.8, attention_eff=0.5, sms=80, arch="volta", **_REAL),
    Device("a100-40gb", {"fp64": 19.5, "fp32": 19.5, "bf16": 312.0, "fp16": 312.0}, _gib(39.4), 300.0, 1555.0, "bf16",
           "ib-hdr", headroom=2.0, matmul_eff=0.8, attention_eff=0.55, sms=108, arch="ampere", **_REAL),
    Device("a100-80gb", {"fp64": 19.5, "fp32": 19.5, "bf16": 312.0, "fp16": 312.0}, _gib(79.2), 300.0, 2039.0, "bf16",
           "ib-hdr", headroom=3.0, matmul_eff=0.8, attention_eff=0.55, sms=108, arch="ampere", **_REAL),
    Device("h100", {"fp64": 67.0, "fp32": 67.0, "bf16": 989.5, "fp16": 989.5}, _gib(79.1), 450.0, 3350.0, "bf16",
           "ib-ndr", headroom=3.0, matmul_eff=0.75, attention_eff=0.45, sms=132, fp8=1979.0, arch="hopper", **_REAL),
    Device("h100-96gb", {"fp64": 67.0, "fp32": 67.0, "bf16": 989.5, "fp16": 989.5}, _gib(95.0), 450.0, 2400.0, "bf16",
           "roce-400", headroom=3.0, matmul_eff=0.75, attention_eff=0.45, sms=132, fp8=1979.0, arch="hopper",
           power=round(835.0 + (989.5 - 835.0) * (500.0 - 400.0) / (700.0 - 400.0), 1) / 989.5, **_REAL),
    Device("h100-nvl", {"fp64": 60.0, "fp32": 60.0, "bf16": 835.0, "fp16": 835.0}, _gib(93.1), 300.0, 3900.0, "bf16",
           "ib-ndr", headroom=3.0, matmul_eff=0.75, attention_eff=0.45, sms=132, fp8=1670.5, arch="hopper",
           **{**_REAL, "gpus_per_node": 2}),
    Device("h800", {"fp64": 67.0, "fp32": 67.0, "bf16": 989.5, "fp16": 989.5}, _gib(79.1), 200.0, 3350.0, "bf16",
           "ib-ndr", headroom=3.0, matmul_eff=0.75, attention_eff=0.45, sms=132, fp8=1979.0, arch="hopper", **_REAL),
    Device("h200", {"fp64": 67.0, "fp32": 67.0, "bf16": 989.5, "fp16": 989.5}, _gib(139.8), 450.0, 4800.0, "bf16",
           "ib-ndr", headroom=3.0, matmul_eff=0.75, attention_eff=0.45, sms=132, fp8=1979.0, arch="hopper", **_REAL),
    Device("b200", {"bf16": 2250.0, "fp16": 2250.0}, _gib(178.35), 900.0, 8000.0, "bf16", "ib-ndr", headroom=3.0,
           matmul_eff=0.75, attention_eff=0.45, sms=148, fp8=4500.0, arch="blackwell", **_REAL),
    Device("b300", {"bf16": 2250.0, "fp16": 2250.0}, _gib(267.69), 900.0, 8000.0, "bf16", "ib-xdr", headroom=3.0,
           matmul_eff=0.75, attention_eff=0.45, sms=148, fp8=4500.0, arch="blackwell", **_REAL),
    Device("gb200", {"bf16": 2500.0, "fp16": 2500.0}, _gib(184.31), 900.0, 8000.0, "bf16", "ib-ndr", headroom=3.0,
           matmul_eff=0.75, attention_eff=0.45, sms=152, fp8=5000.0, arch="blackwell",
           **{**_REAL, "gpus_per_node": 72}),
    Device("gb300", {"bf16": 2500.0, "fp16": 2500.0}, _gib(276.8), 900.0, 8000.0, "bf16", "ib-xdr", headroom=3.0,
           matmul_eff=0.75, attention_eff=0.45, sms=152, fp8=5000.0, arch="blackwell",
           **{**_REAL, "gpus_per_node": 72}),
    Device("paper", {"fp64": 10.0, "fp32": 10.0, "bf16": 10.0, "fp16": 10.0}, None, 16.0),
)}

ATTENTION_KERNELS = {k.name: k for k in (
    AttentionKernel("fa2", "FlashAttention-2", {"ampere": 0.55, "hopper": 0.35}),
)}

NETWORKS = {n.name: n for n in (
    Network("ib-edr", 12.5, 0.85, 5.0, "100 Gb/s InfiniBand EDR per device"),
    Network("ib-hdr", 25.0, 0.85, 5.0, "200 Gb/s InfiniBand HDR per device"),
    Network("ib-ndr", 50.0, 0.85, 5.0, "400 Gb/s InfiniBand NDR per device"),
    Network("ib-xdr", 100.0, 0.85, 5.0, "800 Gb/s InfiniBand XDR per device"),
    Network("roce-400", 50.0, 0.75, 8.0, "400 Gb/s RoCE per device"),
    Network("nvlink", None, None, None, "as fast as inside a node"),
)}


def known(name: str) -> Device:
    """The preset ``name`` names (any case); a :class:`SettingError` listing
    the presets otherwise."""
    d = DEVICES.get(str(name).lower())
    if d is None:
        raise SettingError("device", f"{shown(name)} is not a known device; choose one of {', '.join(DEVICES)}")
    return d


def device_arch(device: str | None) -> str:
    """The architecture of the device preset ``device`` (any case; ``""``
    for a device that is no preset, or none)."""
    d = DEVICES.get(str(device).lower()) if device else None
    return d.arch if d is not None else ""


def attention_share(kernel: str, device: str) -> float | None:
    """The share of ``device``'s peak the attention kernel ``kernel`` (a
    name in :data:`ATTENTION_KERNELS`) reaches, or ``None`` where no
    figure is known (another architecture, a device that is no preset)."""
    arch = device_arch(device)
    return ATTENTION_KERNELS[kernel].shares.get(arch) if arch else None


def default_precision(name: str) -> str:
    """The training precision a device preset implies."""
    return known(name).precision


def device(name: str, precision: str) -> dict:
    """The cluster fields a device preset sets at ``precision``."""
    d = known(name)
    if precision not in d.tflops:
        raise SettingError("precision", f"{precision} is not supported by {d.name} "
                                        f"(it offers {', '.join(d.tflops)})")
    fields = {"device": d.name, "flops": d.tflops[precision], "bw": d.bw}
    if d.memory is not None:
        fields["device_memory"] = d.memory
    if d.mem_bw is not None:
        fields.update(mem_bw=d.mem_bw, matmul_eff=d.matmul_eff, attention_eff=d.attention_eff,
                      memory_eff=d.memory_eff, link_eff=d.link_eff, latency=d.latency,
                      gpus_per_node=d.gpus_per_node, headroom=d.headroom, sms=d.sms, power=d.power)
        if d.fp8 is not None:
            fields["fp8_flops"] = d.fp8
        fields.update(network_fields(d.network))
    return fields


def network(name: str) -> Network:
    n = NETWORKS.get(str(name).lower())
    if n is None:
        raise SettingError("network", f"{shown(name)} is not a known network; choose one of {', '.join(NETWORKS)}")
    return n


def network_fields(name: str) -> dict:
    """The cluster fields a network preset sets."""
    n = network(name)
    fields = {"network": n.name}
    if n.inter_bw is not None:
        fields.update(inter_bw=n.inter_bw, net_eff=n.net_eff, inter_latency=n.inter_latency)
    return fields
