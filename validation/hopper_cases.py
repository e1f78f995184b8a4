"""Section G of validation/generate_cases.py: the Hopper cases (Megatron-Core's
weak-scaling table, torchtitan's H100 and H200 tables). generate_cases.py
writes them; this file only builds them, with its helpers."""
from generate_cases import TOL_MEMORY, TOL_NOISE, case, gpt, megatron_plan

# G. Hopper. Megatron-Core's weak-scaling table (NVIDIA/Megatron-LM README,
# "Weak Scaling Results", images/model_table.png at d98e8a64; Megatron-Core
# r0.8.0 on H100, the strong-scaling figure names the release): GPT models of
# 1.7B-462B, vocabulary 131,072, sequence 4,096, data-parallel size 48,
# --overlap-grad-reduce --overlap-param-gather (the distributed optimizer),
# --tp-comm-overlap. The table gives per-GPU TFLOP/s as Megatron-Core counts
# them (megatron/training/training.py num_floating_point_operations: 3 passes,
# no recomputation counted): 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) for a GPT of
# FFN 4h; the step time is that count over (TFLOP/s × GPUs). The table's MFU
# column is the same figure over 989 TFLOP/s (41 % for 408.8).
# Not stated, assumed: micro-batch 1, no recomputation, no interleaving (the
# 119B and 462B stages hold 23 and 7 layers, primes), sequence parallelism with
# TP, FP32 gradient reduction, GELU FFN of 4h with biases and dropout, tied
# embeddings (Megatron's defaults), DGX H100 nodes (NVIDIA's Eos).
MCORE_WEAK = ("NVIDIA/Megatron-LM README (d98e8a64), 'Weak Scaling Results', images/model_table.png: Megatron-Core "
              "r0.8.0 on H100, GPT %s (%d heads, hidden %d, %d layers), TP %d PP %d DP 48, %d GPUs, global batch %d, "
              "%.1f TFLOP/s per GPU (MFU %d %%)")
MCORE_WEAK_ROWS = [  # size, heads, hidden, layers, tp, pp, gpus, batch, TFLOP/s, MFU %
    ("1.7b", 16, 2048, 24, 1, 1, 48, 192, 408.8, 41), ("7.1b", 32, 4096, 30, 2, 1, 96, 192, 465.9, 47),
    ("16b", 48, 6144, 32, 4, 1, 192, 192, 489.1, 49), ("32b", 56, 7168, 48, 8, 1, 384, 192, 459.6, 46),
    ("70b", 64, 8192, 84, 8, 2, 768, 384, 419.7, 42), ("119b", 80, 10240, 92, 8, 4, 1536, 768, 420.5, 43),
    ("177b", 96, 12288, 96, 8, 6, 2304, 1152, 432.8, 44), ("314b", 128, 16384, 96, 8, 8, 3072, 1536, 474.4, 48),
    ("462b", 144, 18432, 112, 8, 16, 6144, 3072, 459.9, 47)]
TOL_HOPPER = TOL_NOISE


def mcore_flops(batch, seq, layers, hidden, vocab):
    return 72.0 * batch * seq * layers * hidden ** 2 * (1 + seq / (6.0 * hidden) + vocab / (12.0 * layers * hidden))


