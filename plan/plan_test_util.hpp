// Helpers shared by the plan tests: per-rank communication and memory
// totals of a Schedule, default plan options, a replay's step and busy times,
// a four-layer model and a two-stage DDP plan of it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/schedule_replay.hpp"
#include "plan/plan.hpp"

namespace hzp::plan::test_util {

// Per-rank buffer bytes per step by (collective, group kind), and static memory.
struct Totals {
  std::map<std::string, std::int64_t> bytes;  // "all_gather/dp_shard" -> bytes
  std::map<std::string, std::int64_t> wire;   // bytes each rank sends (ring algorithms)
  std::int64_t static_alloc = 0;
  int syncs = 0;
};

inline Totals totals(const core::Schedule& s) {
  Totals t;
  for (const auto& st : s.programs.at(0).streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Collective) {
        const auto P = static_cast<std::int64_t>(s.group(op.group).ranks.size());
        std::string key =
            std::string(core::to_string(op.collective)) + "/" + std::string(core::to_string(s.group(op.group).kind));
        t.bytes[key] += op.bytes.count();
        std::int64_t factor = op.collective == core::CollectiveKind::AllReduce ? 2 : 1;
        t.wire[key] += factor * (P - 1) * op.bytes.count() / P;
      }
      using BC = core::BufferClass;
      if (op.kind == core::OpKind::Alloc &&
          (op.buffer_class == BC::Params || op.buffer_class == BC::Grads || op.buffer_class == BC::OptimizerStates)) {
        t.static_alloc += op.bytes.count();
      }
      if (op.kind == core::OpKind::Sync) ++t.syncs;
    }
  }
  return t;
}

inline PlanOptions options(Strategy s, std::int64_t tokens) {
  PlanOptions o;
  o.strategy = s;
  o.global_batch_tokens = tokens;
  return o;
}

struct Timing {
  std::int64_t step = 0;
  std::vector<std::int64_t> busy;
};

// DDP over `pp` pipeline stages, `sequences` of 1,024 tokens: the plan the
// pipeline replay tests start from.
inline PlanOptions ddp_pipeline(int pp, std::int64_t sequences) {
  PlanOptions o;
  o.strategy = Strategy::Ddp;
  o.global_batch_sequences = sequences;
  o.seq_len = 1024;
  o.pp = pp;
  return o;
}

// No host launch latency, so a replay times the device work alone.
inline void without_launch_latency(core::Schedule& s) {
  for (auto& p : s.programs) {
    for (auto& t : p.threads) t.launch_latency = t.collective_launch_latency = core::Duration{};
  }
}

inline Timing measure(const core::Schedule& s, const core::ReplayCosts& costs) {
  core::ReplayResult r = core::replay(s, costs);
  Timing t;
  for (std::size_t p = 0; p < s.programs.size(); ++p) {
    std::int64_t busy = 0;
    for (std::size_t k = 0; k < r.times[p].size(); ++k) {
      for (std::size_t i = 0; i < r.times[p][k].size(); ++i) {
        t.step = std::max(t.step, r.times[p][k][i].end.count_ns());
        if (k == 0 && s.programs[p].streams[k].ops[i].kind == core::OpKind::Compute) {
          busy += (r.times[p][k][i].end - r.times[p][k][i].start).count_ns();
        }
      }
    }
    t.busy.push_back(busy);
  }
  return t;
}

// The idle fraction of a pipeline stage with free communication and equal

// Llama-3 8B cut to four layers, and DDP over two pipeline stages of 4,096-token
// sequences: small Schedules for the pipeline and overlap tests.
inline models::ModelSpec four_layers() {
  models::ModelSpec m = models::load_model("llama3-8b");
  m.layers = 4;
  return m;
}

inline PlanOptions ddp_two_stages(std::int64_t sequences) {
  PlanOptions o;
  o.strategy = Strategy::Ddp;
  o.global_batch_sequences = sequences;
  o.seq_len = 4096;
  o.pp = 2;
  return o;
}

}  // namespace hzp::plan::test_util
