// Peer links: which op of another rank class is the other side of each
// collective, send and receive (see timeline.hpp).
#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "traces/timeline.hpp"

namespace hzp::traces {
namespace {

// One program's ops that pair with other classes, found by what a peer
// class knows of them.
struct PeerIndex {
  std::map<std::pair<core::GroupKind, int>, int> collective;  // (group kind, seq) -> op id
  std::map<std::tuple<core::OpKind, int, int>, int> p2p;      // (kind, peer's program, seq) -> op id
};

}  // namespace

std::vector<FlowLink> peer_links(const core::Schedule& s) {
  int world = 0;
  for (const core::Program& p : s.programs) {
    if (!p.ranks.empty()) world = std::max(world, p.ranks.back() + 1);
  }
  std::vector<int> program_of(static_cast<std::size_t>(world), -1);
  for (const core::Program& p : s.programs) {
    for (int r : p.ranks) program_of[static_cast<std::size_t>(r)] = p.id;
  }
  auto owner = [&](int rank) { return rank >= 0 && rank < world ? program_of[static_cast<std::size_t>(rank)] : -1; };
  // The classes each group spans, ascending: computed once per group.
  std::vector<std::vector<int>> spans(s.groups.size());
  for (std::size_t g = 0; g < s.groups.size(); ++g) {
    for (int r : s.groups[g].ranks) spans[g].push_back(owner(r));
    std::sort(spans[g].begin(), spans[g].end());
    spans[g].erase(std::unique(spans[g].begin(), spans[g].end()), spans[g].end());
  }
  std::vector<PeerIndex> index(s.programs.size());
  for (const core::Program& p : s.programs) {
    PeerIndex& ix = index[static_cast<std::size_t>(p.id)];
    for (const core::Stream& st : p.streams) {
      for (const core::Op& op : st.ops) {
        if (op.kind == core::OpKind::Collective) {
          ix.collective.emplace(std::pair{s.group(op.collective().group).kind, op.collective().seq}, op.id);
        } else if (op.kind == core::OpKind::Send || op.kind == core::OpKind::Recv) {
          ix.p2p.emplace(std::tuple{op.kind, owner(op.transfer().peer), op.transfer().seq}, op.id);
        }
      }
    }
  }
  std::vector<FlowLink> links;
  auto add = [&](const core::Program& p, const core::Op& op, int to, const auto& map, const auto& key) {
    if (to < 0 || to == p.id) return;
    const auto& m = index[static_cast<std::size_t>(to)].*map;
    if (const auto it = m.find(key); it != m.end()) links.push_back(FlowLink{p.id, op.id, to, it->second});
  };
  for (const core::Program& p : s.programs) {
    for (const core::Stream& st : p.streams) {
      for (const core::Op& op : st.ops) {
        if (op.kind == core::OpKind::Collective) {
          const core::Op::Collective& c = op.collective();
          const std::vector<int>& span = spans[static_cast<std::size_t>(c.group)];
          const auto next = std::upper_bound(span.begin(), span.end(), p.id);
          if (next != span.end()) add(p, op, *next, &PeerIndex::collective, std::pair{s.group(c.group).kind, c.seq});
        } else if (op.kind == core::OpKind::Send) {
          const core::Op::Transfer& t = op.transfer();
          add(p, op, owner(t.peer), &PeerIndex::p2p, std::tuple{core::OpKind::Recv, p.id, t.seq});
        }
      }
    }
  }
  std::sort(links.begin(), links.end(), [](const FlowLink& a, const FlowLink& b) {
    return std::tie(a.from_program, a.from_op) < std::tie(b.from_program, b.from_op);
  });
  return links;
}

}  // namespace hzp::traces
