"""What the standard-configuration exports share: the checks and the
figures they all need."""

from __future__ import annotations

from errors import InputError

#: families whose transformers modules torchtitan 0.3's transformers backend cannot shard (hf_sharding.py looks for
#: q_proj with k_proj and v_proj, and gate_proj or fc1 with down_proj or fc2): what each has instead (the torchtitan
#: export refuses them, and the dtensor export's refusal sends them elsewhere)
UNSHARDED = {"phi3": "a fused qkv_proj and gate_up_proj", "glm": "a fused gate_up_proj",
             "glm4": "a fused gate_up_proj",
             "gpt_neox": "its attention named attention, not self_attn, with a fused query_key_value",
             "starcoder2": "c_fc and c_proj"}

__all__ = ["UNSHARDED", "standard_for", "layer_parts", "header_lines"]


def standard_for(plan, fmt: str, needs_roles: bool = True):
    """The plan's standard configuration for ``fmt``; with ``needs_roles``
    the model must name its transformer roles (a sequence, tensor-parallel
    letters): what the framework trains."""
    if needs_roles and not plan.graph.graph.get("roles"):
        raise InputError(f"--export {fmt}: {plan.model_name} is not a transformer (it names no sequence or "
                         f"tensor-parallel dimensions); {fmt} trains transformers: export it with --export jax")
    return plan.standard(fmt)


def fsdp_zero(std, fail: str) -> None:
    """Refuse ZeRO-1 and -2 for a framework whose data parallelism either
    replicates everything or shards it all with FSDP (torchtitan)."""
    if std.zero in (1, 2):
        raise InputError(fail + f"zero={std.zero} shards the optimizer state{' and gradients' if std.zero == 2 else ''}"
                         " but not the weights; torchtitan replicates (zero=0) or shards all three with FSDP "
                         "(zero=3)")


def layer_parts(plan, std, fmt: str) -> list[int]:
    """Layers (blocks) of each model part of a pipeline, in model order: one
    part per stage, or with ``chunks`` per device (interleaved), part ``k``
    on device ``k mod pp``, each stage's blocks split into its chunks as
    evenly as they divide, the last chunks taking one more (as the plan was
    costed: :func:`pipeline.stage_chunk_sizes`: a chunk of no layer, the
    embedding's or the loss's, first on the first stage, last on the last)."""
    from pipeline import stage_chunk_sizes

    if plan.chain is None:
        raise InputError(f"--export {fmt}: {plan.model_name} has no repeated layers to split into stages")
    counts = plan.stage_blocks()
    v = std.chunks if std.schedule == "interleaved" else 1
    return [stage_chunk_sizes(counts[k % std.pp], v, k % std.pp == std.pp - 1)[k // std.pp] for k in range(std.pp * v)]


def part_modules(plan, std, fmt: str, head: str) -> list[list[str]]:
    """The module names of each model part of a pipeline (torchtitan's
    Llama naming: the embedding ``tok_embeddings`` in the first part,
    ``layers.{i}`` in order, and ``norm`` with the output layer ``head``
    in the last), in model order (:func:`layer_parts`)."""
    out, i = [], 0
    counts = layer_parts(plan, std, fmt)
    for k, n in enumerate(counts):
        names = ["tok_embeddings"] if k == 0 else []
        names += [f"layers.{j}" for j in range(i, i + n)]
        i += n
        if k == len(counts) - 1:
            names += ["norm", head]
        out.append(names)
    return out


def async_tp(plan, std, notes: list) -> bool:
    """Whether torchtitan runs the plan with asynchronous tensor
    parallelism: costed with ``--tp-overlap`` under torch.compile, with
    tensor and sequence parallelism (what it needs); a note where the plan
    was costed with the overlap but torchtitan cannot run it so."""
    fw = plan.framework
    if fw is None or not fw.tp_overlap:
        return False
    if fw.compiled and std.tp > 1 and std.sp:
        return True
    notes.append(f"costed with --tp-overlap under {fw.title}; torchtitan's asynchronous tensor parallelism needs "
                 "torch.compile and tensor and sequence parallelism, which the plan was not costed with: it stays "
                 "off")
    return False


def header_lines(plan, std, follows: str) -> list[str]:
    """The comment lines every export of a standard configuration starts
    with (without the comment marker)."""
    from report import fmt_time

    r = plan.result
    lines = [f"{plan.model_name} on {plan.procs} devices: standard configuration {std.describe()}",
             f"written by PaSE (scheduler.py); predicted step time {fmt_time(r.step_seconds)} "
             f"(cost {r.total_cost:.6g} FLOP at {r.cost_model.cluster.flops:g} TFLOPS per device)",
             f"names follow {follows}"]
    if plan.precision == "fp64":
        lines.append("costed in fp64 (the original PaSE word): no training precision is set here")
    return lines


def json_text(doc: dict) -> str:
    """``doc`` as JSON, one line per top-level key and one per entry of a
    list of records (an operator, a parameter): readable and diffable."""
    import json

    lines = []
    for key, value in doc.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            body = ",\n".join("  " + json.dumps(v) for v in value)
            lines.append(f" {json.dumps(key)}: [\n{body}\n ]")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"
