"""The planner's terms, each the book's formula for one quantity over arrays of candidate
configurations (chapter 27).

:func:`dtbook.plan.model.evaluate` adds these up. Each term takes the :class:`Job` (what
every candidate shares: the model, the accelerator and its links, the batch) and the
:class:`Layouts` (one NumPy array per knob, one entry per candidate) and calls the chapter
function that owns its quantity; ``tests/test_plan_terms.py`` sets every term beside that
function called one configuration at a time.

One optimizer step of ``global_batch`` sequences is ``m = global_batch / (dp * micro_batch)``
micro-batches through a pipeline of ``pp`` stages. For one micro-batch, one pipeline stage
(the slowest rank of the split :func:`dtbook.pipeline_parallel.stage_layers` gives: even,
lighter first and last stages where ``pp * vpp`` does not divide the layers, or Megatron's
``first_stage_layers`` / ``last_stage_layers``; the last also runs the logits and any MTP
module; :func:`slowest_stage`) spends, per layer:

* **compute** (:func:`layer_compute`, :func:`slowest_stage`): every matmul at its per-GPU
  shape (after TP, ``micro_batch * seq / cp`` tokens) timed by
  :func:`dtbook.plan.gemm.matmul_time`, backward twice forward (data and weight gradients).
  The causal attention core, :func:`dtbook.flops.attention_flops` over ``s/cp`` queries with
  the masked half skipped: with a fused (flash) kernel at the kernel's own measured
  throughput (:func:`dtbook.hardware.attention_kernel`, FlashAttention-2's published forward
  and backward figures), backward 2.5 times the forward FLOPs (the kernel recomputes the
  scores); with ``attention="unfused"`` every product as two batched GEMMs (the score matrix
  is materialised and masked afterwards, as in Megatron-LM before FlashAttention, 2021-22).
  With ``dtype="fp8"`` the layers' linear GEMMs run at the measured FP8 ceiling (Transformer
  Engine's FP8 linears), their inputs and output gradients cast and transposed in memory-bound
  kernels (:func:`fp8_cast_bytes`, in the elementwise term); the attention core and the
  logits stay BF16;
* **recompute** (:func:`recompute`): ``"full"`` one more forward of the layers,
  ``"selective"`` one more forward of the attention core (Korthikanti et al. 2022),
  ``"selective-op"`` one more forward of every second matmul (torchtitan's op-level policy);
* **elementwise** (:func:`elementwise`): norms, activations, residual adds, RoPE (and, with
  unfused attention, the softmax and dropout of the ``s x s`` scores) are memory-bound. Each
  op reads its inputs and writes its output in forward; in backward it reads its saved input
  and the output gradient and writes the input gradient (:func:`elementwise_values`). All of
  it at the *measured* HBM bandwidth, BabelStream's Triad
  (:func:`dtbook.hardware.memory_ceiling`: A100 1.70 TB/s of the datasheet's 2.039, H100
  2.97 of 3.35), as the matmuls run at a measured ceiling;
* **TP** (:func:`tp_comm`): :func:`dtbook.tensor_parallel.allreduces_per_layer` ring
  all-reduces of the activation (:func:`dtbook.tensor_parallel.activation_bytes`), 2
  forward and 2 backward (with sequence parallelism an all-gather and a reduce-scatter
  each, the same time), the forward's 2 again with full recompute, on NVLink while the TP
  group fits in a node. *Not overlapped*: Megatron-LM runs them on the compute stream by
  default;
* **collective efficiency**: every collective runs at the link's rate times NCCL's
  protocol efficiency, the published nccl-tests bus bandwidth of a large ring over the line
  rate (:func:`protocol_efficiency`: 0.82 on the H100's NVLink, 0.77 on the A100's, 0.94 on
  InfiniBand). Where a link has a published bus bandwidth *by message size*
  (:func:`dtbook.hardware.busbw_curve`: the A100's NVSwitch), the TP all-reduce runs at the
  rate measured for its size instead
  (:func:`~dtbook.plan.terms.communication._in_node_allreduce`): a 100 MB all-reduce reaches
  about three quarters of what gigabyte buffers do;
* **CP** (:func:`cp_comm`): a ring pass of K and V blocks
  (:func:`dtbook.sequence_parallel.ring_kv_step_bytes`; ``cp - 1`` transfers forward, twice
  that backward, :func:`dtbook.sequence_parallel.ring_kv_transfers` of production CP),
  overlapped with the attention core it feeds; only the excess is exposed;
* **kinds of layer** (:class:`LayerKinds`): attention with
  the projections of :func:`dtbook.flops.block_gemms` (GQA/MQA through the K/V widths; MLA's
  low-rank ``q_down``/``q_up``/``kv_down``/``kv_up``, explicit form) and its core over each
  block's sliding window (:func:`attention_compute`); a dense MLP, or an MoE block's router,
  grouped expert GEMMs of E/ep local experts over their routed tokens (dropless, the busiest
  rank's chapter-18 load, :func:`expert_load_factor`) and shared experts, experts in
  ``dtype`` (FP8 as DeepSeek-V3 runs them; :func:`mlp_compute`). DeepSeek's dense first
  layers are dense blocks. Expert-tensor parallelism: TP with EP over the replicas, or
  Megatron-Core's ETP with MoE parallel folding (``expert_tensor_parallel``);
* **EP** (:func:`ep_comm`): the 4 all-to-alls of the routed tokens per MoE layer (dispatch
  and combine, forward and backward: :func:`dtbook.moe.layer_alltoall_time`), exposed, on
  NVLink while the EP group sits in one node, else its same-node share on NVLink and the
  rest on the NIC at once; with ``moe_dispatcher="deepep"`` a token crosses the network once
  per destination node (:func:`~dtbook.plan.terms.communication._per_node_dispatch_time`),
  and with ``moe_comm_overlap`` only the all-to-alls' excess over a layer's compute is
  exposed (DeepSeek's DualPipe, Megatron's ``--overlap-moe-expert-parallel-comm``), the
  GEMMs then running on the SMs the dispatch kernels leave (:func:`stage_on_free_sms`). The
  token permutation around the dispatch is memory-bound work
  (:func:`moe_elementwise_values`).

And per micro-batch:

* **PP** (:func:`pp_comm`): a send forward and one backward per micro-batch and model chunk
  (:func:`dtbook.pipeline_parallel.p2p_message_bytes`), exposed (Megatron's 1F1B blocks on
  ``send_forward_recv_backward`` and ``send_backward_recv_forward`` between steady-state
  steps). Across nodes each TP rank sends ``1/tp`` of the activation over its own NIC (the
  scatter/gather of Narayanan et al. 2021, Sec. 4.1; sequence parallelism splits it already)
  and, without SP, the receivers all-gather it over NVLink. DeepSpeed's pipeline engine
  (``pipeline_engine="deepspeed"``) splits the activation the same way
  (``PartitionedTensor`` over the tensor-parallel group) but issues its four transfers per
  micro-batch (receive activation, send gradient, send activation, receive gradient) as
  blocking calls one after another (``TrainSchedule``, deepspeed/runtime/pipe/schedule.py):
  four transfer times where Megatron's paired calls take two;
* **gradient accumulation** (:func:`grad_accum`): every micro-batch's weight gradients are
  added into the accumulation buffer (in the reduction's precision: FP32, or FP16 with
  ``dtype="fp16"``). Without fusion that is an elementwise op per parameter per micro-batch:
  the wgrad GEMM writes ``param.grad`` in 16 bits and a hook adds it,
  ``param.main_grad.add_(param.grad.data)`` (Megatron-LM's
  ``DistributedDataParallel._make_param_hook`` since "Bfloat with fp32 grad acc", commit
  b4bc51b, March 2021; BigScience's Megatron-DeepSpeed keeps it): read 2 bytes, read and
  write the accumulator (4 + 4, or 2 + 2 in FP16), for the stage's parameters on the GPU, at
  the measured HBM bandwidth. With ``gradient_accumulation_fusion=True`` (the default) the
  wgrad GEMM accumulates into the FP32 buffer itself (beta = 1): Megatron-LM's
  ``--gradient-accumulation-fusion``, merged on 2022-02-22 (commit 9c5a830, "gradient
  accumulation fusion", on unless ``--no-gradient-accumulation-fusion``; APEX's
  ``fused_weight_gradient_mlp_cuda`` from September 2022, Transformer Engine's linears in
  Megatron-Core). Then it costs only the GEMM's read and write of C, which a compute-bound
  wgrad GEMM hides: nothing is added.

The pipeline runs ``m`` micro-batches in ``(m + (pp - 1) / vpp)`` micro-batch times
(:func:`pipeline`: :func:`dtbook.pipeline_parallel.batch_time`, whose idle share is the
(interleaved) 1F1B bubble). After it:

* **DP** (:func:`dp_comm`): the gradients of the stage's parameters
  (:func:`dtbook.data_parallel.gradient_buffer_bytes`) are reduced over the ``dp * cp``
  replicas (an all-reduce, or with ZeRO >= 1 a reduce-scatter and later an all-gather of the
  updated parameters): on NVLink while the group fits in a node, else on the network through
  the NICs of the group's ``gpus_per_node / tp`` GPUs in each node (its ranks follow TP's),
  up to NVLink's rate (:func:`~dtbook.plan.terms.communication.group_collective_time`,
  :func:`dtbook.mesh.network_ring_beta`; ZeRO-3's gathers and FSDP2's shard group the same).
  Gradients travel in FP32 unless ``dtype="fp16"`` (Megatron-LM accumulates and reduces BF16
  gradients in FP32; Llama 3 reduce-scatters in FP32, Dubey et al. 2024 Sec. 3.3.2);
  parameters in BF16. Overlap rule:
  the reduction runs during the backward of the last micro-batch, bucket by bucket, one
  layer's gradients at a time (chapter 14's :func:`dtbook.data_parallel.
  overlapped_step_time`), so what is exposed is the last bucket when the backward is the
  longer, and the reduction's excess over the backward when it is not. With
  ``overlap_grad_reduce=False`` all of it is exposed: Megatron-LM before its 2023
  DistributedDataParallel reduced the gradients after the whole pipeline
  (``optimizer.reduce_model_grads``, "All-reduce all grads", called from ``train_step`` after
  the forward-backward pass), and DeepSpeed's pipeline engine runs ``ReduceGrads`` after the
  last micro-batch;
* **ZeRO-3** (:func:`zero3_comm`): the parameters are all-gathered before each
  micro-batch's forward and backward, prefetched under compute: only the excess over a
  micro-batch's compute is exposed;
* **optimizer** (:func:`optimizer`): memory-bound, at the measured HBM bandwidth: Adam's
  bytes per local parameter (:func:`dtbook.offload.optimizer_step_bytes` with FP32 main
  gradients: 30), the separate kernel that writes the 16-bit copy reads the FP32 master again
  (4; Megatron's ``_copy_main_params_to_model_params``), the gradient norm for clipping reads
  the FP32 gradients (4 more), and the FP32 gradient buffer of every parameter on the GPU is
  zeroed for the next step (4 per parameter); FP16 gradients are cast to FP32 and unscaled
  first (14 more). Scaling the gradients when the norm exceeds the threshold is left out (it
  happens only on steps that clip).

Memory per GPU: model state from :func:`dtbook.memory.zero_state_bytes` (2 + 4 + 4 + 8 bytes
per parameter with Megatron's FP32 gradient buffer, 2 + 2 + 4 + 12 with FP16 gradients and
their FP32 copy; sharded by ZeRO over ``dp * cp``; :func:`state_memory`), activations per layer
from :func:`dtbook.activations.activation_breakdown` (flash attention, no dropout) times the
micro-batches in flight of :func:`dtbook.pipeline_parallel.activations_in_flight`, and the
FP32 logits on the last stage; the larger of the first and last stage
(:func:`activation_memory`); and what the software stack takes beside the model
(:func:`framework_memory`: :func:`dtbook.memory.framework_bytes`, the driver's reserve, the
CUDA context and NCCL's buffers of each communicator).

Assumptions stated once: BF16 values on the wire, FP32 master weights and Adam moments, every
collective a ring (:mod:`dtbook.comm`, ``links="switched"``), TP innermost then CP, EP, PP,
DP across nodes, one NIC per GPU (or, with ``node=``, the named node's links, its NICs
shared by its GPUs when it has fewer: :func:`links_for`). No constant is fitted to any
published run. The terms take arrays :func:`dtbook.plan.estimate` and
:func:`dtbook.plan.search` have already checked, and check nothing themselves.
"""

