// Schedule checker (see schedule_check.hpp).
#include "schedule/check.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <climits>
#include <cstdint>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.hpp"
#include "schedule/replay.hpp"

namespace hzp::core {
namespace {

[[noreturn]] void fail_at(const Program& p, const Stream& st, const Op& op, const std::string& why) {
  throw ScheduleError(
      fmt::format("program {} ('{}') stream '{}' op {} '{}': {}", p.id, p.name, st.name, op.id, op.name, why));
}

// (DualPipe's copies sum their gradients over pp_mirror, the dense class's op
// carrying the expert shards too.)
bool dense_dp(GroupKind k) {
  return k == GroupKind::DpShard || k == GroupKind::DpGrad || k == GroupKind::DpOptim || k == GroupKind::DpReplica ||
         k == GroupKind::DpRegather || k == GroupKind::DpAll || k == GroupKind::PpMirror;
}
bool expert_dp(GroupKind k) {
  return k == GroupKind::Edp || k == GroupKind::EdpGrad || k == GroupKind::EdpOptim || k == GroupKind::EdpReplica ||
         k == GroupKind::EdpRegather || k == GroupKind::EdpAll;
}

// What is wrong with an op's role and parameter class given its kind (empty:
// nothing). Other fits every kind; the sharding roles name a parameter class,
// and their collectives run on that class's data-parallel groups.
std::string role_problem(const Schedule& s, const Op& op) {
  using R = OpRole;
  const R r = op.role;
  bool fits = r == R::Other;
  switch (op.kind) {
    case OpKind::Compute:
      // A sharding collective's copies and (de)quantization are compute ops of its role.
      fits = fits || r == R::Forward || r == R::Backward || r == R::Recompute || r == R::GradAccumulate ||
             r == R::Optimizer || r == R::ZeroGrads || r == R::ParamGather || r == R::GradReduce;
      break;
    case OpKind::Collective:
      fits = fits || r == R::ModelParallel || r == R::Pipeline || r == R::ParamGather || r == R::GradReduce;
      break;
    case OpKind::Send:
    case OpKind::Recv: fits = fits || r == R::ModelParallel || r == R::Pipeline; break;
    default: break;
  }
  if (!fits) return fmt::format("role {} does not fit a {} op", to_string(r), to_string(op.kind));
  const bool sharding = r == R::ParamGather || r == R::GradReduce || r == R::GradAccumulate || r == R::Optimizer;
  if (sharding && op.param_class == ParamClass::None) {
    return fmt::format("role {} needs a parameter class (dense or expert)", to_string(r));
  }
  if (sharding && op.kind == OpKind::Collective && op.collective().group >= 0 &&
      static_cast<std::size_t>(op.collective().group) < s.groups.size()) {
    const GroupKind k = s.group(op.collective().group).kind;
    if (!(op.param_class == ParamClass::Dense ? dense_dp(k) : expert_dp(k))) {
      return fmt::format("{} parameters' {} collective on a {} group", to_string(op.param_class), to_string(r),
                         to_string(k));
    }
  }
  return {};
}

// Programs partition the ranks 0..world-1, each program's ranks ascending.
void check_rank_partition(const Schedule& s) {
  const auto world = static_cast<std::size_t>(s.step.world_size);
  std::vector<int> owner(world, -1);
  for (const Program& p : s.programs) {
    if (p.ranks.empty()) throw ScheduleError(fmt::format("program {} ('{}') has no ranks", p.id, p.name));
    for (int r : p.ranks) {
      if (r < 0 || static_cast<std::size_t>(r) >= world) {
        throw ScheduleError(fmt::format("program {} ('{}') lists rank {} outside 0..{}", p.id, p.name, r, world - 1));
      }
      if (owner[static_cast<std::size_t>(r)] >= 0) {
        throw ScheduleError(
            fmt::format("rank {} belongs to programs {} and {}", r, owner[static_cast<std::size_t>(r)], p.id));
      }
      owner[static_cast<std::size_t>(r)] = p.id;
    }
    if (!std::is_sorted(p.ranks.begin(), p.ranks.end())) {
      throw ScheduleError(fmt::format("program {} ('{}') ranks are not ascending", p.id, p.name));
    }
  }
  for (std::size_t r = 0; r < world; ++r) {
    if (owner[r] < 0) throw ScheduleError(fmt::format("rank {} belongs to no program", r));
  }
}

void check_groups(const Schedule& s) {
  const auto world = static_cast<std::size_t>(s.step.world_size);
  for (const Group& g : s.groups) {
    if (g.ranks.empty()) throw ScheduleError(fmt::format("group {} is empty", g.id));
    for (std::size_t i = 0; i < g.ranks.size(); ++i) {
      if (g.ranks[i] < 0 || static_cast<std::size_t>(g.ranks[i]) >= world || (i > 0 && g.ranks[i] <= g.ranks[i - 1])) {
        throw ScheduleError(fmt::format("group {} ranks must be distinct, ascending and in 0..{}", g.id, world - 1));
      }
    }
  }
}

// One program's ops, op by op, then what needs all of them: frees against
// allocs, collective sequence numbers in issue order, waited events recorded.
class ProgramCheck {
 public:
  ProgramCheck(const Schedule& s, const Program& p) : s_(s), p_(p) {}