def mcore_weak_cases():
    out = []
    for size, heads, h, l, tp, pp, gpus, gbs, tflops, mfu in MCORE_WEAK_ROWS:
        assert tp * pp * 48 == gpus
        assert abs(tflops / 989.0 * 100 - mfu) < 1.0, size
        model = gpt("gpt-" + size, l, h, heads, 4096, vocab=131072,
                    source="Megatron-LM weak-scaling GPT (heads, hidden, layers as printed; FFN 4h, GELU, "
                           "vocabulary 131,072, tied embeddings assumed)")
        plan = megatron_plan(tp, pp, 1, 1, gbs, 4096, "none", tp > 1, "fp32")
        plan.update({"strategy": "zero1", "overlap_grad_reduce": True, "overlap_param_gather": True,
                     "tp_comm_overlap": tp > 1, "pipeline_p2p_sync": False, "flash_attention": True,
                     "fused_loss": True})
        step = mcore_flops(gbs, 4096, l, h, 131072) / (tflops * 1e12 * gpus)
        out.append(case("hopper-mcore-weak-gpt-%s-%dgpu" % (size, gpus), "hopper-megatron-core",
                        MCORE_WEAK % (size.upper(), heads, h, l, tp, pp, gpus, gbs, tflops, mfu), model, "dgx-h100",
                        gpus, plan, "iteration_time_s", round(step, 6), TOL_HOPPER,
                        notes="Step time = 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) / (%.1f TFLOP/s × %d GPUs) = %.4f s. "
                              "Assumed (not stated): micro-batch 1, no recomputation, no interleaving, sequence "
                              "parallelism with TP, FP32 gradient reduction, DGX H100 nodes." % (tflops, gpus, step),
                        stack="megatron-core-te"))
    return out


# torchtitan's H100 and H200 tables. Llama 3.1 8B / 70B (the Llama 3 8B and 70B
# shapes; RoPE scaling changes no FLOP), sequence 8,192 (torchtitan's
# llama3_8b.toml / llama3_70b.toml), FSDP2 (reshard after forward), bf16
# parameters with fp32 gradient reduction (torchtitan's mixed_precision_reduce
# default "float32"), AdamW. Float8 = torchao's tensorwise dynamic scaling
# with the FP8 weight all-gather (hzp's fp8-current with fp8_param_gather;
# the H100 tables do not list the float8 flags: assumed as in the H200 row,
# which gives them). Per-op selective AC is hzp's "selective"; full AC "full".
# The loss: cross_entropy over the logits cast to fp32, eager in December 2024
# (train.py at 9dec370: "compiling loss function causes CUDA errors"; hzp's
# fused_loss false), compiled with the model by June 2025
# (torchtitan/components/loss.py: fused_loss true under torch.compile).
# TPS/GPU: tokens a second over all GPUs (torchtitan divides a data-parallel
# rank's tokens by the non-data-parallel size).
LLAMA3_8B = {"schema_version": 1, "name": "llama3.1-8b",
             "source": "Meta Llama 3.1 8B config.json (huggingface.co/meta-llama/Llama-3.1-8B)",
             "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ffn_hidden": 14336,
             "ffn_activation": "swiglu", "vocab": 128256, "tied_embeddings": False, "norm": "rmsnorm",
             "qk_norm": False, "bias": False, "dropout": False, "position_embedding": "rope", "max_seq_len": 8192,
             "moe": None, "mla": None}
LLAMA3_70B = dict(LLAMA3_8B, name="llama3.1-70b", layers=80, hidden=8192, heads=64, ffn_hidden=28672,
                  source="Meta Llama 3.1 70B config.json (huggingface.co/meta-llama/Llama-3.1-70B)")
TITAN_H100 = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torch 1963fc8, torchao eab345c, "
              "torchtitan 9dec370, 2024-12): Grand Teton H100 96GB HBM2e at 500 W, 400 Gb/s per GPU; %s")
TITAN_ASYNC = ("pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (torch 38410cf9, torchtitan "
               "820504e, 2025-06): Grand Teton H100 96GB HBM2e at 500 W; %s")
TITAN_H200 = ("pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (Trainy on WhiteFiber, torch "
              "2.8.0a0+5228986c39, torchao 0afa4c1, torchtitan e7c0cae, 2025-06): 8 H200 a host, 400 Gb/s (ConnectX-7) "
              "per GPU; %s")


