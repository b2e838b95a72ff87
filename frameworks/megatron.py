"""Megatron-LM (NVIDIA): tensor, sequence and pipeline parallelism with
mixed-precision Adam, as Shoeybi et al. (2019), Narayanan et al. (SC'21)
and Korthikanti et al. ("Reducing Activation Recomputation in Large
Transformer Models", 2022) describe it and Megatron-LM's code runs it.

Checked against (``benchmarks/published.py``): Korthikanti et al.'s
activation memory per layer (their Table 2, term by term), their Table 5
step times (22B, 175B, 530B, 1T; full recomputation, and selective
recomputation with sequence parallelism), the fit of their 1T
configuration in 80 GB, and Narayanan et al.'s Table 1, and Megatron
Bridge's and the Megatron-MoE Model Zoo's runs on H100s and B200s.
Nothing is fitted on the papers' rows: every figure below is the
framework's or its paper's, but the caching allocator's reserve,
PyTorch's as torchtitan's benchmark shows it, and two constants fitted
on one row each: ``overhead_by_arch`` (Blackwell's share of time lost, on
Megatron Bridge's Llama 3 8B run on 8 B200s) and ``moe_host_ms`` (the
host's time a dropless expert layer waits on, on the Megatron-MoE Model
Zoo's Qwen3-235B-A22B at TP 4 x PP 8 x EP 8); every other row is held
out.
"""

from __future__ import annotations

from frameworks.base import Framework, States, register

