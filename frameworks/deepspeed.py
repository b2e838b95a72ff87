"""DeepSpeed (Microsoft): ZeRO stages 1 to 3 with mixed-precision Adam on
an eager PyTorch model (a Hugging Face transformer, say), as DeepSpeed 0.19
runs and estimates it.

Checked against (``benchmarks/published.py``): DeepSpeed's own model-state
estimators, ``estimate_zero2_model_states_mem_needs`` (``2P + 18P/N``) and
``estimate_zero3_model_states_mem_needs`` (``4 x largest layer + 18P/N``),
exactly; and, held out, the step times of two Megatron-DeepSpeed runs
(its pipeline engine under Megatron-LM's layers): Megatron-Turing NLG
530B on 2,240 to 3,360 A100s, 21 to 25% fast, and BLOOM 176B on 384,
+10% against its "about 150" TFLOP/s per GPU.  Nothing is fitted.
"""

from __future__ import annotations

from frameworks.base import Framework, States, register

DEEPSPEED = register(Framework(
    name="deepspeed",
    title="DeepSpeed",
    # deepspeed/runtime/zero/stage_1_and_2.py: "GPU's total_params multipliers: 2 = params_16bit, 18 =
    # 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit" (ZeRO-2: 2P + 18P/N);
    # stage3.py: largest_layer_memory + 18P/N (the 16-bit parameters' shard, the fp32 gradients, parameters
    # and moments); stage 1 shards what the optimizer holds (its fp32 gradients, parameters, moments), stage
    # 0 (no ZeRO) keeps the 16-bit copies, fp32 parameters and moments whole
    states=(States((2.0, 0.0), (2.0, 0.0), (12.0, 0.0)),
            States((2.0, 0.0), (2.0, 0.0), (0.0, 16.0)),
            States((2.0, 0.0), (0.0, 6.0), (0.0, 12.0)),
            States((0.0, 2.0), (0.0, 4.0), (0.0, 12.0))),
    moment=4.0,
    # stage 3: the 16-bit parameters and gradients of the modules running, gathered ("largest_layer_memory =
    # 4 * largest_layer_params"); the modules of a block are live together (stage3_max_live_parameters 1e9)
    gathered=4.0,
    staged=(0.0, 0.0),  # ZeRO-3 does not run with pipeline stages
    sequence_parallel="gathered",  # no sequence parallelism of its own (Ulysses splits attention's heads)
    activation_input=False,
    selective="attention",  # deepspeed.checkpointing recomputes whole layers; selective as Megatron-DeepSpeed
    # Hugging Face causal language models upcast the logits: logits.float() then cross_entropy
    loss=(4.0, 8.0),
    loss_split=(4.0, 8.0),  # no vocabulary-parallel loss of its own
    grad_precision="",  # communication_data_type: the model's 16-bit type (deepspeed/runtime/config.py)
    bucket_mb=1000.0,  # reduce_bucket_size 5e8 elements of 2 bytes (deepspeed/runtime/zero/config.py)
    overlap=1.0,  # overlap_comm, on by default with stage 3 (and prefetching its parameters)
    # stages 2 and 3 reduce each micro-batch's gradients into their partitions (deepspeed/runtime/engine.py,
    # allreduce_gradients: "ZeRO stage >= 2 communicates during non gradient accumulation boundaries as well")
    sharded_every_micro_batch=True,
    # its pipeline engine runs one training schedule (deepspeed/runtime/pipe/schedule.py, TrainSchedule: each
    # stage's forward and backward passes alternating after its warm-up, 1F1B), no interleaved model chunks
    schedules=("1f1b",),
    kernels="eager",  # a PyTorch model run eagerly, unless compiled (deepspeed's compile option)
    loss_passes=(18.0, 26.0),  # PyTorch's cross_entropy of fp32 logits, as torchtitan's
    # DeepSpeed's FusedAdam (multi_tensor_adam) over the fp32 partition: reads gradient, parameter, moments
    # (16), writes parameter and moments (12), the 16-bit copy (read 4, write 2), the gradient norm (read 4)
    optimizer_bytes=38.0,
    gather_bytes=2.0,  # gathered 16-bit parameters written into the modules at each gather (forward, backward)
    launch_us=4.0,  # eager PyTorch
    contention=0.0,
    overhead=0.0,  # nothing fitted: no published step time to fit on
    reserve=0.104,  # PyTorch's caching allocator, as torchtitan measures it (frameworks/torchtitan.py)
    outside_gb=1.25,  # CUDA context and NCCL buffers, as the other profiles count them
))