def titan_plan(gpus, tp, local_batch, recompute, fp8, cp=1, seq=8192, async_tp=False, fused_loss=True):
    dp = gpus // (tp * cp)
    plan = megatron_plan(tp, 1, 1, local_batch, dp * local_batch, seq, recompute, tp > 1, "fp32")
    plan.update({"strategy": "fsdp", "cp": cp, "tp_comm_overlap": async_tp, "overlap_grad_reduce": True,
                 "pipeline_p2p_sync": False, "flash_attention": True, "fused_loss": fused_loss,
                 "precision": "fp8-current" if fp8 else "bf16", "fp8_param_gather": fp8})
    return plan


def titan_case(name, source, model, cluster, gpus, plan, tps, compile_, notes, gib=None):
    """The throughput case; with `gib` (the table's Memory(GiB): torchtitan
    logs PyTorch's reserved_bytes.all.peak, the maximum over the GPUs) also
    its memory case, as a list."""
    stack = "torch-fsdp2-compile" if compile_ else "torch-fsdp2"
    c = case(name, "hopper-torchtitan-sharded", source, model, cluster, gpus, plan, "tokens_per_s_per_gpu", tps,
             TOL_HOPPER, notes=notes + " Single reading (the 90th or 100th iteration).", stack=stack)
    if gib is None:
        return [c]
    return [c, case(name + "-memory", "hopper-torchtitan-memory", source, model, cluster, gpus, plan, "reserved_GiB",
                    gib, TOL_MEMORY, notes=notes + " Peak reserved memory, stable over the run (the source).",
                    stack=stack)]


