// Step graph: GEMM shapes, FLOP totals against the model-FLOPs formula, and
// activation memory against Korthikanti et al. 2022.
#include "models/step_graph.hpp"

#include <gtest/gtest.h>
#include <algorithm>

namespace hzp::models {
namespace {

double matmul_flops(const StepGraph& g, bool include_recompute) {
  double f = 0;
  for (const auto& u : g.units) {
    for (const auto* list : {&u.forward, &u.backward}) {
      for (const auto& op : *list) {
        if (op.phase == Phase::Recompute && !include_recompute) continue;
        if (op.kind == core::ComputeKind::Gemm || op.kind == core::ComputeKind::Attention) f += op.flops.count();
      }
    }
  }
  return f;
}

TEST(StepGraph, LlamaGemmShapes) {
  ModelSpec m = load_model("llama3-8b");
  GraphOptions o{.seq_len = 8192, .micro_batch = 2};
  StepGraph g = build_step_graph(m, o);
  ASSERT_EQ(g.units.size(), 34u);  // embedding, 32 layers, head
  const Unit& l0 = g.units[1];
  const GraphOp& qkv = l0.forward[1];
  EXPECT_EQ(qkv.name, "l0.qkv");
  EXPECT_EQ(*qkv.gemm, (core::GemmShape{16384, (32 + 2 * 8) * 128, 4096, 1}));
  EXPECT_DOUBLE_EQ(qkv.flops.count(), 2.0 * 16384 * 6144 * 4096);
  // Backward: dgrad (m, k, n) then wgrad (k, n, m), in reverse forward order.
  auto find = [&](const std::string& name) {
    auto it = std::find_if(l0.backward.begin(), l0.backward.end(), [&](const GraphOp& op) { return op.name == name; });
    EXPECT_NE(it, l0.backward.end()) << name;
    return it;
  };
  auto dgrad = find("l0.qkv.dgrad");
  auto wgrad = find("l0.qkv.wgrad");
  EXPECT_EQ(wgrad, dgrad + 1);
  EXPECT_EQ(l0.backward.back().name, "l0.attn_norm.bwd");
  const GraphOp& last_dgrad = *dgrad;
  const GraphOp& last_wgrad = *wgrad;
  EXPECT_EQ(*last_dgrad.gemm, (core::GemmShape{16384, 4096, 6144, 1}));
  EXPECT_EQ(*last_wgrad.gemm, (core::GemmShape{4096, 6144, 16384, 1}));
  EXPECT_EQ(last_wgrad.phase, Phase::BackwardWeight);
}

// With unfused attention every FLOP is a GEMM of full size, so forward plus
// backward must equal the model-FLOPs formula exactly.
TEST(StepGraph, UnfusedFlopsEqualModelFormula) {
  for (const char* name : {"llama3-8b", "gpt3-175b", "mixtral-8x7b", "deepseek-v3"}) {
    ModelSpec m = load_model(name);
    GraphOptions o{.seq_len = 4096, .micro_batch = 1, .flash_attention = false};
    StepGraph g = build_step_graph(m, o);
    double expect = model_flops_per_sequence(m, 4096).count();
    EXPECT_NEAR(matmul_flops(g, false), expect, 1e-9 * expect) << name;
  }
}

// Fused attention skips the causal half forward and recomputes scores in
// backward: attention executes 0.5 · (1 + 2.5) = 1.75 of one full forward pass
// instead of 3.
// The loss over T tokens and V/t logits each, bf16 logits (e = 2): fused, one
// kernel of (2 + 4)·T·V/t bytes forward and twice that backward; Megatron's
// eager kernels, (2+4) + 4 + 8 + 8 + 4 + 8 = 38 bytes a logit forward and
// 8 + (4+2) = 14 backward.
TEST(StepGraph, LossBytesFusedAndUnfused) {
  ModelSpec m = load_model("gpt3-175b");
  GraphOptions o{.seq_len = 2048, .micro_batch = 2, .tp = 8};
  const auto logits = static_cast<double>(2 * 2048 * (m.vocab / 8));  // the vocabulary shard rounds down
  const auto loss_bytes = [](const std::vector<GraphOp>& ops) {
    double b = 0;
    for (const auto& op : ops) {
      if (op.kind == core::ComputeKind::Loss) b += static_cast<double>(op.bytes.count());
    }
    return b;
  };
  const Unit fused = build_step_graph(m, o).units.back();
  EXPECT_EQ(fused.name, "head");
  EXPECT_DOUBLE_EQ(loss_bytes(fused.forward), 6 * logits);
  EXPECT_DOUBLE_EQ(loss_bytes(fused.backward), 12 * logits);
  o.fused_loss = false;
  const Unit eager = build_step_graph(m, o).units.back();
  EXPECT_DOUBLE_EQ(loss_bytes(eager.forward), 38 * logits);
  EXPECT_DOUBLE_EQ(loss_bytes(eager.backward), 14 * logits);
  EXPECT_EQ(eager.forward.size(), fused.forward.size() + 5);
}

// What the unfused loss's backward holds beside its saved fp32
// probabilities: nothing under Megatron's in-place cross-entropy; two fp32
// gradients of the logits under PyTorch's (8 bytes a logit), three more
// under loss parallelism (12 bytes a logit of the shard).
TEST(StepGraph, UnfusedLossWorkingMemory) {
  ModelSpec m = load_model("llama3-8b");  // vocabulary 128,256 (divisible by 8)
  GraphOptions o{.seq_len = 8192, .micro_batch = 2, .fused_loss = false};
  const std::int64_t T = 2 * 8192;
  EXPECT_EQ(build_step_graph(m, o).units.back().backward_working.count(), 0);
  o.unfused_loss = core::UnfusedLoss::TorchCrossEntropy;
  const Unit head = build_step_graph(m, o).units.back();
  EXPECT_EQ(head.backward_working.count(), 8 * T * 128256);
  EXPECT_EQ(head.activations.count(), 2 * T * 4096 * 2 + 4 * T * 128256);  // norm and GEMM inputs, probabilities
  o.tp = 8;
  EXPECT_EQ(build_step_graph(m, o).units.back().backward_working.count(), 12 * T * (128256 / 8));
  o.fused_loss = true;
  EXPECT_EQ(build_step_graph(m, o).units.back().backward_working.count(), 0);
}

// torchtitan's per-op policy on a Llama-3 8B layer (h 4096, 32 heads and 8
// KV heads of 128, FFN 14,336; T = 2 x 8,192 tokens, bf16): the layer input
// (4,096), q (4,096), v (1,024), the attention output (4,096), the gate
// (14,336) and the down projection's output (4,096) kept, 31,744 elements
// a token, plus the fp32 log-sum-exp of 32 heads (128 bytes a token).
TEST(StepGraph, OpLevelSelectivePolicyKeepsEveryOtherMatmulOutput) {
  ModelSpec m = load_model("llama3-8b");
  GraphOptions o{.seq_len = 8192, .micro_batch = 2, .recompute = Recompute::Selective};
  o.selective = core::SelectivePolicy::EveryOtherMatmul;
  const std::int64_t T = 2 * 8192;
  EXPECT_EQ(layer_activation_bytes(m, 0, o).count(), T * (2 * 31744 + 128));
  // Sequence parallelism over 8: h-sized tensors on T/8 tokens, heads and
  // the FFN split 8 ways, the two reduce-scattered outputs kept too; the
  // down projection's output is the full-width partial sum before its
  // reduce-scatter.
  o.tp = 8;
  EXPECT_EQ(layer_activation_bytes(m, 0, o).count(),
            2 * (T / 8) * 4096 + 2 * T * (512 + 128 + 512) + 4 * 2 * 4 * 8192 + 2 * T * (1792 + 4096) +
                2 * 2 * (T / 8) * 4096);
}

// The op-level policy runs a layer's two sequence-parallel all-gathers again
// in its recomputation (their outputs are not kept; the reduce-scatters'
// are): e·T·h bytes each, T = 2 x 8,192 tokens, h = 4,096. Megatron's
// policy recomputes no collective.
TEST(StepGraph, OpLevelPolicyRecomputesTheSequenceParallelAllGathers) {
  ModelSpec m = load_model("llama3-8b");
  GraphOptions o{.seq_len = 8192, .micro_batch = 2, .recompute = Recompute::Selective, .tp = 8};
  const auto recomputed_collectives = [&] {
    std::vector<GraphOp> out;
    const StepGraph g = build_step_graph(m, o);
    for (const auto& op : g.units[1].backward) {
      if (op.phase == Phase::Recompute && op.collective) out.push_back(op);
    }
    return out;
  };
  o.selective = core::SelectivePolicy::EveryOtherMatmul;
  const std::vector<GraphOp> ags = recomputed_collectives();
  ASSERT_EQ(ags.size(), 2u);
  for (const GraphOp& op : ags) {
    EXPECT_EQ(*op.collective, core::CollectiveKind::AllGather);
    EXPECT_EQ(op.bytes.count(), 2 * 2 * 8192 * 4096);
  }
  o.selective = core::SelectivePolicy::CoreAttention;
  EXPECT_TRUE(recomputed_collectives().empty());
}

TEST(StepGraph, MegatronSoftmaxFusionRules) {
  // Causal kernel: batches per block 4 above 128 keys, 8 up to 128.
  EXPECT_TRUE(fused_softmax_available(4, 2048));
  EXPECT_FALSE(fused_softmax_available(6, 2048));
  EXPECT_FALSE(fused_softmax_available(4, 128));
  EXPECT_TRUE(fused_softmax_available(8, 128));
  EXPECT_FALSE(fused_softmax_available(8, 16));   // 16 < s
  EXPECT_TRUE(fused_softmax_available(8, 4096));  // s <= 4096
  EXPECT_FALSE(fused_softmax_available(8, 8192));
  EXPECT_FALSE(fused_softmax_available(8, 1026));  // s a multiple of 4
}

TEST(StepGraph, SoftmaxFallsBackToEagerFp32) {
  // GPT-3 175B has 96 heads: over TP 8, 12 a rank, so micro-batch 1 fuses;
  // over TP 32, 3 a rank: micro-batch 1 falls back, 4 fuses again.
  ModelSpec m = load_model("gpt3-175b");
  GraphOptions o{.seq_len = 2048, .micro_batch = 1, .flash_attention = false, .tp = 32};
  const auto softmax = [](const std::vector<GraphOp>& ops) {
    std::pair<double, int> bytes_kernels{0, 0};
    for (const auto& op : ops) {
      if (op.name.find("attn_softmax") != std::string::npos) {
        bytes_kernels.first += static_cast<double>(op.bytes.count());
        ++bytes_kernels.second;
      }
    }
    return bytes_kernels;
  };
  const double scores = 1.0 * 3 * 2048 * 2048;  // micro-batch × heads a rank × s²
  const Unit eager = build_step_graph(m, o).units[1];
  EXPECT_EQ(softmax(eager.forward), std::pair(36 * scores, 5));   // 6 + 8 + 8 + 8 + 6 bytes an element
  EXPECT_EQ(softmax(eager.backward), std::pair(40 * scores, 5));  // 6 + 8 + 8 + 12 + 6
  // Backward order: the cast back first, the cast up last.
  std::vector<std::string> bwd;
  for (const auto& op : eager.backward) {
    if (op.name.find("attn_softmax") != std::string::npos) bwd.push_back(op.name);
  }
  EXPECT_EQ(bwd.front(), "l0.attn_softmax.cast_back.bwd");
  EXPECT_EQ(bwd.back(), "l0.attn_softmax.cast.bwd");
  // Selective recomputation recomputes the five forward kernels.
  o.recompute = Recompute::Selective;
  int recomputed = 0;
  const StepGraph selective = build_step_graph(m, o);
  for (const auto& op : selective.units[1].backward) {
    recomputed += op.phase == Phase::Recompute && op.name.find("attn_softmax") != std::string::npos;
  }
  EXPECT_EQ(recomputed, 5);
  o.recompute = Recompute::None;
  o.micro_batch = 4;
  const Unit fused = build_step_graph(m, o).units[1];
  EXPECT_EQ(softmax(fused.forward), std::pair(4 * 4 * scores, 1));  // read and write 2 bytes
  EXPECT_EQ(softmax(fused.backward), std::pair(8 * 4 * scores, 1));
  // Without recomputation the eager path keeps the fp32 probabilities, 2
  // bytes an element more than the fused kernel's output; everything else in
  // a layer's activations scales with the micro-batch.
  o.micro_batch = 1;
  const double eager_act = static_cast<double>(layer_activation_bytes(m, 0, o).count());
  o.micro_batch = 4;
  const double fused_act = static_cast<double>(layer_activation_bytes(m, 0, o).count());
  EXPECT_DOUBLE_EQ(fused_act - 4 * eager_act, 4 * (2 - 4) * scores);
}

TEST(StepGraph, FlashAttentionFlops) {
  ModelSpec m = load_model("llama3-8b");
  const double s = 8192;
  StepGraph g = build_step_graph(m, GraphOptions{.seq_len = 8192, .micro_batch = 1});
  double full_fwd_attention = 32 * 2 * 32 * s * s * 256;
  double expect = model_flops_per_sequence(m, 8192).count() - 3 * full_fwd_attention + 1.75 * full_fwd_attention;
  EXPECT_NEAR(matmul_flops(g, false), expect, 1e-9 * expect);
}

TEST(StepGraph, FullRecomputeRepeatsForward) {
  ModelSpec m = load_model("llama3-8b");
  GraphOptions o{.seq_len = 2048, .micro_batch = 1, .recompute = Recompute::Full};
  StepGraph g = build_step_graph(m, o);
  StepGraph plain = build_step_graph(m, GraphOptions{.seq_len = 2048, .micro_batch = 1});
  double fwd_layers = 0;
  for (const auto& u : plain.units) {
    if (u.kind != UnitKind::Layer) continue;
    for (const auto& op : u.forward) {
      if (op.kind == core::ComputeKind::Gemm || op.kind == core::ComputeKind::Attention) fwd_layers += op.flops.count();
    }
  }
  EXPECT_NEAR(matmul_flops(g, true) - matmul_flops(plain, true), fwd_layers, 1e-9 * fwd_layers);
  EXPECT_EQ(g.units[1].activations.count(), 2 * 2048 * 4096);  // layer input only
  // During backward the recomputed activations are back: the no-recompute total.
  EXPECT_EQ((g.units[1].activations + g.units[1].recomputed).count(), plain.units[1].activations.count());
  EXPECT_EQ(plain.units[1].recomputed.count(), 0);
}

// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", eq. (1) and selective recomputation: per layer,
// s·b·h·(34 + 5·a·s/h) bytes, and s·b·h·34 when core attention is recomputed.
TEST(StepGraph, Gpt3ActivationsMatchKorthikanti) {
  ModelSpec m = load_model("gpt3-175b");
  const std::int64_t s = 2048, b = 1, h = 12288, a = 96;
  GraphOptions none{.seq_len = s, .micro_batch = b, .recompute = Recompute::None, .flash_attention = false};
  GraphOptions selective = none;
  selective.recompute = Recompute::Selective;
  EXPECT_EQ(layer_activation_bytes(m, 0, none).count(), s * b * h * 34 + 5 * a * s * s * b);
  EXPECT_EQ(layer_activation_bytes(m, 0, selective).count(), s * b * h * 34);
  // Per micro-batch of 4 sequences it scales with b.
  none.micro_batch = 4;
  EXPECT_EQ(layer_activation_bytes(m, 0, none).count(), s * 4 * h * 34 + 5 * a * s * s * 4);
}

// Korthikanti et al. 2022, Table 2: with tensor parallelism t, per layer
// s·b·h·(10 + 24/t + 5·a·s/(h·t)) without sequence parallelism and
// s·b·h·(34/t + 5·a·s/(h·t)) with it.
TEST(StepGraph, Gpt3ActivationsWithTensorParallelism) {
  ModelSpec m = load_model("gpt3-175b");
  const std::int64_t s = 2048, b = 1, h = 12288, a = 96, t = 8;
  GraphOptions o{
      .seq_len = s, .micro_batch = b, .flash_attention = false, .tp = static_cast<int>(t), .sequence_parallel = false};
  EXPECT_EQ(layer_activation_bytes(m, 0, o).count(), s * b * h * 10 + s * b * h * 24 / t + 5 * a * s * s * b / t);
  o.sequence_parallel = true;
  EXPECT_EQ(layer_activation_bytes(m, 0, o).count(), s * b * h * 34 / t + 5 * a * s * s * b / t);
}

// Each tensor-parallel rank does 1/t of every matrix product.
// MoE parallel folding on one DeepSeek-V3 MoE layer (layer 3), sequence
// 4096, TP 2 with sequence parallelism, EP 64, ETP 1: the router and the
// all-to-alls see this rank's 2,048 tokens, ceil(2048 x 8 / 256) = 64 rows
// per expert from each of the 64 ranks, 4 local experts of the full 2,048
// hidden; the shared expert stays on tp inside an all-gather/reduce-scatter.
TEST(StepGraph, FoldedExpertsRunOnSequenceParallelTokens) {
  const ModelSpec m = load_model("deepseek-v3");
  GraphOptions o{.seq_len = 4096, .micro_batch = 1, .tp = 2, .ep = 64, .etp = 1};
  const Unit layer = build_step_graph(m, o).units[4];  // embedding, layers 0-2 (dense), layer 3
  ASSERT_EQ(layer.layer, 3);
  auto op = [&](const std::string& name) {
    for (const auto& x : layer.forward) {
      if (x.name == "l3." + name) return x;
    }
    ADD_FAILURE() << name;
    return GraphOp{};
  };
  EXPECT_EQ(op("router").gemm->m, 2048);
  EXPECT_EQ(op("moe_dispatch_alltoall").bytes.count(), 2LL * 64 * 256 * 7168);
  EXPECT_EQ(op("moe_dispatch_alltoall").comm_group, CommGroup::Ep);
  const GraphOp up = op("experts.up");
  EXPECT_EQ(up.gemm->m, 64 * 64);                    // rows from every ep rank
  EXPECT_EQ(up.gemm->n, 2 * 2048);                   // SwiGLU gate and up, not split
  EXPECT_EQ(up.gemm->batch, 4);                      // 256 / 64 local experts
  EXPECT_EQ(op("shared.up").gemm->n, 2 * 2048 / 2);  // the shared expert on tp
  EXPECT_EQ(op("shared.tp_allgather").bytes.count(), 2LL * 4096 * 7168);
  for (const auto& x : layer.forward) EXPECT_NE(x.name, "l3.ffn.tp_allgather");  // no gather around the experts
  EXPECT_EQ(layer.expert_params, 256LL * 3 * 7168 * 2048 / 64);
  // ETP 2 (= tp): the unfolded layer, experts split like the dense FFN.
  o.etp = 2;
  const Unit unfolded = build_step_graph(m, o).units[4];
  EXPECT_EQ(unfolded.expert_params, 256LL * 3 * 7168 * 2048 / 64 / 2);
}

TEST(StepGraph, TensorParallelSplitsFlops) {
  ModelSpec m = load_model("llama3-8b");
  GraphOptions one{.seq_len = 4096, .micro_batch = 1, .flash_attention = false};
  GraphOptions eight = one;
  eight.tp = 8;
  double full = model_flops_per_sequence(m, 4096).count();
  EXPECT_NEAR(8 * matmul_flops(build_step_graph(m, eight), false), full, 1e-9 * full);
}

// Per layer with sequence parallelism: forward all-gather before attention
// and FFN, reduce-scatter after each; backward the duals. Without it: the g
// all-reduces forward and the f all-reduces backward.
TEST(StepGraph, TensorParallelCollectives) {
  ModelSpec m = load_model("llama3-8b");
  auto count = [&](bool sp, bool forward, core::CollectiveKind kind) {
    GraphOptions o{.seq_len = 4096, .micro_batch = 1, .tp = 4, .sequence_parallel = sp};
    const StepGraph graph = build_step_graph(m, o);
    const Unit& l = graph.units[1];
    int n = 0;
    for (const auto& op : forward ? l.forward : l.backward) {
      if (op.collective == kind) {
        EXPECT_EQ(op.bytes.count(), 2 * 4096 * 4096);  // bf16 [tokens x hidden]
        ++n;
      }
    }
    return n;
  };
  using core::CollectiveKind;
  EXPECT_EQ(count(true, true, CollectiveKind::AllGather), 2);
  EXPECT_EQ(count(true, true, CollectiveKind::ReduceScatter), 2);
  EXPECT_EQ(count(true, false, CollectiveKind::AllGather), 2);
  EXPECT_EQ(count(true, false, CollectiveKind::ReduceScatter), 2);
  EXPECT_EQ(count(false, true, CollectiveKind::AllReduce), 2);
  EXPECT_EQ(count(false, false, CollectiveKind::AllReduce), 2);
  EXPECT_EQ(count(false, true, CollectiveKind::AllGather), 0);
}

// Context parallelism: each of cp ranks runs its s/cp queries against all s
// keys — 1/cp of the attention FLOPs — and 1/cp of every token-wise op.
TEST(StepGraph, ContextParallelSplitsTokensAndAttention) {
  ModelSpec m = load_model("llama3-8b");
  GraphOptions one{.seq_len = 8192, .micro_batch = 1};
  GraphOptions four = one;
  four.cp = 4;
  auto attention = [&](const GraphOptions& o) {
    double f = 0;
    const StepGraph graph = build_step_graph(m, o);
    for (const auto& op : graph.units[1].forward) {
      if (op.kind == core::ComputeKind::Attention) f += op.flops.count();
    }
    return f;
  };
  EXPECT_DOUBLE_EQ(4 * attention(four), attention(one));
  StepGraph g = build_step_graph(m, four);
  EXPECT_EQ(g.units[1].forward[1].gemm->m, 8192 / 4);  // the QKV projection on 2,048 tokens
}

TEST(StepGraph, MoeExpertGemmsAreGrouped) {
  ModelSpec m = load_model("mixtral-8x7b");
  StepGraph g = build_step_graph(m, GraphOptions{.seq_len = 4096, .micro_batch = 1});
  const Unit& l0 = g.units[1];
  auto it =
      std::find_if(l0.forward.begin(), l0.forward.end(), [](const GraphOp& op) { return op.name == "l0.experts.up"; });
  ASSERT_NE(it, l0.forward.end());
  // 4096 tokens · top-2 / 8 experts = 1024 rows per expert, gate and up fused.
  EXPECT_EQ(*it->gemm, (core::GemmShape{1024, 2 * 14336, 4096, 8}));
}

}  // namespace
}  // namespace hzp::models
