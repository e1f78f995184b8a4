// Fuzz target: software-stack files — parse, then build a small model's step
// graph with the stack's kernels, attention family and recompute policy.
#include "fuzz_harness.hpp"
#include "models/step_graph.hpp"
#include "stacks/stack_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return hzp::fuzz::run(data, size, [](const std::string& text) {
    using namespace hzp;
    const stacks::StackSpec s = stacks::stack_from_json(text, "fuzz.json");
    models::ModelSpec m;
    m.name = "tiny";
    m.layers = 2;
    m.hidden = 256;
    m.heads = 4;
    m.kv_heads = 2;
    m.head_dim = 64;
    m.ffn_hidden = 512;
    m.vocab = 1024;
    m.max_seq_len = 128;
    models::GraphOptions o{.seq_len = 128, .micro_batch = 1};
    o.kernels = s.ops;
    o.attention_kernel = s.attention;
    o.selective = s.selective;
    for (auto r : {models::Recompute::None, models::Recompute::Selective}) {
      o.recompute = r;
      (void)models::build_step_graph(m, o);
    }
  });
}
