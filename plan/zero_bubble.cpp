// Zero-bubble pipeline schedules (Qi, Wan, Huang, Lin: "Zero Bubble Pipeline
// Parallelism", ICLR 2024): each backward splits into B, the input gradients
// the previous stage waits for, and W, the weight gradients nothing else
// waits for, so W can be deferred into what would be bubbles.
//  - ZB-H1 (§2.1): 1F1B's warm-up and steady state with stage i's W passes
//    starting i micro-batches late, so that every stage has p micro-batches
//    in flight (1F1B's first stage has p, stage i has p − i). The first
//    stage holds what 1F1B's does, p·M_B, the others at most (p − i)·M_B +
//    i·M_W; the bubble falls from (p − 1)(T_F + T_B + T_W) to
//    (p − 1)(T_F + T_B − T_W).
//  - ZB-V (§6): 2p chunks, chunk 0 of stage i is virtual stage i and chunk 1
//    is virtual stage 2p − 1 − i, so both the forward and the backward pass
//    run down and back up the stages in a V; the first stage holds the
//    embedding and the head. The paper's order keeps 1F1B's activation
//    memory (p·M_B, i.e. 2p chunk micro-batches in flight per stage) and
//    states a bubble of (p − 1)(T_F + T_B − 2·T_W) (zero for T_F = T_B =
//    T_W). Here the order is built as a list schedule of all stages with the
//    passes' relative times (their FLOPs, as the paper's generator takes
//    profiled times; equal ones in the tests): each stage takes at each step
//    a pass that is ready — a B first (chunk 0's, the end of the critical
//    path, then chunk 1's), then an F while fewer than 2p chunk micro-batches
//    are in flight (chunk 1 first), then a deferred W to fill the gap. With
//    equal times the step is 6m + p − 1 chunk passes, as long as the paper's
//    parallelogram: the p − 1 passes before the first forward reaches the
//    last stage, which the paper does not count as bubble (each stage steps
//    its optimizer when it is done, §4).
//  - DualPipe (DeepSeek-V3, arXiv:2412.19437 §3.2.1): stage i holds stage i
//    as chunk 0 and a copy of stage p − 1 − i as chunk 1; half the m
//    micro-batches run down through chunk 0 and half up through chunk 1, so
//    both ends of the pipeline start at once. The paper states a bubble of
//    (p/2 − 1)(T_F&B + T_B − 3·T_W), 2x the parameters and p + 1 micro-batches
//    of activations. The order is the same list schedule as ZB-V's over two
//    chains of p virtual stages instead of one of 2p, at most p + 1 chunk
//    micro-batches in flight per stage; T_F&B (a forward and a backward of
//    two micro-batches overlapped, which hides EP all-to-alls behind compute)
//    is not modelled: the two run back to back, T_F + T_B.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "plan/plan.hpp"

namespace hzp::plan {

namespace {

PipelineSlot forward(std::int64_t mb, int chunk) { return {mb, chunk, false, BackwardPart::Whole}; }
PipelineSlot input(std::int64_t mb, int chunk) { return {mb, chunk, true, BackwardPart::Input}; }
PipelineSlot weight(std::int64_t mb, int chunk) { return {mb, chunk, true, BackwardPart::Weight}; }

// ZB-H1 on stage i: 1F1B's min(p − i − 1, m) warm-up forwards, then F, B and
// (from the (i + 1)-th steady step on) the oldest deferred W; in the cool-down
// each B is followed by one W, and the deferred rest closes the step.
std::vector<PipelineSlot> zb_h1(int stage, int pp, std::int64_t m) {
  std::vector<PipelineSlot> out;
  const std::int64_t warm = std::min<std::int64_t>(pp - stage - 1, m), delay = stage;
  std::deque<std::int64_t> deferred;
  for (std::int64_t i = 0; i < warm; ++i) out.push_back(forward(i, 0));
  for (std::int64_t i = 0; i < m - warm; ++i) {
    out.push_back(forward(warm + i, 0));
    out.push_back(input(i, 0));
    deferred.push_back(i);
    if (i >= delay) {
      out.push_back(weight(deferred.front(), 0));
      deferred.pop_front();
    }
  }
  for (std::int64_t i = m - warm; i < m; ++i) {
    out.push_back(input(i, 0));
    deferred.push_back(i);
    out.push_back(weight(deferred.front(), 0));
    deferred.pop_front();
  }
  for (std::int64_t i : deferred) out.push_back(weight(i, 0));
  return out;
}

// The ZB-V list schedule (see the file comment), or DualPipe's (`dual`):
// every stage's order.
class VSchedule {
 public:
  VSchedule(int pp, std::int64_t m, PassTimes times, bool dual = false)
      : pp_(pp),
        m_(m),
        dual_(dual),
        per_chunk_(dual ? m / 2 : m),
        cap_(dual ? pp + 1 : 2LL * pp),
        cost_{ticks(times.input), ticks(times.forward), ticks(times.weight)},
        f_(static_cast<std::size_t>(2 * pp * m), kNone),
        b_(f_),
        stages_(static_cast<std::size_t>(pp)),
        out_(static_cast<std::size_t>(pp)) {}

