"""Measure on a GPU the rates the realistic time model assumes, and print
them beside the model's figures for the device.

    python benchmarks/gpu_rates.py [--device h100] [--quick]

Printed, one table each (needs torch and a CUDA GPU; without them it says
so and exits 0: there is nothing to measure):

- **matrix products** in bf16 at the shapes of Llama 3 8B's layer for 16,384
  tokens (the q/k/v, output, gate/up, down and vocabulary projections) and
  a square one: TFLOP/s and the share of the device preset's peak, beside
  the model's rate (``matmul_eff`` in waves of 128 x 128 tiles); in FP8
  (``torch._scaled_mm``) where the GPU has it;
- **fused attention** (``scaled_dot_product_attention``, causal, 32 heads
  of 128 at 8,192 positions): forward and forward + backward TFLOP/s by the
  FlashAttention convention (the causal half of ``4 b h s^2 d`` forward,
  2.5 times that backward), with PyTorch's default backend and with each
  of its flash (FlashAttention-2) and cuDNN backends asked for alone,
  beside ``attention_eff`` and the named kernels' figures
  (``cluster.presets.ATTENTION_KERNELS``);
- **memory-bound work**: a copy and an addition of bf16 tensors (GB/s,
  beside ``mem_bw x memory_eff``), and torchtitan's eager RMSNorm forward
  and backward against the bytes ``frameworks/eager.py`` charges for it.

The figures are printed, never asserted: they check the model's constants
(the presets keep their data-sheet and published figures); a GPU's power
limit and clocks are printed first, since they set its peak.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = [("q, k, v", 16384, 6144, 4096), ("attention output", 16384, 4096, 4096),
          ("gate and up", 16384, 28672, 4096), ("down", 16384, 4096, 14336),
          ("vocabulary", 16384, 128256, 4096), ("square 8192", 8192, 8192, 8192)]


def timed(torch, fn, warmup: int = 3, iters: int = 10) -> float:
    """Median seconds of ``fn()`` on the GPU (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return sorted(times)[len(times) // 2]


def power_line() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,power.limit,power.max_limit,clocks.max.sm,"
                              "memory.total", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or "nvidia-smi printed nothing"
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi not available ({e})"


def cuda_torch(script: str):
    """torch, where it is installed and sees a CUDA GPU; else ``None``,
    having said so (there is nothing to measure)."""
    try:
        import torch
    except ImportError:
        print(f"{script}: torch is not installed: nothing to measure")
        return None
    if not torch.cuda.is_available():
        print(f"{script}: no CUDA GPU: nothing to measure")
        return None
    return torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="h100", help="the preset whose figures the measurements are set beside")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    torch = cuda_torch("gpu_rates.py")
    if torch is None:
        return
    from cluster.presets import known
    from cost.time import wave_share

    dev = known(args.device)
    iters = 5 if args.quick else 10
    print(f"GPU: {torch.cuda.get_device_name()} (torch {torch.__version__}); {power_line()}")
    print(f"set beside the {dev.name} preset: {dev.tflops['bf16']:g} bf16 TFLOPS, FP8 {dev.fp8}, "
          f"{dev.mem_bw:g} GB/s, matmul_eff {dev.matmul_eff}, attention_eff {dev.attention_eff}, "
          f"memory_eff {dev.memory_eff}, {dev.sms} multiprocessors\n")
    peak = dev.tflops["bf16"]
    print(f"{'bf16 product':18} {'M x N x K':>22} {'TFLOP/s':>8} {'of peak':>8} {'model':>8}")
    for name, m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        t = timed(torch, lambda: a @ b, iters=iters)
        rate = 2.0 * m * n * k / t / 1e12
        model = peak * dev.matmul_eff * float(wave_share(m, n, 1, dev.sms))
        print(f"{name:18} {f'{m} x {n} x {k}':>22} {rate:8.1f} {100 * rate / peak:7.1f}% {model:8.1f}")
        del a, b
    if hasattr(torch, "_scaled_mm") and dev.fp8:
        print(f"\n{'FP8 product':18} {'M x N x K':>22} {'TFLOP/s':>8} {'of FP8':>8} {'model':>8}")
        for name, m, n, k in SHAPES[:4]:
            a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
            b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
            one = torch.tensor(1.0, device="cuda")
            try:
                t = timed(torch, lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                          out_dtype=torch.bfloat16), iters=iters)
            except (RuntimeError, TypeError) as e:
                print(f"{name:18} torch._scaled_mm failed: {str(e).splitlines()[0][:60]}")
                break
            rate = 2.0 * m * n * k / t / 1e12
            model = dev.fp8 * dev.matmul_eff * float(wave_share(m, n, 1, dev.sms))
            print(f"{name:18} {f'{m} x {n} x {k}':>22} {rate:8.1f} {100 * rate / dev.fp8:7.1f}% {model:8.1f}")
    import torch.nn.functional as F

    b_, h, s, d = 2, 32, 8192, 128
    q, k_, v = (torch.randn(b_, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    fwd_flop = 4.0 * b_ * h * s * s * d / 2.0  # causal: half the scores
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    from cluster.presets import ATTENTION_KERNELS, attention_share

    print(f"\nfused attention (b {b_}, {h} heads of {d}, {s} positions, causal); model {peak * dev.attention_eff:.1f} "
          f"TFLOP/s ({100 * dev.attention_eff:.0f}%)" + "".join(
              f", {k.title} {100 * attention_share(k.name, dev.name):.0f}%" for k in ATTENTION_KERNELS.values()
              if attention_share(k.name, dev.name) is not None))
    for label, backend in (("default", None), ("flash (FlashAttention-2)", SDPBackend.FLASH_ATTENTION),
                           ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
        def fwd_only():
            with sdpa_kernel([backend]) if backend is not None else nullcontext():
                F.scaled_dot_product_attention(q, k_, v, is_causal=True)

        def both():
            with sdpa_kernel([backend]) if backend is not None else nullcontext():
                F.scaled_dot_product_attention(q, k_, v, is_causal=True).sum().backward()

        try:
            t_f, t_fb = timed(torch, fwd_only, iters=iters), timed(torch, both, iters=iters)
        except RuntimeError as e:  # a backend this GPU or build lacks
            print(f"  {label:24} not available ({str(e).splitlines()[0][:60]})")
            continue
        fwd, both_rate = fwd_flop / t_f / 1e12, 3.5 * fwd_flop / t_fb / 1e12
        print(f"  {label:24} forward {fwd:7.1f} TFLOP/s ({100 * fwd / peak:.1f}%), forward + backward "
              f"{both_rate:7.1f} ({100 * both_rate / peak:.1f}%)")
    x = torch.randn(16384, 4096 * 16, device="cuda", dtype=torch.bfloat16)
    y = torch.randn_like(x)
    nbytes = x.numel() * 2
    t_copy = timed(torch, lambda: x.clone(), iters=iters)
    t_add = timed(torch, lambda: x + y, iters=iters)
    model_bw = dev.mem_bw * dev.memory_eff
    print(f"\nmemory-bound work ({nbytes / 1e9:.2f} GB bf16 tensors; model {model_bw:.0f} GB/s)")
    print(f"  copy               {2 * nbytes / t_copy / 1e9:8.0f} GB/s")
    print(f"  add                {3 * nbytes / t_add / 1e9:8.0f} GB/s")
    from frameworks.eager import RMSNORM

    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def rms(x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w

    g = torch.randn_like(x)
    t_rf = timed(torch, lambda: rms(x), iters=iters)
    t_rfb = timed(torch, lambda: rms(x).backward(g), iters=iters)
    e = x.numel()
    fwd_bytes, bwd_bytes = RMSNORM[0] + 4.0, RMSNORM[1] + 8.0
    print(f"\neager RMSNorm ({e:,} elements): forward {t_rf * 1e6:.0f} us, backward {(t_rfb - t_rf) * 1e6:.0f} us")
    print(f"  model: {fwd_bytes:.0f} and {bwd_bytes:.0f} bytes per element at {model_bw:.0f} GB/s: "
          f"{fwd_bytes * e / model_bw / 1e3:.0f} us and {bwd_bytes * e / model_bw / 1e3:.0f} us")


if __name__ == "__main__":
    main()
