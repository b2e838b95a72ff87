"""torchtitan (PyTorch): FSDP2, tensor, context and pipeline parallelism on
eager PyTorch, or with ``torch.compile`` and Float8 linear layers, as it
runs Llama 3.1.  Three versions are registered:

* ``torchtitan``: torchtitan as installed today (0.3): ``torch.compile``
  compiles each TransformerBlock and the loss (its compile config's
  components default to ``model`` and ``loss``, which the ``torchtitan``
  export writes too), the loss fused by Inductor; attention asks PyTorch
  for cuDNN's kernel first (the device's own attention figure);
* ``torchtitan@2025-06``: its code of June 2025 (the published H200 runs'):
  the same, but attention asked for the flash backend first on devices
  before Blackwell: FlashAttention-2 (``cluster.presets.ATTENTION_KERNELS``);
* ``torchtitan@2024-12``: its code of December 2024 (torch, torchao and
  torchtitan of 2024-12-23/26, the versions of its published benchmark),
  which compiles the blocks but keeps the loss eager, in fp32, and runs
  FlashAttention-2 (PyTorch's default backend then, and ring attention's).

Everything else is the same record.  Checked against
(``benchmarks/published.py``) every row of torchtitan's
``benchmarks/llama3_h100_202412_torchtitan.md`` under
``torchtitan@2024-12``: Llama 3.1 8B on 8 and 128 H100s (eager, compiled,
compiled with Float8), 8B with context parallelism, 70B on 256 and 405B on
512; under ``torchtitan@2025-06`` the 8B runs on 32 and 64 H200s and the
June 2025 asynchronous tensor parallelism runs (70B on 256 H100s, 8B on
64); and torchtitan's spring 2024 runs of Llama 2 and 3 on 64 A100s
(eager, priced under ``torchtitan@2024-12``).  Three constants are fitted
on two rows and shared by the three versions: on December's FSDP +
torch.compile on 8 GPUs, ``overhead`` (time, Hopper's and every
architecture's without a figure of its own) and ``reserve`` (memory); on
the spring 2024 Llama 3 8B on 64 A100s with op-level selective
checkpointing, Ampere's ``overhead``.  Every other row is held out.
"""

from __future__ import annotations

from dataclasses import replace

from frameworks.base import Framework, States, register