  // Each step the stage whose pick starts first (the lowest of equals) takes
  // it; a pass changes what only its own stage and the two next to it can pick.
  std::vector<std::vector<PipelineSlot>> run() {
    std::vector<Pick> picks(static_cast<std::size_t>(pp_));
    for (int s = 0; s < pp_; ++s) picks[static_cast<std::size_t>(s)] = choose(s);
    for (std::int64_t left = (dual_ ? 3 : 6) * pp_ * m_; left > 0; --left) {
      int best = -1;
      for (int s = 0; s < pp_; ++s) {
        const Pick& p = picks[static_cast<std::size_t>(s)];
        if (p.kind >= 0 && (best < 0 || p.start < picks[static_cast<std::size_t>(best)].start)) best = s;
      }
      if (best < 0) {
        for (int s = 0; s < pp_ && best < 0; ++s) {
          picks[static_cast<std::size_t>(s)] = choose(s, /*relax=*/true);
          if (picks[static_cast<std::size_t>(s)].kind >= 0) best = s;
        }
        for (int s = best + 1; s < pp_ && best >= 0; ++s) {
          picks[static_cast<std::size_t>(s)] = choose(s, /*relax=*/true);
          if (picks[static_cast<std::size_t>(s)].kind >= 0 &&
              picks[static_cast<std::size_t>(s)].start < picks[static_cast<std::size_t>(best)].start) {
            best = s;
          }
        }
      }
      if (best < 0) {
        throw std::logic_error(fmt::format("{} list schedule stalled: pp {}, {} micro-batches, {} passes left",
                                           dual_ ? "DualPipe" : "ZB-V", pp_, m_, left));
      }
      take(best, picks[static_cast<std::size_t>(best)]);
      for (int s = std::max(best - 1, 0); s <= std::min(best + 1, pp_ - 1); ++s) {
        picks[static_cast<std::size_t>(s)] = choose(s);
      }
    }
    return std::move(out_);
  }

 private:
  static constexpr std::int64_t kNone = -1;
  // A pass's time in integer ticks (a thousandth of the forward's), at least one.
  static std::int64_t ticks(double t) { return std::max<std::int64_t>(1, std::llround(1000.0 * t)); }
  struct Stage {
    std::array<std::int64_t, 2> next_f{}, next_b{};
    std::deque<std::pair<int, std::int64_t>> deferred;  // (chunk, micro-batch) of B done, W not
    std::int64_t free = 0;
    std::int64_t in_flight = 0;  // chunk micro-batches forwarded, W not yet run
  };
  struct Pick {
    std::int64_t start = 0;
    int kind = -1;  // 0 B, 1 F, 2 W
    int chunk = 0;
  };

  [[nodiscard]] int virtual_stage(int s, int chunk) const { return chunk == 0 ? s : 2 * pp_ - 1 - s; }
  std::int64_t& at(std::vector<std::int64_t>& t, int v, std::int64_t mb) {
    return t[static_cast<std::size_t>(static_cast<std::int64_t>(v) * m_ + mb)];
  }
  // When pass F (or B) of micro-batch mb can start on virtual stage v; kNone:
  // not yet known. ZB-V: one chain of 2p virtual stages; DualPipe: two of p
  // (chunk 1 of stage p - 1 is virtual stage p, the second chain's start).
  std::int64_t ready(bool backward, int v, std::int64_t mb) {
    const bool start = v == 0 || (dual_ && v == pp_), end = v == 2 * pp_ - 1 || (dual_ && v == pp_ - 1);
    if (!backward) return start ? 0 : at(f_, v - 1, mb);
    const std::int64_t f = at(f_, v, mb);
    if (f == kNone || end) return f;
    const std::int64_t b = at(b_, v + 1, mb);
    return b == kNone ? kNone : std::max(f, b);
  }

