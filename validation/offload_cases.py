"""Section H of validation/generate_cases.py: parameter offload (ZeRO-Infinity
style, DeepSpeed's offload_param). generate_cases.py writes the cases; this
file only builds them, with its helpers."""
from generate_cases import TOL_NOISE, case, megatron_plan

# H. Open-Llama's throughput table (s-JoL/Open-Llama README.md at 0157b69,
# "[2023.5.8] Release v2.1"): Hugging Face Transformers models trained with
# Accelerate and DeepSpeed on A100-80GB, sequence 2,048 (configs/
# pretrain_config.yaml), bf16, activation checkpointing, tokens per second per
# GPU: Open-Llama 65B under ZeRO-3 with Offload = True, 369, and 33B under
# ZeRO-3 without offload, 708, both at "Batch Size" 12. The 65B run's offload
# is configs/accelerate_configs/ds_stage3_offload.yaml: offload_param_device
# cpu and offload_optimizer_device cpu. The author puts it on 48 A100-80GB in
# 6 nodes (issue #60); the 33B run's GPU count is not stated (48 assumed).
# Assumed, not stated: "Batch Size" is the per-GPU micro-batch (the table's
# 7B row gives 2, pretrain_config.yaml's train_batch_size, beside
# gradient_accumulation_steps 12, kept here); full recomputation (Transformers'
# gradient checkpointing recomputes each layer); DGX A100 nodes (eight 200 Gb/s
# NICs; the README names no network); bf16 gradient reduction. The models:
# configs/model_configs/{33B,65B}.json (Llama shapes with full multi-head
# attention, SwiGLU, RMSNorm, RoPE, dropout 0.1, untied vocabulary of 68,762;
# xformers' memory-efficient attention). Step time = tokens a step over
# (tokens/s/GPU x GPUs). The pair's ratio is what the offload checks: the
# same stack and cluster with and without it, models of 65B and 33B.
OPEN_LLAMA = ("s-JoL/Open-Llama README.md (0157b69), 'Release v2.1' table: Open-Llama %s, DeepSpeed stage 3, "
              "offload %s, activation checkpointing, batch size 12, %d tokens/s/GPU%s")
OPEN_LLAMA_ROWS = [  # size, layers, hidden, heads, ffn, offload, tokens/s/GPU
    ("65b", 80, 8192, 64, 22016, True, 369), ("33b", 60, 6656, 52, 17920, False, 708)]
GPUS, MICRO_BATCH, ACCUMULATION, SEQ = 48, 12, 12, 2048


def open_llama_model(size, layers, hidden, heads, ffn):
    return {"schema_version": 1, "name": "open-llama-" + size,
            "source": "s-JoL/Open-Llama configs/model_configs/%s.json @0157b69" % size.upper(),
            "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": heads, "head_dim": hidden // heads,
            "ffn_hidden": ffn, "ffn_activation": "swiglu", "vocab": 68762, "tied_embeddings": False,
            "norm": "rmsnorm", "qk_norm": False, "bias": False, "dropout": True,
            "position_embedding": "rope", "max_seq_len": SEQ, "moe": None, "mla": None}


def offload_cases():
    out = []
    sequences = MICRO_BATCH * GPUS * ACCUMULATION
    for size, layers, hidden, heads, ffn, offload, tgs in OPEN_LLAMA_ROWS:
        plan = megatron_plan(1, 1, 1, MICRO_BATCH, sequences, SEQ, "full", False, "bf16")
        plan.update({"strategy": "fsdp", "overlap_grad_reduce": True, "pipeline_p2p_sync": False,
                     "flash_attention": True, "offload_params": offload, "offload_optimizer": offload})
        step = sequences * SEQ / (tgs * GPUS)
        where = " (48 A100-80GB in 6 nodes: the author, issue #60)" if offload else " (GPU count not stated)"
        out.append(case("openllama-%s-zero3%s-48gpu" % (size, "-offload" if offload else ""), "offload",
                        OPEN_LLAMA % (size.upper(), "True" if offload else "False", tgs, where),
                        open_llama_model(size, layers, hidden, heads, ffn), "dgx-a100", GPUS, plan,
                        "iteration_time_s", round(step, 3), TOL_NOISE,
                        notes="Step time = %d sequences x %d tokens / (%d tokens/s/GPU x %d GPUs) = %.1f s. Assumed "
                              "(not stated): micro-batch 12 and 12 accumulation steps, full recomputation, DGX A100 "
                              "nodes, bf16 gradient reduction%s." % (sequences, SEQ, tgs, GPUS, step,
                                                                    "" if offload else ", 48 GPUs"),
                        stack="deepspeed-zero"))
    return out
