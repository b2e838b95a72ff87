"""One rank of the exported PyTorch plans, run: ``python tests/torch_worker.py
RANK WORLD PORT CASES OUT`` (``tests/test_torch_plans.py`` starts the
ranks on CPU with gloo).

``CASES`` is a JSON list of ``{"name", "config" (a Hugging Face config),
"plan" (a --export dtensor file), "batch", "seq", "seed"}``.  For each,
every rank builds the model from its ``transformers`` config class with
the seed, applies the plan with :func:`exports.torch_apply.apply`, runs
one forward and backward pass over its share of the batch (the same
tokens as the single-process reference of the test) and writes the loss
and every gradient it holds, gathered whole, to ``OUT/NAME.rankR.pt``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def model_of(config: dict, seed: int):
    """The causal language model of ``config`` (its ``transformers``
    config class), initialised with ``seed``, in float32, training."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(**config)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
    return model.train()


def batch_of(config: dict, batch: int, seq: int, seed: int):
    """The tokens and the labels (the next tokens) of the test's batch."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, config["vocab_size"], (batch, seq + 1), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def loss_of(logits, labels):
    import torch.nn.functional as F

    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def _whole(t):
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _placements(t):
    """A DTensor's placements as text, or ``"local"`` for a plain tensor."""
    from torch.distributed.tensor import DTensor

    return [repr(p) for p in t.placements] if isinstance(t, DTensor) else "local"


def run_case(case: dict, rank: int, out: Path):
    import torch
    import torch.distributed as dist

    from exports.torch_apply import Pipelined, apply, load

    plan = load(case["plan"])
    model = model_of(case["config"], case["seed"])
    ids, labels = batch_of(case["config"], case["batch"], case["seq"], case["seed"])
    mesh = plan.device_mesh("cpu")
    names = plan.mesh_names
    dp = [n for n in ("dp_replicate", "dp_shard") if n in names]
    coords = dict(zip(names, mesh.get_coordinate()))
    ways = plan.doc["mesh"]["shape"]
    size = dict(zip(names, ways))
    dp_index = coords.get("dp_replicate", 0) * size.get("dp_shard", 1) + coords.get("dp_shard", 0)
    dp_ways = size.get("dp_replicate", 1) * size.get("dp_shard", 1)
    share = case["batch"] // dp_ways
    ids, labels = ids[dp_index * share:(dp_index + 1) * share], labels[dp_index * share:(dp_index + 1) * share]
    start = time.perf_counter()
    parallel = apply(model, plan, mesh)
    seen = {"residual": None}
    embed = next((m.model.embed_tokens for m in (parallel.modules if isinstance(parallel, Pipelined) else [parallel])
                  if m.model.embed_tokens is not None), None)
    if embed is not None:  # how the embedding hands the residual stream on
        embed.register_forward_hook(lambda mod, args, output: seen.update(residual=_placements(output)))
    if isinstance(parallel, Pipelined):
        modules = parallel.modules
        schedule = parallel.schedule(loss_of)
        first = any(m.model.embed_tokens is not None for m in modules)
        last = any(m.lm_head is not None for m in modules)
        losses = []
        with plan.loss_parallel():
            schedule.step(*([ids] if first else []), **({"target": labels, "losses": losses} if last else {}))
        loss = torch.stack([_whole(x).detach() for x in losses]).mean() if last else None
        named = [(n, p) for m in modules for n, p in m.named_parameters()]
    else:
        with plan.loss_parallel():
            loss = loss_of(parallel(input_ids=ids).logits, labels)
            loss.backward()
        loss = _whole(loss).detach()
        named = list(parallel.named_parameters())
    grads = {n: _whole(p.grad).detach().clone() for n, p in named if p.grad is not None}
    seen["placements"] = {n: _placements(p) for n, p in named}
    if dp_ways > 1:  # the mean over the data-parallel ranks' shares (the group made on every rank alike)
        group = mesh[tuple(dp)]._flatten("dp_all").get_group() if len(dp) > 1 else mesh[dp[0]].get_group()
    if loss is not None and dp_ways > 1:
        loss = loss.clone()
        dist.all_reduce(loss, group=group)
        loss /= dp_ways
    torch.save({"loss": loss, "grads": grads, "seen": seen, "seconds": time.perf_counter() - start},
               out / f"{case['name']}.rank{rank}.pt")


def main(argv):
    import datetime

    import torch
    import torch.distributed as dist

    rank, world, port, cases, out = int(argv[0]), int(argv[1]), int(argv[2]), argv[3], Path(argv[4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        for case in json.loads(Path(cases).read_text()):
            run_case(case, rank, out)
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