def torchtitan_cases():
    out = []
    # Tables 1 and 3: 8B, FSDP over 8 / 128 GPUs, local batch 2, selective AC.
    for table, gpus, rows in ((1, 8, ((5762, 82.4), (6667, 77.0), (8532, 76.8))),
                              (3, 128, ((5605, 67.0), (6514, 62.0), (8380, 61.8)))):
        for (label, compile_, fp8), (tps, gib) in zip((("FSDP", False, False), ("FSDP + torch.compile", True, False),
                                                       ("FSDP + torch.compile + Float8", True, True)), rows):
            tag = "fp8" if fp8 else ("compile" if compile_ else "eager")
            out.extend(titan_case("hopper-titan-8b-fsdp-%dgpu-%s" % (gpus, tag),
                                  TITAN_H100 % ("Table %d, Llama 3.1 8B, %d GPUs, local batch 2, selective AC: %s "
                                                "%d TPS/GPU, %.1f GiB" % (table, gpus, label, tps, gib)),
                                  LLAMA3_8B, "grand-teton-h100", gpus, titan_plan(gpus, 1, 2, "selective", fp8, fused_loss=False), tps,
                                  compile_, "Per-op selective AC (torchtitan's llama3_8b.toml at 9dec370).", gib))
    # Table 2: 8B, FSDP + CP + compile + Float8, 8 GPUs, local batch 1, full AC.
    for cp, seq, tps, gib in ((1, 32768, 3890, 83.9), (2, 65536, 2540, 84.2), (4, 131072, 1071, 84.0),
                              (8, 262144, 548, 84.5)):
        out.extend(titan_case("hopper-titan-8b-cp%d-seq%dk" % (cp, seq // 1024),
                              TITAN_H100 % ("Table 2, Llama 3.1 8B, 8 GPUs, FSDP %d CP %d, sequence %d, local batch 1, "
                                            "full AC, torch.compile + Float8: %d TPS/GPU, %.1f GiB" % (
                                                8 // cp, cp, seq, tps, gib)),
                              dict(LLAMA3_8B, max_seq_len=seq), "grand-teton-h100", 8,
                              titan_plan(8, 1, 1, "full", True, cp=cp, seq=seq, fused_loss=False), tps, True,
                              "Context parallelism as hzp models it (ring exchange of K and V).", gib))
    # 70B, FSDP 32 x TP 8 on 256 GPUs, local batch 16, full AC, compile: Table 4 (Float8) and the async-TP
    # table (bf16 and Float8 tensorwise; the rowwise rows are not modelled).
    for name, src, fp8, async_tp, tps, gib in (
            ("hopper-titan-70b-tp8-fp8", TITAN_H100 % "Table 4, Llama 3.1 70B, 256 GPUs (FSDP 32, TP 8), local batch "
             "16, full AC, torch.compile + Float8: 2D 829 TPS/GPU, 71.9 GiB", True, False, 829, 71.9),
            ("hopper-titan-70b-tp8-fp8-asynctp", TITAN_H100 % "Table 4: 2D + AsyncTP 876 TPS/GPU, 67.6 GiB", True, True,
             876, 67.6),
            ("hopper-titan-70b-tp8-bf16-2025", TITAN_ASYNC % "Llama3 70B on 256 H100s, FSDP 32, TP 8, torch.compile, "
             "full AC, local batch 16, bfloat16: vanilla TP 597.3 tokens/s", False, False, 597.3, None),
            ("hopper-titan-70b-tp8-bf16-asynctp-2025", TITAN_ASYNC % "the same, bfloat16: async TP 652.4 tokens/s",
             False, True, 652.4, None),
            ("hopper-titan-70b-tp8-fp8-2025", TITAN_ASYNC % "the same, float8 tensorwise: vanilla TP 809.8 tokens/s",
             True, False, 809.8, None),
            ("hopper-titan-70b-tp8-fp8-asynctp-2025", TITAN_ASYNC % "the same, float8 tensorwise: async TP 942.4 "
             "tokens/s", True, True, 942.4, None)):
        out.extend(titan_case(name, src, LLAMA3_70B, "grand-teton-h100", 256,
                              titan_plan(256, 8, 16, "full", fp8, async_tp=async_tp,
                                         fused_loss="2025" in name), tps, True,
                              "Async TP is hzp's tp_comm_overlap.", gib))
    # 8B, FSDP 8 x TP 8 on 64 GPUs, local batch 12, per-op SAC, compile (the async-TP table).
    for tag, fp8, async_tp, tps, label in (("bf16", False, False, 4378, "bfloat16, vanilla TP"),
                                           ("bf16-asynctp", False, True, 4809.4, "bfloat16, async TP"),
                                           ("fp8", True, False, 5078.1, "float8 tensorwise, vanilla TP"),
                                           ("fp8-asynctp", True, True, 5570.1, "float8 tensorwise, async TP")):
        out.extend(titan_case("hopper-titan-8b-tp8-%s-2025" % tag,
                              TITAN_ASYNC % ("Llama3 8B on 64 H100s, FSDP 8, TP 8, torch.compile, per-op SAC, local "
                                             "batch 12, %s: %s tokens/s" % (label, tps)),
                              LLAMA3_8B, "grand-teton-h100", 64, titan_plan(64, 8, 12, "selective", fp8,
                                                                            async_tp=async_tp), tps, True,
                              "Async TP is hzp's tp_comm_overlap."))
    # H200: 8B, FSDP over 32 / 64 GPUs, local batch 2, compile, Float8 with the FP8 all-gather (flags given).
    for nodes, tps, gib in ((4, 10938, 47.96), (8, 10753, 46.97)):
        out.extend(titan_case("hopper-titan-h200-8b-fsdp-%dgpu-fp8" % (8 * nodes),
                              TITAN_H200 % ("Llama 3.1 8B, %d nodes, local batch 2, torch.compile, float8 with "
                                            "enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp, "
                                            "force_recompute_fp8_weight_in_bwd: %d TPS/GPU, %.2f GiB" % (nodes, tps, gib)),
                              LLAMA3_8B, "dgx-h200", 8 * nodes, titan_plan(8 * nodes, 1, 2, "selective", True), tps,
                              True, "llama3_8b.toml's selective (per-op) AC; the fabric (InfiniBand or RoCE) is not "
                                    "stated: dgx-h200's assumed.", gib))
    return out


def hopper_cases():
    return mcore_weak_cases() + torchtitan_cases()