  void run() {
    reserve_ids();
    for (const Stream& st : p_.streams) {
      if (st.thread < 0 || static_cast<std::size_t>(st.thread) >= p_.threads.size()) {
        throw ScheduleError(
            fmt::format("program {} stream '{}' names thread {}, which does not exist", p_.id, st.name, st.thread));
      }
      int previous = -1;
      for (const Op& op : st.ops) {
        if (!first_use(op.id)) fail_at(p_, st, op, "duplicate op id");
        if (op.id <= previous)
          fail_at(p_, st, op,
                  fmt::format("op ids must ascend along a stream (they are the host issue order); {} follows {}", op.id,
                              previous));
        previous = op.id;
        if (op.payload.index() != Op::payload_index(op.kind))
          fail_at(p_, st, op, fmt::format("a {} op carries another kind's payload", to_string(op.kind)));
        if (std::string why = role_problem(s_, op); !why.empty()) fail_at(p_, st, op, why);
        check_op(st, op);
      }
    }
    check_frees();
    check_seqs();
    check_waits();
  }

 private:
  // Op ids are dense in what the lowering writes: a bitmap over the range the
  // streams' first and last ids span (each stream ascends, or fails), a set
  // for any id outside it.
  void reserve_ids() {
    std::size_t n = 0;
    std::int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const Stream& st : p_.streams) {
      if (st.ops.empty()) continue;
      n += st.ops.size();
      lo = std::min<std::int64_t>(lo, st.ops.front().id);
      hi = std::max<std::int64_t>(hi, st.ops.back().id);
    }
    if (n == 0 || hi < lo || static_cast<std::uint64_t>(hi - lo) > 4 * n + 64) return;
    ids_lo_ = lo;
    seen_.assign(static_cast<std::size_t>(hi - lo + 1), 0);
  }
  bool first_use(int id) {
    const std::int64_t j = static_cast<std::int64_t>(id) - ids_lo_;
    if (j >= 0 && j < static_cast<std::int64_t>(seen_.size())) {
      char& bit = seen_[static_cast<std::size_t>(j)];
      if (bit) return false;
      bit = 1;
      return true;
    }
    return ids_.insert(id).second;
  }

  void check_op(const Stream& st, const Op& op) {
    switch (op.kind) {
      case OpKind::Record: {
        const int event = op.event().id;
        if (++records_[event] > 1) fail_at(p_, st, op, fmt::format("event {} is recorded twice", event));
        break;
      }
      case OpKind::Alloc: {
        const auto& b = op.buffer();
        if (b.bytes < Bytes(0)) fail_at(p_, st, op, "negative allocation");
        if (!allocs_.emplace(b.name, std::pair{b.bytes, b.buffer_class}).second)
          fail_at(p_, st, op, fmt::format("buffer '{}' is allocated twice", b.name));
        break;
      }
      case OpKind::Free: frees_.emplace_back(&st, &op); break;
      case OpKind::Collective: {
        const int group = op.collective().group;
        if (group < 0 || static_cast<std::size_t>(group) >= s_.groups.size())
          fail_at(p_, st, op, fmt::format("group {} does not exist", group));
        const Group& g = s_.group(group);
        if (!std::binary_search(g.ranks.begin(), g.ranks.end(), p_.ranks[0])) {
          fail_at(p_, st, op,
                  fmt::format("group {} does not contain the program's representative rank {}", group, p_.ranks[0]));
        }
        collectives_.emplace_back(op.id, &op);
        break;
      }
      case OpKind::Send:
      case OpKind::Recv: {
        const int peer = op.transfer().peer;
        if (peer < 0 || peer >= s_.step.world_size) fail_at(p_, st, op, fmt::format("peer {} is not a rank", peer));
        break;
      }
      default: break;
    }
  }