  // The stage's candidates in priority order: B of chunk 0 (the end of the
  // critical path), B of chunk 1, F of chunk 1, F of chunk 0 (while fewer
  // than 2p chunk micro-batches, DualPipe p + 1, are in flight), then the
  // oldest deferred W.
  // The first that can start now, else the earliest (the first of equals).
  // `relax`: a chunk-1 forward may pass the cap (it moves admitted work on
  // towards its B), for when every stage would otherwise wait: with W short
  // against B the capped stages can hold each other's chunk-1 inputs.
  Pick choose(int s, bool relax = false) {
    Stage& st = stages_[static_cast<std::size_t>(s)];
    Pick best{};
    for (auto [kind, chunk] : {std::pair{0, 0}, std::pair{0, 1}, std::pair{1, 1}, std::pair{1, 0}}) {
      const auto c = static_cast<std::size_t>(chunk);
      const std::int64_t next = kind == 0 ? st.next_b[c] : st.next_f[c];
      const bool capped = st.in_flight >= cap_ && (chunk == 0 || !relax);
      if (next >= per_chunk_ || (kind == 1 && capped)) continue;
      const std::int64_t r = ready(kind == 0, virtual_stage(s, chunk), next);
      if (r == kNone) continue;
      const Pick pick{std::max(r, st.free), kind, chunk};
      if (pick.start <= st.free) return pick;
      if (best.kind < 0 || pick.start < best.start) best = pick;
    }
    if (!st.deferred.empty()) return {st.free, 2, st.deferred.front().first};
    return best;
  }

  void take(int s, const Pick& p) {
    Stage& st = stages_[static_cast<std::size_t>(s)];
    auto& out = out_[static_cast<std::size_t>(s)];
    const std::int64_t end = p.start + cost_[static_cast<std::size_t>(p.kind)];
    if (p.kind == 2) {
      const auto [chunk, mb] = st.deferred.front();
      st.deferred.pop_front();
      --st.in_flight;
      out.push_back(weight(global(mb, chunk), chunk));
    } else if (p.kind == 0) {
      const std::int64_t mb = st.next_b[static_cast<std::size_t>(p.chunk)]++;
      at(b_, virtual_stage(s, p.chunk), mb) = end;
      st.deferred.emplace_back(p.chunk, mb);
      out.push_back(input(global(mb, p.chunk), p.chunk));
    } else {
      const std::int64_t mb = st.next_f[static_cast<std::size_t>(p.chunk)]++;
      at(f_, virtual_stage(s, p.chunk), mb) = end;
      ++st.in_flight;
      out.push_back(forward(global(mb, p.chunk), p.chunk));
    }
    st.free = end;
  }

  // The step's micro-batch of a chunk's mb-th: DualPipe's chunk 1 runs the second half.
  [[nodiscard]] std::int64_t global(std::int64_t mb, int chunk) const {
    return dual_ && chunk == 1 ? per_chunk_ + mb : mb;
  }

