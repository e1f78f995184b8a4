// The GPU backend's decisions (see logic.hpp).
#include "runtime/device/logic.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/executor.hpp"

namespace hzp::runtime::device {

int op_peer(const core::Program& prog, const core::Op& op, int rank) {
  return op.transfer().peer - prog.ranks.at(0) + rank;
}

namespace {

// Every ordered pair (sender, receiver) some rank's send or recv names, sorted.
std::vector<std::pair<int, int>> transfer_pairs(const core::Schedule& s) {
  std::set<std::pair<int, int>> pairs;
  for (const core::Program& prog : s.programs) {
    for (const core::Stream& st : prog.streams) {
      for (const core::Op& op : st.ops) {
        if (op.kind != core::OpKind::Send && op.kind != core::OpKind::Recv) continue;
        for (int r : prog.ranks) {
          const int peer = op_peer(prog, op, r);
          pairs.insert(op.kind == core::OpKind::Send ? std::pair{r, peer} : std::pair{peer, r});
        }
      }
    }
  }
  return {pairs.begin(), pairs.end()};
}

// The pairs coloured into rounds, each rank in at most one pair of a round:
// a pure function of the Schedule, so every rank computes the same rounds.
std::vector<std::vector<std::pair<int, int>>> pair_rounds(const std::vector<std::pair<int, int>>& pairs) {
  std::vector<std::vector<std::pair<int, int>>> rounds;
  std::vector<std::set<int>> busy;
  for (const auto& pr : pairs) {
    std::size_t r = 0;
    while (r < rounds.size() && (busy[r].contains(pr.first) || busy[r].contains(pr.second))) ++r;
    if (r == rounds.size()) {
      rounds.emplace_back();
      busy.emplace_back();
    }
    rounds[r].push_back(pr);
    busy[r].insert({pr.first, pr.second});
  }
  return rounds;
}

}  // namespace

CommPlan plan_comms(const core::Schedule& s, int rank) {
  CommPlan plan;
  for (const SplitRound& round : comm_split_rounds(s)) {
    const std::optional<int> colour = split_colour(s, round, rank);
    if (colour) plan.group_comm[*colour] = plan.splits.size();
    plan.splits.push_back(CommSplit{fmt::format("{} groups", core::to_string(round.kind)), colour ? *colour : -1});
  }
  const auto rounds = pair_rounds(transfer_pairs(s));
  for (std::size_t r = 0; r < rounds.size(); ++r) {
    int colour = -1;
    for (std::size_t i = 0; i < rounds[r].size(); ++i) {
      const auto& [from, to] = rounds[r][i];
      if (from == rank || to == rank) {
        colour = static_cast<int>(i);
        plan.p2p_comm[rounds[r][i]] = plan.splits.size();
      }
    }
    plan.splits.push_back(CommSplit{fmt::format("send/recv pairs, round {}", r), colour});
  }
  return plan;
}

std::size_t comm_of(const CommPlan& comms, const RankPlan& plan, const core::Program& prog, const core::Op& op) {
  if (op.kind == core::OpKind::Collective) {
    return comms.group_comm.at(plan.group_of.at(static_cast<std::size_t>(op.collective().group)));
  }
  const int peer = op_peer(prog, op, plan.rank);
  return comms.p2p_comm.at(op.kind == core::OpKind::Send ? std::pair{plan.rank, peer} : std::pair{peer, plan.rank});
}

std::pair<CommType, std::size_t> comm_element(core::Dtype d) {
  switch (d) {
    case core::Dtype::Fp32: return {CommType::F32, 4};
    case core::Dtype::Fp16: return {CommType::F16, 2};
    case core::Dtype::Fp8: return {CommType::F8, 1};
    // Quantized ZeRO++ collectives move their bytes: int8 values, or int4
    // values packed two a byte (NCCL has no 4-bit type), as unsigned bytes.
    case core::Dtype::Int8:
    case core::Dtype::Int4: return {CommType::U8, 1};
    case core::Dtype::Bf16: break;
  }
  return {CommType::Bf16, 2};
}

bool is_comm(core::OpKind k) {
  return k == core::OpKind::Collective || k == core::OpKind::Send || k == core::OpKind::Recv;
}

void check_issue_order(const core::Program& p) {
  std::map<int, int> record_id;
  for (const core::Stream& st : p.streams) {
    for (const core::Op& op : st.ops) {
      if (op.kind == core::OpKind::Record) record_id[op.event().id] = op.id;
    }
  }
  for (const core::Stream& st : p.streams) {
    for (const core::Op& op : st.ops) {
      if (op.kind != core::OpKind::Wait && op.kind != core::OpKind::Sync) continue;
      auto it = record_id.find(op.event().id);
      if (it == record_id.end() || it->second > op.id) {
        throw RunError(
            fmt::format("rank class {}: op {} '{}' waits for event {}, which is not recorded by an earlier "
                        "op: the device backend issues in op id order and would hang",
                        p.id, op.id, op.name, op.event().id));
      }
    }
  }
}

std::set<std::string> persistent_buffers(const core::Program& p) {
  std::set<std::string> allocated, freed;
  for (const core::Stream& st : p.streams) {
    for (const core::Op& op : st.ops) {
      if (op.kind == core::OpKind::Alloc) allocated.insert(op.buffer().name);
      if (op.kind == core::OpKind::Free) freed.insert(op.buffer().name);
    }
  }
  std::set<std::string> out;
  std::set_difference(allocated.begin(), allocated.end(), freed.begin(), freed.end(), std::inserter(out, out.begin()));
  return out;
}

StepSync::StepSync(const core::Program& p) : tickets_(p.streams.size()) {
  std::vector<std::tuple<int, std::size_t, std::size_t>> comm_ops;  // (id, stream, index)
  for (std::size_t k = 0; k < p.streams.size(); ++k) {
    tickets_[k].assign(p.streams[k].ops.size(), -1);
    for (std::size_t i = 0; i < p.streams[k].ops.size(); ++i) {
      if (is_comm(p.streams[k].ops[i].kind)) comm_ops.emplace_back(p.streams[k].ops[i].id, k, i);
    }
  }
  std::sort(comm_ops.begin(), comm_ops.end());
  for (std::size_t t = 0; t < comm_ops.size(); ++t) {
    tickets_[std::get<1>(comm_ops[t])][std::get<2>(comm_ops[t])] = static_cast<int>(t);
  }
}

void StepSync::begin_step() {
  const std::lock_guard lock(m_);
  ++step_;
  turn_ = 0;
}

void StepSync::recorded(int event) {
  {
    const std::lock_guard lock(m_);
    recorded_[event] = step_;
  }
  cv_.notify_all();
}

void StepSync::block(const std::string& who, const std::function<bool()>& ready) {
  std::unique_lock lock(m_);
  if (ready() && !aborted_) return;
  auto mark = waiting_.insert(who);
  cv_.wait(lock, [&] { return aborted_ || ready(); });
  waiting_.erase(mark);
  if (aborted_) throw RunError(why_);
}

void StepSync::wait_recorded(int event, const std::string& who) {
  block(who, [&] {
    auto it = recorded_.find(event);
    return it != recorded_.end() && it->second == step_;
  });
}

void StepSync::take_turn(int ticket, const std::string& who) {
  block(who, [&] { return turn_ == ticket; });
}

void StepSync::end_turn() {
  {
    const std::lock_guard lock(m_);
    ++turn_;
  }
  cv_.notify_all();
}

void StepSync::abort(const std::string& why) {
  {
    const std::lock_guard lock(m_);
    if (!aborted_) why_ = why;
    aborted_ = true;
  }
  cv_.notify_all();
}

bool StepSync::aborted() const {
  const std::lock_guard lock(m_);
  return aborted_;
}

std::string StepSync::why() const {
  const std::lock_guard lock(m_);
  return why_;
}

std::vector<std::string> StepSync::waiting() const {
  const std::lock_guard lock(m_);
  return {waiting_.begin(), waiting_.end()};
}

bool WatchState::observe(std::size_t finished, bool pending, Clock::time_point now) {
  if (finished != seen_ || !pending) {
    seen_ = finished;
    last_ = now;
    return false;
  }
  return now - last_ > limit_;
}

}  // namespace hzp::runtime::device