TORCHTITAN = register(Framework(
    name="torchtitan",
    title="torchtitan",
    # FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (torchtitan/parallelisms/
    # parallelize_llama.py): the sharded parameters stay fp32 (4), their gradients are reduced into fp32
    # shards (4), AdamW's moments are fp32 (8): 16 bytes, sharded at stage 3 (fully_shard); stages 0 to 2
    # (replicated data parallelism) keep the same copies whole as far as they are not sharded
    states=(States((4.0, 0.0), (4.0, 0.0), (8.0, 0.0)),
            States((4.0, 0.0), (4.0, 0.0), (0.0, 8.0)),
            States((4.0, 0.0), (0.0, 4.0), (0.0, 8.0)),
            States((0.0, 4.0), (0.0, 4.0), (0.0, 8.0))),
    moment=4.0,
    # FSDP2 while a block runs: its bf16 weights all-gathered and the next block's prefetched (2 + 2), its
    # bf16 gradients (2) and their fp32 copy for the reduce-scatter in fp32 (4)
    gathered=10.0,
    # torchtitan's tensor parallelism (SequenceParallel, ColwiseParallel with input layouts Shard(1)):
    # DTensor's all-gather output is what the product saves
    # with pipeline stages FSDP2 does not reshard after the forward pass (parallelize_llama.py:
    # reshard_after_forward=not pp_enabled) and the pipeline schedule defers the reduce-scatter to the last
    # micro-batch (torch.distributed.pipelining's backward_maybe_with_nosync: set_requires_gradient_sync,
    # set_reshard_after_backward): the stage's bf16 weights (2) and its unsharded gradients, accumulated in
    # the fp32 reduce dtype (4), stay for the step
    staged=(2.0, 4.0),
    sequence_parallel="gathered",
    activation_input=False,  # SwiGLU's SiLU and product keep their inputs: the graph's own operators
    # op-level selective activation checkpointing (parallelize_llama.py, _apply_ac_to_transformer_block with
    # selective_ac_option "op"): the results of matrix products (every second one: "save every other mm"),
    # of scaled_dot_product_attention and of reduce-scatters are saved; every other operator is recomputed
    selective="ops",
    # the loss run eagerly (without --compile; and under it in December 2024: cross_entropy(pred.float(), labels)
    # in torchtitan/train.py, "compiling loss function causes CUDA errors, turning off for now"): cross_entropy
    # of fp32 logits, its fp32 log-probabilities kept (4); at its peak, in the backward pass,
    # the gradient of the loss's input and of the log-softmax, fp32 both (4 + 4; the forward's bf16 logits,
    # fp32 copy and log-probabilities, 2 + 4 + 4, are less)
    loss=(4.0, 8.0),
    # with the vocabulary split over tensor parallelism, loss_parallel's log-softmax on DTensors
    # (torch/distributed/tensor/parallel/loss.py, _log_softmax): at its peak, forward, the bf16 logits (2),
    # their fp32 copy (4), the shifted logits (4) and their exponentials (4) beside the kept result (4); the
    # same under --compile (loss_parallel's handlers run on DTensor's dispatch, which the compiled loss is
    # not derived for: the published row with a split vocabulary, 70B's, ran it eagerly)
    loss_split=(4.0, 14.0),
    grad_precision="fp32",  # reduce_dtype=torch.float32
    bucket_mb=1000.0,  # FSDP2 reduces one block's gradients at a time: one collective per block
    overlap=1.0,  # FSDP2 prefetches the next block's all-gather and overlaps the reduce-scatter
    # eager PyTorch unless --compile (then each TransformerBlock is compiled: torch.compile fuses its
    # element-wise work, and the loss is compiled too: compiled_loss); the embedding stays eager
    kernels="eager",
    # cross_entropy of fp32 logits: to fp32 (read 2, write 4), log-softmax (read twice 4, write 4), the target
    # logit; backward: the loss's gradient zeroed and scattered (write 4), log-softmax's backward (read twice
    # 4 and 4, write 4), to bf16 (read 4, write 2)
    loss_passes=(18.0, 26.0),
    # the compiled loss: torchtitan/components/loss.py's build_cross_entropy_loss wraps cross_entropy_loss
    # (cross_entropy(pred.flatten(0, 1).float(), labels)) in torch.compile when compile.enable and "loss" is in
    # compile.components (the default, torchtitan/config/job_config.py's Compile: model and loss; in June
    # 2025, whenever training.compile).  AOTAutograd traces log_softmax and nll_loss with the upcast into one
    # forward and one backward graph, and its min-cut partitioner (torch/_functorch/partitioners.py) saves the
    # fewest bytes that let the backward recompute the rest: the graph's bf16 input (the logits, 2 bytes, the
    # model's own tensor, kept alive for the backward instead of being freed after the forward) and per row the
    # log-sum-exp (4 bytes a row of 128,256 logits: left out); the fp32 copy, the shifted logits and the
    # log-probabilities are never written.  Backward, one kernel recomputes softmax(x) = exp(x - lse), subtracts
    # the target's one, scales by the loss's gradient and writes the logits' gradient in bf16 (the upcast's
    # backward fused into it): 2 bytes held beside the kept logits at the loss's peak.  Kept 2, held 2, against
    # the eager 4 and 8: 8 bytes less per logit at the backward's peak
    compiled_loss=(2.0, 2.0),
    # ... and moves: forward, the bf16 logits read once (Inductor's online softmax, torch/_inductor/config.py
    # online_softmax, on by default since torch 2.7: the running maximum and sum of exponentials in one loop
    # over the row; the target's logit and the row's log-sum-exp are per row); backward, read them again and
    # write their gradient (2 + 2)
    compiled_loss_passes=(2.0, 4.0),
    # torch.optim.AdamW with foreach=True (torchtitan/optimizer.py), each a pass over fp32 lists: weight decay
    # (8), lerp of the first moment (12), the second moment's mul and addcmul (8 + 12), sqrt, divide, add
    # epsilon (8 each), addcdiv into the parameter (16); clip_grad_norm_ (read 4, then scale: 8)
    optimizer_bytes=92.0,
    # FSDP2 per gathered parameter: the all-gather's output copied out into the parameters at each gather
    # (read 2, write 2; before the forward and again before the backward pass), and the bf16 gradient copied
    # into the fp32 reduce-scatter input at each reduction (read 2, write 4)
    gather_bytes=4.0,
    reduce_bytes=6.0,
    launch_us=4.0,  # a CUDA kernel launch (eager PyTorch launches each operation's kernels one by one)
    # NCCL's kernels take multiprocessors from the computation they overlap: on NVLink an all-gather or
    # reduce-scatter runs 16 to 32 channels, a block each, of the H100's 132 multiprocessors (NCCL_MIN_NCHANNELS
    # and NCCL_MAX_NCHANNELS's defaults for NVLink rings): a fifth of them
    contention=0.2,
    # fitted: FSDP + torch.compile, 8 GPUs (6,667 tokens/s, against 8,091 priced without it, FlashAttention-2 at
    # 35% of the peak: 0.230): FSDP2's hooks
    # and DTensor's dispatch on the CPU, its copy-in/copy-out and stream synchronisation, the 500 W power cap's
    # clocks beyond the data sheets' interpolation
    overhead=0.230,
    # fitted: Llama 3 8B on 64 A100s, FSDP, local batch 1, selective op (2,973 tokens/s, torchtitan's
    # docs/performance.md of spring 2024; 3,092 priced without it, 2,553 with Hopper's 0.230: 0.044). The same
    # framework loses a fifth of Hopper's share on the slower Ampere parts; other architectures take Hopper's
    overhead_by_arch=(("ampere", 0.044),),
    # data parallelism is DDP (replicate, zero 0) or FSDP2 (fully_shard: weights, gradients and optimizer state,
    # zero 3), beside pipeline stages too (torchtitan's 405B runs: FSDP 8 x TP 8 x PP 8); nothing shards the
    # optimizer state alone (zero 1) or with the gradients (zero 2)
    zero_stages=(0, 3),
    pipeline_zero_stages=(0, 3),
    # micro-batches accumulated without pipeline stages (train.py's train_step: forward_backward_step, then
    # loss.backward(), once per micro-batch, nothing switching gradient synchronisation off): FSDP2 reshards
    # after each forward and backward pass and reduce-scatters each micro-batch's gradients into the sharded
    # fp32 ones; pipeline stages keep theirs whole (staged) and reduce them once
    sharded_every_micro_batch=True,
    # experts split by tensor parallelism without expert parallelism; with it, unsplit over ranks borrowed from
    # dp_shard x cp x tp (torchtitan/distributed/parallel_dims.py: efsdp = dp_shard x cp x tp / ep), the FSDP ranks
    experts="torchtitan",
    # fitted: FSDP + torch.compile, 8 GPUs (77.0 GiB, torch.cuda.max_memory_reserved, against the 74.9 GB
    # of tensors priced: 0.104): the caching allocator's blocks held beyond the live tensors
    reserve=0.104,
    # the CUDA context with its loaded kernels (about 0.5 GB on Hopper with CUDA 12's lazy loading) and NCCL's
    # buffers (2 x NCCL_BUFFSIZE of 4 MiB per channel, up to 32 channels, per process group): outside the
    # caching allocator, so not in torchtitan's memory figure
    outside_gb=1.25,
    # context parallelism: PyTorch's ring attention (torch/distributed/tensor/experimental/_attention.py, which
    # torchtitan's context_parallel wraps around scaled_dot_product_attention): the causal sequence in 2 x cp
    # chunks, two per device (load balanced); keys and values rotated by one all-gather (_RotateMethod.ALL_GATHER,
    # the default) under the first step's kernel; each later step's output merged in fp32 (_SDPAMerger,
    # convert_to_f32); backward, the gradients of the keys and values accumulated in fp32 and passed to the next
    # device after every step (the all-to-all rotater)
    ring="allgather",
    ring_grad_bytes=4.0,
    # torchtitan's Llama attention repeats the 8 key/value heads for each of the 4 query heads of their group
    # (torchtitan/models/llama/model.py, repeat_kv) before scaled_dot_product_attention: the ring passes 32 heads
    repeat_kv=True,
    # Float8 (docs/float8.md's recipe, tensorwise scaling): FSDP2 all-gathers the Float8Linear weights in FP8
    # (float8.enable_fsdp_float8_all_gather, cast before gathering), and tensor parallelism all-gathers the
    # products' inputs in FP8 (Float8ColwiseParallel, PrepareFloat8ModuleInput: "by default for Float8Linear")
    float8_gathers=("weights", "inputs"),
    # asynchronous tensor parallelism (parallelism.enable_async_tensor_parallel, compile's async TP since 0.3):
    # torch.compile's micro-pipelining rewrites each all-gather before a product and reduce-scatter after one
    # into pieces beside the product's pieces (torch/_inductor/fx_passes/micro_pipeline_tp.py), so it needs
    # --compile
    tp_overlap_by="asynchronous tensor parallelism",
    tp_overlap_compiled=True,
    # attention: scaled_dot_product_attention under sdpa_kernel([CUDNN_ATTENTION, FLASH_ATTENTION, MATH],
    # set_priority=True) (torchtitan/models/common/attention.py): cuDNN's fused kernel, the device's own figure
    attention_kernel="",
    fitted=("torchtitan 2024-12: 8B, 8 GPUs, FSDP + torch.compile",
            "torchtitan 2024 A100: Llama 3 8B, 64 GPUs, FSDP, local batch 1, selective op"),
))

# June 2025 (the published H200 runs' torchtitan, e7c0cae): today's record, but its attention asked PyTorch for the
# flash backend first on every device before Blackwell (torchtitan/models/attention.py: [FLASH_ATTENTION,
# EFFICIENT_ATTENTION, MATH], cuDNN first on compute capability 10.0 only): FlashAttention-2
TORCHTITAN_2025_06 = register(replace(TORCHTITAN, name="torchtitan@2025-06", title="torchtitan of June 2025",
                                      attention_kernel="fa2"))

# December 2024 (the published H100 benchmark's versions): torch.compile compiles each TransformerBlock, the loss
# stays eager in fp32 (loss, loss_passes) under --compile too; attention is F.scaled_dot_product_attention with
# PyTorch's default order of backends (flash, efficient, math, then cuDNN: aten/src/ATen/native/transformers/cuda/
# sdp_utils.cpp's priority_order of then), and ring attention calls the flash kernel itself: FlashAttention-2
TORCHTITAN_2024_12 = register(replace(TORCHTITAN, name="torchtitan@2024-12", title="torchtitan of December 2024",
                                      compiled_loss=None, compiled_loss_passes=None, attention_kernel="fa2"))
