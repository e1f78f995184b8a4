// Fuzz target: model specs — parse, count parameters and FLOPs, build the step graph.
#include <algorithm>

#include "fuzz_harness.hpp"
#include "models/model_spec.hpp"
#include "models/step_graph.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return hzp::fuzz::run(data, size, [](const std::string& text) {
    using namespace hzp::models;
    ModelSpec m = model_from_json(text, "fuzz.json");
    (void)count_params(m);
    const std::int64_t seq = std::min<std::int64_t>(m.max_seq_len, 1024);
    (void)model_flops_per_sequence(m, seq);
    GraphOptions o{.seq_len = seq, .micro_batch = 1};
    (void)build_step_graph(m, o);
    if (m.heads % 2 == 0) {
      o.tp = 2;
      o.flash_attention = false;
      (void)build_step_graph(m, o);
    }
  });
}
