"""Run an exported PyTorch plan for training steps on GPUs and print the
measured step beside the predicted one.

    python scheduler.py -g CONFIG_DIR -p 1 -b 2 --seq 4096 --device h100 --framework torchtitan \\
        --plan tp=1 --export dtensor:plan.json --output result.json
    python benchmarks/torch_step.py plan.json CONFIG_DIR --result result.json
    torchrun --nproc-per-node 8 benchmarks/torch_step.py plan.json CONFIG_DIR   # a plan of 8 devices

The plan is a ``--export dtensor`` file, applied as a user applies it
(``exports/torch_apply.py``) to the ``transformers`` model of the config,
built in bfloat16 on the GPU with random weights; one step is a forward
pass, the loss (cross-entropy over random tokens), the backward pass and
a fused AdamW update.  After ``--warmup`` steps, ``--steps`` are timed
(CUDA synchronised) and the median is printed beside the prediction the
tool's result file records (``--result``: the ``--output`` of the run that
exported the plan), with the peak memory PyTorch's allocator reserved.
Eager PyTorch as ``transformers`` writes the model: compare it with the
prediction of ``--framework torchtitan`` without ``--compile``.  Where
torch, transformers or enough GPUs are missing it says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _say(line: str) -> None:
    print(f"torch_step.py: {line}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", help="a --export dtensor file")
    ap.add_argument("config", help="the model's config.json or its directory")
    ap.add_argument("--result", help="the tool's --output of the same run: the predicted step")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args(argv)
    from errors import InputError
    from exports.torch_apply import load

    try:
        plan = load(args.plan)
    except InputError as e:
        print(f"torch_step.py: error: {e}", file=sys.stderr)
        return 2
    predicted = None
    if args.result:
        predicted = json.loads(Path(args.result).read_text()).get("step_seconds")
    for need in ("torch", "transformers"):
        if importlib.util.find_spec(need) is None:
            _say(f"{need} is not installed: nothing to measure")
            return 0
    import torch
    import torch.distributed as dist
    import transformers

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != plan.world_size or not torch.cuda.is_available() or torch.cuda.device_count() < world:
        _say(f"the plan runs on {plan.world_size} GPUs; {world} processes and {torch.cuda.device_count()} GPUs "
             "here: nothing to measure (start it with torchrun --nproc-per-node N)")
        return 0
    rank = int(os.environ.get("RANK", "0"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world)
    from exports.torch_apply import apply

    config = transformers.AutoConfig.from_pretrained(str(Path(args.config).parent if args.config.endswith(".json")
                                                         else args.config))
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model = apply(model, plan, plan.device_mesh("cuda"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    doc = plan.doc
    std = doc.get("standard") or {}
    local = doc["batch"] // max(1, int(std.get("dp", 1)))  # this rank's samples
    ids = torch.randint(0, config.vocab_size, (local, doc["seq"]), device="cuda")

    def step():
        with plan.loss_parallel():
            logits = model(ids).logits
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    measured = statistics.median(times)
    peak = torch.cuda.max_memory_reserved() / 2**30
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        _say(f"{doc['model']} ({params:,} parameters on this rank), {doc['plan']}, batch {doc['batch']} of {doc['seq']} "
             f"tokens on {world} {torch.cuda.get_device_name()}")
        _say(f"measured step {1e3 * measured:.1f} ms (median of {args.steps}; min {1e3 * min(times):.1f} ms); "
             f"peak reserved {peak:.1f} GiB")
        if predicted:
            _say(f"predicted step {1e3 * predicted:.1f} ms: measured / predicted {measured / predicted:.3f}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
