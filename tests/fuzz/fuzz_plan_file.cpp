// Fuzz target: plan files — parse, then lower onto a small model and cluster.
#include "fuzz_harness.hpp"
#include "models/model_spec.hpp"
#include "plan/plan.hpp"
#include "plan/plan_file.hpp"

namespace {

// Four layers, 8 heads, 4 experts: every strategy and parallelism has room to vary.
constexpr const char* kTinyModel = R"({"schema_version": 1, "name": "tiny", "source": "fuzz", "layers": 4,
  "hidden": 256, "heads": 8, "kv_heads": 4, "head_dim": 32, "ffn_hidden": 512, "ffn_activation": "swiglu",
  "vocab": 1024, "tied_embeddings": false, "norm": "rmsnorm", "qk_norm": false, "bias": false, "dropout": false,
  "position_embedding": "rope", "max_seq_len": 2048,
  "moe": {"experts": 4, "top_k": 2, "expert_ffn_hidden": 128, "shared_experts": 1, "shared_expert_ffn_hidden": 128,
          "dense_layers": 1, "capacity_factor": 1.0}, "mla": null})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return hzp::fuzz::run(data, size, [](const std::string& text) {
    using namespace hzp;
    plan::PlanOptions o = plan::plan_from_json(text, "fuzz.json");
    static const models::ModelSpec model = models::model_from_json(kTinyModel, "tiny.json");
    static const topologies::Topology topo(topologies::load_cluster("dgx-h100"), 16);
    // Keep each input cheap: the Schedule holds every micro-batch.
    plan::BatchSplit b = plan::split_batch(model, topo.devices(), o);
    if (b.micro_batches > 32) return;
    (void)plan::lower({model, topo}, o);
  });
}