  // Every free matches an alloc of the same buffer, size and class, once; buffers
  // never freed stay live to the end of the step (model state).
  void check_frees() const {
    std::unordered_set<std::string_view> freed;
    freed.reserve(frees_.size());
    for (auto [st, op] : frees_) {
      const auto& b = op->buffer();
      auto it = allocs_.find(b.name);
      if (it == allocs_.end()) fail_at(p_, *st, *op, fmt::format("frees buffer '{}', which is not allocated", b.name));
      if (it->second.first != b.bytes)
        fail_at(p_, *st, *op,
                fmt::format("frees buffer '{}' with {} bytes, allocated with {}", b.name, b.bytes.count(),
                            it->second.first.count()));
      if (it->second.second != b.buffer_class)
        fail_at(p_, *st, *op,
                fmt::format("frees buffer '{}' as class {}, allocated as {}", b.name, to_string(b.buffer_class),
                            to_string(it->second.second)));
      if (!freed.insert(b.name).second) fail_at(p_, *st, *op, fmt::format("frees buffer '{}' twice", b.name));
    }
  }

  // Sequence numbers per group run 0, 1, 2, ... in the order the host issues them.
  void check_seqs() {
    std::vector<int> next_seq(s_.groups.size(), 0);  // group -> expected seq, in issue (id) order
    std::sort(collectives_.begin(), collectives_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [id, op] : collectives_) {
      const auto& c = op->collective();
      int& expect = next_seq[static_cast<std::size_t>(c.group)];
      if (c.seq != expect) {
        throw ScheduleError(
            fmt::format("program {} op {} '{}': collective on group {} has seq {}, expected {} (issue order)", p_.id,
                        op->id, op->name, c.group, c.seq, expect));
      }
      ++expect;
    }
  }

  void check_waits() const {
    for (const Stream& st : p_.streams) {
      for (const Op& op : st.ops) {
        if ((op.kind == OpKind::Wait || op.kind == OpKind::Sync) && !records_.contains(op.event().id))
          fail_at(p_, st, op, fmt::format("waits for event {}, which is never recorded", op.event().id));
      }
    }
  }

  const Schedule& s_;
  const Program& p_;
  std::int64_t ids_lo_ = 0;
  std::vector<char> seen_;  // [id - ids_lo_]
  std::set<int> ids_;       // ids outside seen_'s range
  std::unordered_map<int, int> records_;
  // By view: the Schedule's own buffer names outlive the check.
  std::unordered_map<std::string_view, std::pair<Bytes, BufferClass>> allocs_;
  std::vector<std::pair<const Stream*, const Op*>> frees_;
  std::vector<std::pair<int, const Op*>> collectives_;
};

void check_structure(const Schedule& s) {
  if (s.step.world_size <= 0) throw ScheduleError("step.world_size must be positive");
  check_rank_partition(s);
  check_groups(s);
  for (const Program& p : s.programs) ProgramCheck(s, p).run();
}

void check_collective_agreement(const Schedule& s) {
  // (group, seq) -> the first op seen, to compare every participant against.
  std::unordered_map<std::uint64_t, std::pair<const Program*, const Op*>> first;
  for (const Program& p : s.programs) {
    for (const Stream& st : p.streams) {
      for (const Op& op : st.ops) {
        if (op.kind != OpKind::Collective) continue;
        const auto& c = op.collective();
        const auto key =
            (static_cast<std::uint64_t>(static_cast<std::uint32_t>(c.group)) << 32) | static_cast<std::uint32_t>(c.seq);
        auto [it, inserted] = first.try_emplace(key, &p, &op);
        if (inserted) continue;
        const auto& o = it->second.second->collective();
        // All-to-all is all_to_allv: members may send different amounts.
        const bool sizes_may_differ = c.kind == CollectiveKind::AllToAll;
        if (o.kind != c.kind || (o.bytes != c.bytes && !sizes_may_differ) || o.dtype != c.dtype) {
          fail_at(
              p, st, op,
              fmt::format("collective on group {} seq {} is {} of {} bytes {}, but program {} issues {} of {} bytes {}",
                          c.group, c.seq, to_string(c.kind), c.bytes.count(), to_string(c.dtype), it->second.first->id,
                          to_string(o.kind), o.bytes.count(), to_string(o.dtype)));
        }
      }
    }
  }
}

}  // namespace

void check_schedule(const Schedule& s, Progress progress) {
  check_structure(s);
  check_collective_agreement(s);
  if (progress == Progress::Walk) (void)replay(s, ReplayCosts{});
}

}  // namespace hzp::core
