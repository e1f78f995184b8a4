// Fuzz target: cluster specs — parse, size a cluster, cost compute and collectives.
#include "cost/perf_model.hpp"
#include "fuzz_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return hzp::fuzz::run(data, size, [](const std::string& text) {
    using namespace hzp;
    topologies::ClusterSpec c = topologies::cluster_from_json(text, "fuzz.json");
    for (int nodes : {1, 2, 64}) {
      const int devices = c.devices_per_node * nodes;
      if (devices > topologies::kMaxDevices) break;
      cost::PerfModel pm(topologies::Topology(c, devices));
      std::vector<int> all(static_cast<std::size_t>(devices));
      for (int r = 0; r < devices; ++r) all[static_cast<std::size_t>(r)] = r;
      cost::GroupSpan span = pm.span(all);
      for (auto kind :
           {core::CollectiveKind::AllGather, core::CollectiveKind::ReduceScatter, core::CollectiveKind::AllReduce,
            core::CollectiveKind::AllToAll, core::CollectiveKind::Broadcast}) {
        (void)pm.collective(kind, core::Bytes(1 << 20), span);
      }
      (void)pm.p2p(core::Bytes(1 << 20), 0, devices - 1);
      core::Op gemm = core::Op::of(core::OpKind::Compute);
      gemm.compute().kind = core::ComputeKind::Gemm;
      gemm.compute().gemm = core::GemmShape{4096, 4096, 4096, 1};
      gemm.compute().flops = core::Flops(2.0 * 4096 * 4096 * 4096);
      gemm.compute().bytes = core::Bytes(3LL * 4096 * 4096 * 2);
      gemm.compute().dtype = core::Dtype::Fp8;
      (void)pm.compute(gemm);
    }
  });
}
