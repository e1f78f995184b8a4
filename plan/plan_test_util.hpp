// Helpers shared by the plan tests: per-rank communication and memory
// totals of a Schedule, default plan options, a replay's step and busy times
// (and PerfModel's costs of ops alone),
// a four-layer model and a two-stage DDP plan of it, the fields a plan is
// refused by, and the step of pipeline slot orders with given pass times.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cost/perf_model.hpp"
#include "plan/plan.hpp"
#include "schedule/replay.hpp"

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
        const core::Op::Collective& c = op.collective();
        const core::Group& g = s.group(c.group);
        const auto P = static_cast<std::int64_t>(g.ranks.size());
        std::string key = std::string(core::to_string(c.kind)) + "/" + std::string(core::to_string(g.kind));
        t.bytes[key] += c.bytes.count();
        std::int64_t factor = c.kind == core::CollectiveKind::AllReduce ? 2 : 1;
        t.wire[key] += factor * (P - 1) * c.bytes.count() / P;
      }
      using BC = core::BufferClass;
      if (op.kind == core::OpKind::Alloc) {
        const core::Op::Buffer& b = op.buffer();
        if (b.buffer_class == BC::Params || b.buffer_class == BC::Grads || b.buffer_class == BC::OptimizerStates)
          t.static_alloc += b.bytes.count();
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
    for (auto& t : p.threads)
      t.launch_latency = t.collective_launch_latency = t.event_latency = t.alloc_latency = t.sync_latency =
          core::Duration{};
  }
}

// Every op at PerfModel's cost of it alone (no contention, no overlap slowdown).
inline core::ReplayCosts alone(const cost::PerfModel& pm) {
  core::ReplayCosts costs;
  costs.compute = [&pm](const core::Program&, const core::Op& op) { return pm.compute(op); };
  costs.collective = [&pm](const core::Group& g, const core::Op& op) {
    return pm.collective(op.collective().kind, op.collective().bytes, pm.span(g.ranks));
  };
  costs.p2p = [&pm](const core::Program& sender, const core::Op& op) {
    return pm.p2p(op.transfer().bytes, sender.ranks.at(0), op.transfer().peer);
  };
  return costs;
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

// The fields check_plan names for a plan on this topology (empty: accepted).
inline std::set<std::string> problem_fields(const models::ModelSpec& m, const topologies::Topology& topo,
                                            const PlanOptions& o) {
  std::set<std::string> fields;
  for (const auto& p : check_plan({m, topo}, o)) fields.insert(p.field);
  return fields;
}

// 'F', 'B' (input gradients, or a whole backward) or 'W' (weight gradients).
inline char pass_of(const PipelineSlot& s) {
  if (!s.backward) return 'F';
  return s.part == BackwardPart::Weight ? 'W' : 'B';
}

// The step of every stage's slot orders run with pass times tf, tb, tw: each
// pass starts when its stage is free and what it needs is done. `position`
// places a stage's slot on its chain of virtual stages 0..last (a chain per
// micro-batch): F needs the previous position's F (none at 0), B its own F and
// the next position's B (none at `last`), W its own B. Expects every slot run.
inline double pipeline_step(const std::vector<std::vector<PipelineSlot>>& orders,
                            const std::function<int(int, const PipelineSlot&)>& position, int last, double tf,
                            double tb, double tw) {
  const auto stages = orders.size();
  std::map<std::tuple<char, int, std::int64_t>, double> done;  // (pass, position, micro-batch) -> end
  std::vector<std::size_t> next(stages, 0);
  std::vector<double> free(stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t s = 0; s < stages; ++s) {
      while (next[s] < orders[s].size()) {
        const PipelineSlot& slot = orders[s][next[s]];
        const int pos = position(static_cast<int>(s), slot);
        const char k = pass_of(slot);
        std::vector<std::tuple<char, int, std::int64_t>> needs;
        if (k == 'F' && pos > 0) needs.emplace_back('F', pos - 1, slot.micro_batch);
        if (k == 'B') needs.emplace_back('F', pos, slot.micro_batch);
        if (k == 'B' && pos < last) needs.emplace_back('B', pos + 1, slot.micro_batch);
        if (k == 'W') needs.emplace_back('B', pos, slot.micro_batch);
        double start = free[s];
        bool ready = true;
        for (const auto& n : needs) {
          auto it = done.find(n);
          ready = ready && it != done.end();
          if (it != done.end()) start = std::max(start, it->second);
        }
        if (!ready) break;
        free[s] = start + (k == 'F' ? tf : k == 'B' ? tb : tw);
        done[{k, pos, slot.micro_batch}] = free[s];
        ++next[s];
        progress = true;
      }
    }
  }
  for (std::size_t s = 0; s < stages; ++s) EXPECT_EQ(next[s], orders[s].size());
  return *std::max_element(free.begin(), free.end());
}

}  // namespace hzp::plan::test_util