  int pp_;
  std::int64_t m_;
  bool dual_;
  std::int64_t per_chunk_;            // micro-batches through each chunk
  std::int64_t cap_;                  // chunk micro-batches in flight per stage
  std::array<std::int64_t, 3> cost_;  // ticks of B, F, W (by Pick::kind)
  std::vector<std::int64_t> f_, b_;   // [virtual stage][micro-batch]: end of its F, B
  std::vector<Stage> stages_;
  std::vector<std::vector<PipelineSlot>> out_;
};

}  // namespace

PassTimes layer_pass_times(const models::StepGraph& graph) {
  double f = 0, b = 0, w = 0;
  for (const auto& u : graph.units) {
    if (u.kind != models::UnitKind::Layer) continue;
    for (const auto& op : u.forward) f += op.flops.count();
    for (const auto& op : u.backward) (op.phase == models::Phase::BackwardWeight ? w : b) += op.flops.count();
  }
  if (f <= 0 || b <= 0 || w <= 0) return {};
  return {1.0, b / f, w / f};
}

std::vector<std::vector<PipelineSlot>> pipeline_orders(int pp, int vpp, std::int64_t m, PipelineSchedule schedule,
                                                       PassTimes times) {
  return traits(schedule).orders(pp, vpp, m, times);
}

namespace {

using Orders = std::vector<std::vector<PipelineSlot>>;

Orders one_f_one_b_orders(int pp, int vpp, std::int64_t m, PassTimes) {
  Orders out;
  for (int s = 0; s < pp; ++s) out.push_back(pipeline_order(s, pp, vpp, m));
  return out;
}
Orders zb_h1_orders(int pp, int, std::int64_t m, PassTimes) {
  Orders out;
  for (int s = 0; s < pp; ++s) out.push_back(zb_h1(s, pp, m));
  return out;
}
Orders zb_v_orders(int pp, int, std::int64_t m, PassTimes times) { return VSchedule(pp, m, times).run(); }
Orders dualpipe_orders(int pp, int, std::int64_t m, PassTimes times) {
  return VSchedule(pp, m, times, /*dual=*/true).run();
}
// Micro-batches enter from both ends in pairs, and stage p pairs with its
// mirror pp - 1 - p.
std::optional<core::Problem> dualpipe_check(int pp, int vpp, std::int64_t m) {
  if (vpp == 1 && pp >= 2 && pp % 2 == 0 && m % 2 == 0 && m >= pp) return std::nullopt;
  return core::Problem{"pipeline_schedule",
                       fmt::format("dualpipe needs vpp 1 (each stage holds its mirror's copy as a second chunk), an "
                                   "even pp >= 2 and an even number of micro-batches >= pp; got pp {}, vpp {}, {} "
                                   "micro-batches",
                                   pp, vpp, m)};
}

// The built-ins, in kPipelineSchedules' order and under its names.
constexpr std::string_view name(PipelineSchedule s) { return core::name_of(kPipelineSchedules, s); }

struct ScheduleRegistry {
  std::mutex mutex;
  std::vector<PipelineScheduleTraits> list{
      {PipelineSchedule::OneFOneB, name(PipelineSchedule::OneFOneB), false, false, false, 0, true, 1,
       &one_f_one_b_orders},
      {PipelineSchedule::ZbH1, name(PipelineSchedule::ZbH1), true, false, false, 1, false, 1, &zb_h1_orders},
      {PipelineSchedule::ZbV, name(PipelineSchedule::ZbV), true, true, false, 2, false, 2, &zb_v_orders},
      {PipelineSchedule::DualPipe, name(PipelineSchedule::DualPipe), true, false, true, 1, false, 1, &dualpipe_orders,
       &dualpipe_check},
  };
};

ScheduleRegistry& schedule_registry() {
  static ScheduleRegistry r;
  return r;
}

}  // namespace

const std::vector<PipelineScheduleTraits>& pipeline_schedules() { return schedule_registry().list; }

const PipelineScheduleTraits& traits(PipelineSchedule s) {
  const auto& list = pipeline_schedules();
  const auto i = static_cast<std::size_t>(s);
  if (i >= list.size()) throw std::logic_error(fmt::format("no pipeline schedule {}", static_cast<int>(s)));
  return list[i];
}

PipelineSchedule register_pipeline_schedule(PipelineScheduleTraits t) {
  ScheduleRegistry& r = schedule_registry();
  const std::lock_guard lock(r.mutex);
  for (const auto& e : r.list) {
    if (e.name == t.name) throw std::logic_error(fmt::format("pipeline schedule {} registered twice", t.name));
  }
  t.schedule = static_cast<PipelineSchedule>(r.list.size());
  r.list.push_back(t);
  return t.schedule;
}

std::string_view to_string(PipelineSchedule s) { return traits(s).name; }

std::optional<PipelineSchedule> parse_pipeline_schedule(std::string_view s) {
  for (const auto& t : pipeline_schedules()) {
    if (t.name == s) return t.schedule;
  }
  return std::nullopt;
}

}  // namespace hzp::plan
