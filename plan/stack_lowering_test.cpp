// The software stack in lowering, with values derived by hand for Llama-3 8B
// (h 4,096, 32 query and 8 K/V heads of 128, FFN 14,336) at 8,192 tokens a
// micro-batch, FSDP over one node of 8 H100.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <string>

#include "plan/plan.hpp"
#include "plan/plan_test_util.hpp"
#include "stacks/stack_spec.hpp"
#include "topologies/topology.hpp"

namespace hzp::plan {
namespace {

constexpr std::int64_t T = 8192, h = 4096, f = 14336;
// One layer's dense parameters: Q and O (h x h), K and V (h x 1,024), three FFN matrices, two RMSNorm weights.
constexpr std::int64_t kLayerParams = 2 * h * h + 2 * h * 1024 + 3 * h * f + 2 * h;

core::Schedule lower_under(const std::string& stack, models::Recompute recompute = models::Recompute::None,
                           bool fused_loss = true) {
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  PlanOptions o = test_util::options(Strategy::Fsdp, 8 * T);
  o.seq_len = T;
  o.recompute = recompute;
  o.fused_loss = fused_loss;
  return lower({m, topo, stacks::resolve_stack(stack)}, o);
}

std::vector<core::Op> ops_named(const core::Schedule& s, const std::string& prefix) {
  std::vector<core::Op> out;
  for (const auto& st : s.programs.at(0).streams) {
    for (const auto& op : st.ops) {
      if (op.name.starts_with(prefix)) out.push_back(op);
    }
  }
  return out;
}

const core::Op& only(const core::Schedule& s, const std::string& name) {
  static core::Op none;
  for (const auto& st : s.programs.at(0).streams) {
    for (const auto& op : st.ops) {
      if (op.name == name) return op;
    }
  }
  ADD_FAILURE() << "no op " << name;
  return none;
}

TEST(StackLowering, EagerRmsNormIsSevenKernelsForwardTwelveBackward) {
  const core::Schedule eager = lower_under("torch-fsdp2");
  EXPECT_EQ(only(eager, "l0.attn_norm").compute().kernels, 7);
  EXPECT_EQ(only(eager, "l0.attn_norm").compute().bytes.count(), 36 * T * h);
  EXPECT_EQ(only(eager, "l0.attn_norm.bwd").compute().kernels, 12);
  EXPECT_EQ(only(eager, "l0.attn_norm.bwd").compute().bytes.count(), 64 * T * h);
  // Unfused SwiGLU over the FFN width: silu and the product, 10 bytes an element.
  EXPECT_EQ(only(eager, "l0.ffn.swiglu").compute().bytes.count(), 10 * T * f);
  // repeat_kv: K and V of 8 heads read, 32 heads of each written.
  EXPECT_EQ(only(eager, "l0.repeat_kv").compute().bytes.count(), 2 * T * (8 + 32) * 256);
  const core::Schedule fused = lower_under("hzp-async");
  EXPECT_EQ(only(fused, "l0.attn_norm").compute().kernels, 1);
  EXPECT_EQ(only(fused, "l0.attn_norm").compute().bytes.count(), 4 * T * h);
  EXPECT_TRUE(ops_named(fused, "l0.repeat_kv").empty());
}

// An unfused loss under a PyTorch stack: the head's backward allocates two
// fp32 gradients of the logits (8 bytes each of T x 128,256) before its
// first kernel and frees them after its last; Megatron's in-place one
// allocates nothing.
TEST(StackLowering, TorchCrossEntropyHoldsTwoFp32GradientsDuringTheHeadsBackward) {
  const auto lowered = [](const std::string& stack) { return lower_under(stack, models::Recompute::None, false); };
  const core::Schedule s = lowered("torch-fsdp2");
  const std::vector<core::Op>& ops = s.programs.at(0).streams.at(0).ops;
  const auto at = [&](core::OpKind kind, const std::string& buffer) {
    return std::find_if(ops.begin(), ops.end(),
                        [&](const core::Op& op) { return op.kind == kind && op.buffer().name == buffer; });
  };
  const auto alloc = at(core::OpKind::Alloc, "working.u5.mb0"), free = at(core::OpKind::Free, "working.u5.mb0");
  ASSERT_NE(alloc, ops.end());
  ASSERT_NE(free, ops.end());
  EXPECT_EQ(alloc->buffer().bytes.count(), 8 * T * 128256);
  EXPECT_EQ(alloc->buffer().buffer_class, core::BufferClass::Activations);
  // Between them: the head's backward kernels, from the loss's gradient to
  // the final norm's.
  std::vector<std::string> between;
  for (auto it = alloc + 1; it != free; ++it) {
    if (it->kind == core::OpKind::Compute) between.push_back(it->name);
  }
  ASSERT_FALSE(between.empty());
  EXPECT_TRUE(between.front().starts_with("head.loss.grad")) << between.front();
  EXPECT_EQ(between.back(), "head.final_norm.bwd");
  const core::Schedule megatron = lowered("megatron-core-te");
  const auto& mops = megatron.programs.at(0).streams.at(0).ops;
  EXPECT_TRUE(std::none_of(mops.begin(), mops.end(), [](const core::Op& op) {
    return (op.kind == core::OpKind::Alloc || op.kind == core::OpKind::Free) && op.buffer().name.starts_with("working");
  }));
}

TEST(StackLowering, Fsdp2CopiesInAndOutAroundEachAllGather) {
  const core::Schedule s = lower_under("torch-fsdp2");
  // Copy-in: each rank's 1/8 shard read and written once (bf16); copy-out:
  // the gathered unit read and written once.
  EXPECT_EQ(only(s, "layer0.allgather.fwd.copy_in").compute().bytes.count(), 4 * kLayerParams / 8);
  EXPECT_EQ(only(s, "layer0.copy_out").compute().bytes.count(), 4 * kLayerParams);
  EXPECT_EQ(only(s, "layer0.copy_out").role, core::OpRole::ParamGather);
  EXPECT_EQ(only(s, "layer0.grad_reducescatter.copy_in").compute().bytes.count(), 4 * kLayerParams);
  EXPECT_TRUE(ops_named(lower_under("torch-fsdp1"), "layer0.copy_out").empty());
}

TEST(StackLowering, DeepSpeedZero3GathersEachParameterTensor) {
  const core::Schedule s = lower_under("deepspeed-zero");
  // Two norms, Q, K, V, O, gate, up, down: nine all-gathers per layer and pass.
  std::int64_t bytes = 0, count = 0;
  for (const auto& op : ops_named(s, "layer0.allgather.fwd.")) {
    if (op.kind != core::OpKind::Collective) continue;
    ++count;
    bytes += op.collective().bytes.count();
  }
  EXPECT_EQ(count, 9);
  EXPECT_EQ(bytes, 2 * kLayerParams);
  // One bucket of 1,000 MB holds the layer's 436 MB of bf16 gradients: one reduce-scatter.
  EXPECT_EQ(only(s, "layer0.grad_reducescatter").collective().bytes.count(), 2 * kLayerParams);
}

TEST(StackLowering, ZeroThreeReducesALayerInBucketsOfItsSize) {
  // reduce_bucket_size 5e7 bf16 elements (100 MB): a layer's 218,112,000
  // gradient elements (divisible by the 8 ranks, so unpadded) fill four
  // buckets and part of a fifth: five reduce-scatters, sizes in proportion.
  auto stack = std::make_shared<stacks::Stack>(*stacks::resolve_stack("deepspeed-zero"));
  stack->spec.collectives.bucket_MB = 100;
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  PlanOptions o = test_util::options(Strategy::Fsdp, 8 * T);
  o.seq_len = T;
  const core::Schedule s = lower({m, topo, stack}, o);
  std::int64_t count = 0, bytes = 0;
  for (const auto& op : ops_named(s, "layer0.grad_reducescatter")) {
    if (op.kind != core::OpKind::Collective) continue;
    ++count;
    bytes += op.collective().bytes.count();
  }
  EXPECT_EQ(kLayerParams, 218'112'000);
  EXPECT_EQ(count, 5);
  EXPECT_EQ(bytes, 2 * kLayerParams);
  // Forward and backward each gather the layer's nine parameter tensors.
  std::int64_t gathers = 0;
  for (const auto& op : ops_named(s, "layer0.allgather.")) gathers += op.kind == core::OpKind::Collective ? 1 : 0;
  EXPECT_EQ(gathers, 18);
}

// ZeRO++: quantized weights gather as int8 (one byte a parameter) and
// gradients reduce-scatter as int4 (packed, half a byte); both typed so.
TEST(StackLowering, ZeroPlusPlusCollectivesAreTypedAsTheirIntegers) {
  const core::Schedule s = lower_under("deepspeed-zeropp");
  std::int64_t int8 = 0, int4 = 0;
  for (const auto& st : s.programs.at(0).streams) {
    for (const auto& op : st.ops) {
      if (op.kind != core::OpKind::Collective) continue;
      EXPECT_NE(op.collective().dtype, core::Dtype::Fp8) << op.name;  // no FP8 in this plan
      if (op.collective().dtype == core::Dtype::Int8 && op.name.starts_with("layer0.allgather.fwd"))
        int8 += op.collective().bytes.count();
      if (op.collective().dtype == core::Dtype::Int4 && op.name.starts_with("layer0.grad_reducescatter"))
        int4 += op.collective().bytes.count();
    }
  }
  EXPECT_EQ(int8, kLayerParams);
  EXPECT_EQ(int4, kLayerParams / 2);
  EXPECT_EQ(core::dtype_bits(core::Dtype::Int4), 4);
  EXPECT_EQ(core::dtype_bytes(core::Dtype::Int8), 1);
  EXPECT_THROW((void)core::dtype_bytes(core::Dtype::Int4), std::logic_error);
}

double recomputed_flops(const core::Schedule& s, core::ComputeKind kind) {
  double sum = 0;
  for (const auto& op : ops_named(s, "l0.")) {
    if (op.role == core::OpRole::Recompute && op.compute().kind == kind) sum += op.compute().flops.count();
  }
  return sum;
}

TEST(StackLowering, SelectiveRecomputeFollowsTheStack) {
  // Megatron's policy recomputes the attention core, with flash attention
  // too: the causal half of 2 * 32 heads * T^2 * (128 + 128).
  const core::Schedule mc = lower_under("megatron-core-te", models::Recompute::Selective);
  EXPECT_DOUBLE_EQ(recomputed_flops(mc, core::ComputeKind::Attention), 0.5 * 2.0 * 32 * T * T * 256);
  EXPECT_DOUBLE_EQ(recomputed_flops(mc, core::ComputeKind::Gemm), 0.0);
  // The op-level policy recomputes every second GEMM of [qkv, attn_out, up,
  // down] — the output and down projections — and no attention.
  const core::Schedule pt = lower_under("torch-fsdp2", models::Recompute::Selective);
  EXPECT_DOUBLE_EQ(recomputed_flops(pt, core::ComputeKind::Gemm), 2.0 * T * h * h + 2.0 * T * h * f);
  EXPECT_DOUBLE_EQ(recomputed_flops(pt, core::ComputeKind::Attention), 0.0);
}

TEST(StackLowering, InternEvoAllReducesGradientsAndBroadcastsFromEachOwner) {
  // ZeRO-1 over 8 of 16 data-parallel ranks: gradients all-reduced over all
  // 16 per unit (one bucket of 512 Mi elements holds a layer), then each of
  // the 8 owners broadcasts its 1/8 of the bf16 parameters to its group.
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
  PlanOptions o = test_util::options(Strategy::Hzp, 16 * T);
  o.seq_len = T;
  o.param_shard = o.grad_shard = 1;
  o.optim_shard = 8;
  o.async = false;
  const core::Schedule s = lower({m, topo, stacks::resolve_stack("internevo")}, o);
  const core::Op& ar = only(s, "layer0.grad_allreduce.all");
  EXPECT_EQ(s.group(ar.collective().group).kind, core::GroupKind::DpAll);
  EXPECT_EQ(s.group(ar.collective().group).ranks.size(), 16u);
  EXPECT_EQ(ar.collective().bytes.count(), 4 * kLayerParams);  // fp32 accumulated gradients
  const auto bcasts = ops_named(s, "params.broadcast.");
  ASSERT_EQ(bcasts.size(), 8u);
  // Every unit's parameters: four layers, the embedding, the final norm and the untied head.
  const std::int64_t owned = 4 * kLayerParams + m.vocab * h + h + m.vocab * h;
  for (const auto& b : bcasts) {
    EXPECT_EQ(b.collective().kind, core::CollectiveKind::Broadcast);
    EXPECT_EQ(s.group(b.collective().group).ranks.size(), 8u);
    EXPECT_EQ(b.collective().bytes.count(), 2 * owned / 8);
  }
  EXPECT_TRUE(ops_named(s, "layer0.param_allgather.optim").empty());
}

TEST(StackLowering, DeepSpeedPrefetchesOnlyWhatItsBudgetHolds) {
  // stage3_prefetch_bucket_size: 100 MB of 16-bit parameters, less than one
  // layer's 436 MB: no layer is gathered ahead, so layer 1's first all-gather
  // is issued after layer 0's kernels; FSDP2 prefetches the next layer first.
  auto first_id = [](const core::Schedule& s, const std::string& prefix) {
    int id = INT32_MAX;
    for (const auto& op : ops_named(s, prefix)) id = std::min(id, op.id);
    return id;
  };
  const core::Schedule ds = lower_under("deepspeed-zero");
  EXPECT_GT(first_id(ds, "layer1.allgather.fwd"), first_id(ds, "l0.attn_norm"));
  const core::Schedule fsdp2 = lower_under("torch-fsdp2");
  EXPECT_LT(first_id(fsdp2, "layer1.allgather.fwd"), first_id(fsdp2, "l0.attn_norm"));
}

TEST(StackLowering, AsyncNeedsBackgroundThreads) {
  const models::ModelSpec m = test_util::four_layers();
  const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 8);
  PlanOptions o = test_util::options(Strategy::Hzp, 8 * T);
  const auto fsdp2 = stacks::resolve_stack("torch-fsdp2");
  EXPECT_FALSE(resolve_async(o, fsdp2->spec));  // hzp's default follows the stack
  o.async = true;
  const auto problems = check_plan({m, topo, fsdp2}, o);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].field, "async");
}

}  // namespace
}  // namespace hzp::plan