MEGATRON = register(Framework(
    name="megatron",
    title="Megatron-LM",
    # Model states (Megatron-LM's distributed optimizer documentation, docs/source/api-guide/dist_optimizer.md:
    # "bytes per parameter: 18 = 2 (bf16 param) + 4 (fp32 grad) + 4 (fp32 main param) + 8 (Adam)", and with
    # --use-distributed-optimizer "6 + 12/d"); stages 2 and 3 as Megatron-Core's fully sharded data parallel
    # shards them (--data-parallel-sharding-strategy optim_grads, optim_grads_params).
    states=(States((2.0, 0.0), (4.0, 0.0), (12.0, 0.0)),
            States((2.0, 0.0), (4.0, 0.0), (0.0, 12.0)),
            States((2.0, 0.0), (0.0, 4.0), (0.0, 12.0)),
            States((0.0, 2.0), (0.0, 4.0), (0.0, 12.0))),
    moment=4.0,  # Adam's moments in fp32 (megatron/core/optimizer: main params and states in fp32)
    # stage 3: a block's bf16 weights gathered, and the next block's prefetched, and its bf16 gradients
    gathered=6.0,
    # Korthikanti et al. section 4.2.2: under sequence parallelism the input of a column-parallel product is
    # stored sharded over the sequence and all-gathered again in the backward pass (overlapped with the
    # input-gradient product); megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication
    staged=(0.0, 0.0),  # Megatron-Core's sharded data parallelism gathers per micro-batch
    sequence_parallel="shard",
    # Korthikanti et al. section 4.1 (Table 2's "GeLU input 8sbh"): the bias-GeLU fusion keeps its input for the
    # backward pass (megatron/core/fusions/fused_bias_gelu.py)
    activation_input=True,
    # Megatron Core's grouped experts multiply each copy by its routing weight in the activation
    # (megatron/core/transformer/moe/experts.py: weighted_bias_swiglu_impl, activation_func_with_probs; the
    # activation already keeps its input), and the tokens' unpermutation sums the results unweighted: the combine
    # keeps no expert output for the weights' gradient
    expert_weights="activation",
    selective="attention",  # Korthikanti et al. section 5: the attention core (QK^T, softmax, dropout, over V)
    # --recompute-granularity selective re-runs the modules --recompute-modules names, by default the attention core
    # (megatron/core/transformer/transformer_config.py: recompute_modules = ["core_attn"]); the layer's norms
    # (TransformerLayer: input_layernorm and pre_mlp_layernorm where they are no IdentityOp, fused into the next
    # linear layer) and the experts' activation (experts.py: moe_act, which needs --moe-grouped-gemm) too
    recompute_modules=("core_attn",),
    recompute_modules_by="--recompute-modules",
    # the vocabulary-parallel cross-entropy runs in fp32 (megatron/core/tensor_parallel/cross_entropy.py: the
    # softmax is kept in fp32 for the backward pass and turned into the gradient in place; the bf16 gradient
    # handed back is 2 bytes)
    loss=(4.0, 2.0),
    loss_split=(4.0, 2.0),  # the same kernel, its sums all-reduced over the tensor-parallel group
    grad_precision="fp32",  # --accumulate-allreduce-grads-in-fp32 (megatron/training/arguments.py, on with bf16)
    # the main gradients' buffer is of the precision they are reduced in: fp32, or the training precision's
    # without --accumulate-allreduce-grads-in-fp32 (megatron/core/distributed/param_and_grad_buffer.py:
    # grad_dtype = torch.float if ddp_config.grad_reduce_in_fp32 else param_dtype)
    grad_buffer=True,
    # DistributedDataParallelConfig.bucket_size: max(40,000,000, 1,000,000 x dp) parameters; 40 M fp32 gradients
    bucket_mb=160.0,
    overlap=0.0,  # DistributedDataParallelConfig.overlap_grad_reduce is off unless --overlap-grad-reduce
    # but Megatron-FSDP (ZeRO 2 and 3) turns both overlaps on: its weights' all-gathers under the passes and its
    # gradients' reduce-scatters under the backward pass (megatron_fsdp.py: optim_grads_params sets
    # overlap_param_gather, and sharded gradients require overlap_grad_reduce)
    sharded_overlap=1.0,
    # and reduce-scatters them after every micro-batch's backward pass (megatron_fsdp.py: grad_reduce_every_bprop
    # for optim_grads and optim_grads_params; only no_shard and optim wait for the last micro-batch)
    sharded_every_micro_batch=True,
    # fused kernels: apex/Transformer Engine layer norm, bias-GeLU, scaled masked softmax, bias-dropout-add
    # (megatron/core/fusions): one kernel per operator
    kernels="fused",
    # the fp32 cross-entropy: logits to fp32 (read 2, write 4), max, subtract, exp, sum, divide in place (five
    # passes of 4 bytes read and four written), the target logit; backward: the softmax less the one-hot,
    # scaled, in place (read 4, write 4, twice), to bf16 (read 4, write 2)
    loss_passes=(42.0, 22.0),
    # apex FusedAdam over the fp32 main parameters (megatron/core/optimizer/optimizer.py): reads the gradient,
    # main parameter and both moments (16 bytes), writes the parameter and the moments (12), copies the main
    # parameter to bf16 (read 4, write 2), the gradient norm for clipping (read 4) and zeroing the gradient
    # buffer (write 4)
    optimizer_bytes=42.0,
    gather_bytes=2.0,  # the gathered bf16 weights written into their buffers at each gather (forward, backward)
    launch_us=0.0,  # fused kernels of large tensors: launches hide behind the kernels before them
    # its collectives do not run under computation by default (overlap 0), but for the inputs gathered again
    # under sequence parallelism, which Korthikanti et al. report hidden
    contention=0.0,
    # layers that do not divide over the pipeline's model chunks: the embedding and the loss counted as a layer each
    # (--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split; Megatron Bridge's Llama 3.1
    # 405B recipes set both: its 126 layers and the two make 8 stages of 16)
    pipeline_split="embedding_loss",
    # megatron/core/pipeline_parallel/schedules.py: forward_backward_pipelining_without_interleaving (1F1B) and
    # forward_backward_pipelining_with_interleaving; no schedule runs all forward passes before the backward ones
    schedules=("1f1b", "interleaved"),
    # a mixture of experts with tensor parallelism needs sequence parallelism (megatron/core/transformer/moe/
    # moe_layer.py refuses it without); the experts' own tensor-parallel degree is free (parallel folding)
    experts="megatron",
    overhead=0.0,  # nothing fitted before Blackwell: Korthikanti et al.'s and Narayanan et al.'s step times are checks
    # fitted: Megatron Bridge 25.11's Llama 3 8B FP8 run on a DGX B200 (data parallel 8, micro-batch 2, its recipe's
    # bf16 gradients reduced under the backward pass: 30,624 tokens/s per GPU, against 34,881 priced with the b200
    # preset's Hopper efficiencies: 0.139). Blackwell's FP8 products reach less of the data sheet's peak than
    # Hopper's do (both B200 rows run FP8; bf16 runs on Blackwell take the same figure, unchecked); the same
    # summary's 405B run on 128 B200s is held out
    overhead_by_arch=(("blackwell", 0.139),),
    # a token-dropless expert layer's dispatcher copies the tokens per expert to the host and waits for them
    # (megatron/core/transformer/moe/token_dispatcher.py: the all-to-all's splits and the grouped products'
    # m_splits), so the host launches each layer's kernels with the device's queue drained (frameworks/host.py).
    # fitted: the Megatron-MoE Model Zoo's Qwen3-235B-A22B on 256 H100s at TP 4 x PP 8 (VP 4) x EP 8 (29.0 s a step,
    # against 14.6 s priced at the devices' pace: 9.22 ms of host per layer and micro-batch of 1,024 tokens a
    # device); its TP 2 x EP 32 run (11.6 ms of device time a layer, above it) and Megatron Bridge's
    # Qwen3-30B-A3B are held out
    moe_host_ms=9.22,
    fitted=("Megatron Bridge: Llama 3 8B, B200, DP 8, FP8 (25.11)",
            "Megatron-MoE Model Zoo: Qwen3-235B-A22B, 256 GPUs, TP 4 x PP 8 (VP 4) x EP 8, ETP 1, DeepEP"),
    # Float8 (--fp8-format, Transformer Engine's linear layers): a layer keeps the FP8 cast of its input for the
    # weight-gradient product, not the bf16 input (transformer_engine/pytorch/module/linear.py and
    # layernorm_linear.py save the quantized input; under sequence parallelism its local shard, gathered again
    # for the backward pass)
    float8_saved=1.0,
    # --tp-comm-overlap (Transformer Engine's userbuffers, with sequence parallelism): the all-gather before a
    # column-parallel product and the reduce-scatter after a row-parallel one split into pieces run beside the
    # product's pieces (megatron/core/extensions/transformer_engine.py, ub_overlap_ag / ub_overlap_rs)
    tp_overlap_by="--tp-comm-overlap",
    # --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep (megatron/core/transformer/moe/
    # token_dispatcher.py, MoEFlexTokenDispatcher): DeepEP's internode kernels send a token once to each node
    # holding one of its experts (RDMA) and forward it inside the node (NVLink)
    deepep_by="--moe-flex-dispatcher-backend deepep",
    # PyTorch's caching allocator as torchtitan's benchmark shows it (frameworks/torchtitan.py, fitted there):
    # the same allocator under Megatron-LM
    reserve=0.104,
    # the CUDA context with its loaded kernels (about 0.5 GB on Hopper with CUDA 12's lazy loading) and NCCL's
    # buffers: 2 x NCCL_BUFFSIZE (4 MiB) per channel, up to 32 channels, for each of the tensor-, data- and
    # pipeline-parallel groups (about 0.25 GB each)
    outside_gb=1.25,
))
