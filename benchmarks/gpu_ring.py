"""Measure on a GPU what ring attention (context parallelism) runs on each
device, step by step, and print it beside the time model's figures.

    python benchmarks/gpu_ring.py [--positions 32768] [--quick]

PyTorch's ring attention (``torch.distributed.tensor.experimental``, as
torchtitan runs it) splits a causal sequence of ``S`` positions over ``c``
devices in ``2 c`` chunks, device ``r`` holding chunks ``r`` and ``2c - 1 -
r`` (the load balance), ``L = S / c`` positions.  Each of its ``c`` steps
calls the attention kernel once: step 0 on the device's own queries and
keys (``L x L``, causal), every later step on ``L x L/2`` or ``L/2 x L``
without a mask, and merges the step's output into the running one in fp32
(the log-sum-exp rescaling).  Printed (needs torch and a CUDA GPU; without
them it says so and exits 0):

- each step's kernel, forward and forward + backward, per backend
  (FlashAttention 2, memory-efficient, cuDNN), in TFLOP/s by the
  FlashAttention convention (``4 b h s_q s_k d``, half of it causal;
  backward 2.5 times the forward), beside the whole sequence's causal
  kernel on one device (no context parallelism) and the model's
  ``attention_eff``;
- one merge of a step's output (fp32, eager), in milliseconds and GB/s
  against the bytes the model charges for it.

The figures are printed, never asserted: they check the model's
constants; none is fitted on them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_rates import cuda_torch, power_line, timed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--positions", type=int, default=32768, help="positions a device holds (L)")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    torch = cuda_torch("gpu_ring.py")
    if torch is None:
        return
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from cluster.presets import known

    dev = known("h100")
    print(power_line())
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    reps = dict(warmup=1, iters=3) if args.quick else dict(warmup=2, iters=5)
    L, h, d = args.positions, args.heads, args.width
    peak = dev.tflops["bf16"] * 1e12
    print(f"\nthe model: fused attention at {dev.attention_eff:.0%} of {dev.tflops['bf16']:g} TFLOPS = "
          f"{dev.attention_eff * dev.tflops['bf16']:.0f} TFLOPS forward and backward\n")
    cases = [("one device, whole sequence", L, L, True), ("ring step 0: L x L causal", L, L, True),
             ("ring step: L x L/2", L, L // 2, False), ("ring step: L/2 x L", L // 2, L, False)]
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    print(f"{'backend':10s} {'kernel':28s} {'ms fwd':>8s} {'TFLOPS':>7s} {'ms f+b':>8s} {'TFLOPS':>7s} {'share':>6s}")
    for bname, backend in backends:
        for label, sq, sk, causal in cases[1:]:
            q = torch.randn(1, h, sq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(1, h, sk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(1, h, sk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            flop = 4.0 * h * sq * sk * d * (0.5 if causal else 1.0)
            try:
                with sdpa_kernel([backend]):
                    fwd = timed(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), **reps)
                    g = torch.randn(1, h, sq, d, device="cuda", dtype=torch.bfloat16)

                    def both():
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(g)

                    fb = timed(torch, both, **reps)
            except RuntimeError as e:
                print(f"{bname:10s} {label:28s} not run: {str(e).splitlines()[0][:60]}")
                break
            rate = flop / fwd / 1e12
            rate_fb = 3.5 * flop / fb / 1e12
            print(f"{bname:10s} {label:28s} {fwd * 1e3:8.2f} {rate:7.0f} {fb * 1e3:8.2f} {rate_fb:7.0f} "
                  f"{rate_fb * 1e12 / peak:6.1%}")
        q = k = v = None  # the last case's tensors freed before the next backend
        torch.cuda.empty_cache()
    # one merge, as the ring's forward does it after each step but the first: the step's output and
    # log-sum-exp to fp32, then out - sigmoid(lse_step - lse) * (out - out_step) and
    # lse - logsigmoid(lse - lse_step)
    out = torch.randn(1, h, L, d, device="cuda", dtype=torch.float32)
    lse = torch.randn(1, h, L, 1, device="cuda", dtype=torch.float32)
    step_out = torch.randn(1, h, L, d, device="cuda", dtype=torch.bfloat16)
    step_lse = torch.randn(1, h, L, 1, device="cuda", dtype=torch.float32)

    def merge():
        o = step_out.float()
        new = out - torch.sigmoid(step_lse - lse) * (out - o)
        return new, lse - F.logsigmoid(lse - step_lse)

    t = timed(torch, merge, **reps)
    elements = h * L * d
    from kinds.attention import MERGE_BYTES

    print(f"\nmerge of one step's output ({elements / 1e6:.0f} M elements): {t * 1e3:.2f} ms, "
          f"{MERGE_BYTES * elements / t / 1e9:,.0f} GB/s at the {MERGE_BYTES:.0f} bytes per element the model "
          f"charges (the model: {dev.mem_bw * dev.memory_eff:,.0f} GB/s)")
    print(f"a step's kernel against the merge: see the table; L = {L}, {h} heads of {d}")


if __name__ == "__main__":
    main()
