// The CUDA backend on a GPU (label "gpu"; skipped where no GPU answers): a
// hand-built Schedule with a GEMM, a cross-stream wait, an emulated
// collective and pooled buffers runs in order, its times come from CUDA
// events, and the pool reports what the Schedule allocated.
#include "runtime/cuda/cuda_backend.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/platform_info.hpp"
#include "topologies/cluster_spec.hpp"

namespace hzp::runtime::cuda {
namespace {

bool have_gpu() { return !query_platform().gpus.empty(); }

core::Op op(int id, core::OpKind kind) {
  core::Op o = core::Op::of(kind);
  o.id = id;
  o.name = fmt::format("op{}", id);
  return o;
}

// Stream 0: alloc 1 GiB, GEMM 8192³, record e0, free. Stream 1: wait e0, an
// all-gather of 256 MiB over 8 ranks (emulated), a bandwidth kernel.
core::Schedule schedule() {
  core::Schedule s;
  s.name = "gpu-smoke";
  s.step.world_size = 8;
  s.step.cluster = "dgx-h100";
  s.groups.push_back(core::Group{0, core::GroupKind::DpShard, {0, 1, 2, 3, 4, 5, 6, 7}});
  core::Program p;
  p.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  p.threads.push_back(core::Thread{0, "main", {}, {}});
  core::Stream a{0, "compute", core::StreamKind::Compute, 0, {}};
  core::Stream b{1, "comm", core::StreamKind::ParamGather, 0, {}};
  core::Op alloc = op(0, core::OpKind::Alloc);
  alloc.buffer().name = "x";
  alloc.buffer().bytes = core::Bytes(1LL << 30);
  core::Op gemm = op(1, core::OpKind::Compute);
  gemm.compute().kind = core::ComputeKind::Gemm;
  gemm.compute().gemm = core::GemmShape{8192, 8192, 8192, 1};
  gemm.compute().flops = core::Flops(2.0 * 8192 * 8192 * 8192);
  gemm.compute().dtype = core::Dtype::Bf16;
  core::Op rec = op(2, core::OpKind::Record);
  rec.event().id = 0;
  core::Op wait = op(3, core::OpKind::Wait);
  wait.event().id = 0;
  core::Op ag = op(4, core::OpKind::Collective);
  ag.collective().kind = core::CollectiveKind::AllGather;
  ag.collective().group = 0;
  ag.collective().bytes = core::Bytes(256LL << 20);
  core::Op bw = op(5, core::OpKind::Compute);
  bw.compute().kind = core::ComputeKind::Elementwise;
  bw.compute().bytes = core::Bytes(512LL << 20);
  core::Op free = op(6, core::OpKind::Free);
  free.buffer().name = "x";
  free.buffer().bytes = alloc.buffer().bytes;
  a.ops = {alloc, gemm, rec, free};
  b.ops = {wait, ag, bw};
  p.streams = {a, b};
  s.programs.push_back(p);
  return s;
}

TEST(CudaBackend, RunsAScheduleInOrderWithEventTimes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  const core::Schedule s = schedule();
  const cost::PerfModel pm(topologies::Topology(topologies::load_cluster("dgx-h100"), 8));
  const RankPlan plan = rank_plan(s, 0);
  CudaOptions o;
  o.emulate_collectives = true;
  CudaBackend backend(s, plan, pm, nullptr, o);
  backend.begin_step();
  execute(s, {0}, backend);
  const auto t = backend.times();
  const double gemm_s = (t[0][1].end - t[0][1].start).to_seconds();
  EXPECT_GT(gemm_s, 0);
  EXPECT_LT(gemm_s, 2.0 * 8192.0 * 8192 * 8192 / 100e12);  // > 100 TFLOP/s on an H100/H200
  // The all-gather waited for the GEMM's record and lasted the model's time.
  EXPECT_GE(t[1][1].start.count_ns(), t[0][1].end.count_ns() - 1000);
  const double model =
      pm.collective(core::CollectiveKind::AllGather, core::Bytes(256LL << 20), pm.span(s.groups[0].ranks)).to_seconds();
  EXPECT_NEAR((t[1][1].end - t[1][1].start).to_seconds(), model, 0.1 * model + 20e-6);
  EXPECT_GE(backend.peak_used().count(), 1LL << 30);
}

}  // namespace
}  // namespace hzp::runtime::cuda
