"""Device presets: peak dense TFLOPS by precision, memory, and the per-device
bandwidth inside a node (one direction), from the vendors' data sheets:

* ``v100``: NVIDIA Tesla V100 SXM2 32 GB (V100 data sheet, 2020): FP64 7.8,
  FP32 15.7, FP16 tensor 125 TFLOPS (no BF16); NVLink 300 GB/s in total,
  150 GB/s each way.
* ``a100-40gb``, ``a100-80gb``: NVIDIA A100 SXM4 (A100 data sheet, 2021):
  FP64 tensor 19.5, FP32 19.5, BF16 and FP16 tensor 312 TFLOPS (dense);
  NVLink 600 GB/s in total, 300 GB/s each way.
* ``h100``: NVIDIA H100 SXM5 80 GB (H100 data sheet, 2023): FP64 tensor 67,
  FP32 67, BF16 and FP16 tensor 989.5 TFLOPS (dense; twice that with
  sparsity); NVLink 900 GB/s in total, 450 GB/s each way.
* ``paper``: the PaSE paper's device, 10 TFLOPS and 16 GB/s at every
  precision, memory unbounded: the defaults.

The network between nodes is the cluster's, not the device's: set it with
``gpus_per_node`` and ``inter_bw``.
"""

from __future__ import annotations

from dataclasses import dataclass

from errors import SettingError, shown

__all__ = ["Device", "DEVICES", "device", "known"]


@dataclass(frozen=True)
class Device:
    name: str
    tflops: dict  # precision -> peak dense TFLOPS
    memory: float | None  # GB
    bw: float  # GB/s per device inside a node, one direction


DEVICES = {d.name: d for d in (
    Device("v100", {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}, 32.0, 150.0),
    Device("a100-40gb", {"fp64": 19.5, "fp32": 19.5, "bf16": 312.0, "fp16": 312.0}, 40.0, 300.0),
    Device("a100-80gb", {"fp64": 19.5, "fp32": 19.5, "bf16": 312.0, "fp16": 312.0}, 80.0, 300.0),
    Device("h100", {"fp64": 67.0, "fp32": 67.0, "bf16": 989.5, "fp16": 989.5}, 80.0, 450.0),
    Device("paper", {"fp64": 10.0, "fp32": 10.0, "bf16": 10.0, "fp16": 10.0}, None, 16.0),
)}


def known(name: str) -> Device:
    """The preset ``name`` names (any case); a :class:`SettingError` listing
    the presets otherwise."""
    d = DEVICES.get(str(name).lower())
    if d is None:
        raise SettingError("device", f"{shown(name)} is not a known device; choose one of {', '.join(DEVICES)}")
    return d


def device(name: str, precision: str) -> dict:
    """The cluster fields a preset sets at ``precision``."""
    d = known(name)
    if precision not in d.tflops:
        raise SettingError("precision", f"{precision} is not supported by {d.name} "
                                        f"(it offers {', '.join(d.tflops)})")
    fields = {"device": d.name, "flops": d.tflops[precision], "bw": d.bw}
    if d.memory is not None:
        fields["device_memory"] = d.memory
    return fields