from __future__ import annotations

from .job import (COLUMNS, links_for, protocol_efficiency, Job, Layouts, Seconds, LayerCompute,
    Stage, LayerKinds, DEEPEP_SMS, default_comm_sms, VALUE, MAIN_GRAD)
from .compute import (attention_compute, expert_load_factor, mlp_compute, layer_compute,
    stage_on_free_sms, recompute, model_flops, _expert_layout, _op_matmuls, _op_recomputed)
from .memory_bound import (elementwise_values, moe_elementwise_values, elementwise, fp8_cast_bytes,
    grad_accum, optimizer)
from .footprint import (params_per_gpu, expert_replicas, state_memory, activation_memory,
    communicators, framework_memory)
from .communication import (tp_comm, cp_comm, ep_comm, pp_comm, dp_comm, zero3_comm,
    _alltoall_per_moe_layer)
from .fsdp2 import (DATA_PARALLEL_ENGINES, fsdp2_units, fsdp2_comm, fsdp2_collectives, fsdp2_memory,
    check_data_parallel)
from .stages import pipeline, splits, slowest_stage

__all__ = ["COLUMNS", "links_for", "protocol_efficiency", "Job", "Layouts", "Seconds",
           "LayerCompute", "Stage", "LayerKinds", "DEEPEP_SMS", "default_comm_sms",
           "attention_compute", "expert_load_factor", "mlp_compute", "layer_compute",
           "stage_on_free_sms", "recompute", "model_flops", "elementwise_values",
           "moe_elementwise_values", "elementwise", "fp8_cast_bytes", "grad_accum", "optimizer",
           "params_per_gpu", "expert_replicas", "state_memory", "activation_memory",
           "communicators", "framework_memory", "tp_comm", "cp_comm", "ep_comm", "pp_comm",
           "dp_comm", "zero3_comm", "DATA_PARALLEL_ENGINES", "fsdp2_units", "fsdp2_comm",
           "fsdp2_collectives", "fsdp2_memory", "check_data_parallel", "pipeline", "splits",
           "slowest_stage"]
