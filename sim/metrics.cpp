// Step metrics (see metrics.hpp).
#include "sim/metrics.hpp"

#include <algorithm>

namespace hzp::sim {
namespace {

using Interval = std::pair<std::int64_t, std::int64_t>;

std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (auto iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

// Length of a \ b for merged, sorted interval lists.
std::int64_t minus_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::int64_t total = 0;
  std::size_t j = 0;
  for (auto [s, e] : a) {
    std::int64_t cur = s;
    while (j < b.size() && b[j].second <= cur) ++j;
    std::size_t k = j;
    while (cur < e) {
      if (k >= b.size() || b[k].first >= e) {
        total += e - cur;
        break;
      }
      if (b[k].first > cur) total += b[k].first - cur;
      cur = std::max(cur, b[k].second);
      ++k;
    }
  }
  return total;
}

std::int64_t length(const std::vector<Interval>& a) {
  std::int64_t n = 0;
  for (auto [s, e] : a) n += e - s;
  return n;
}

// The class of every buffer a program allocates (its name is unique there),
// as the report names it: "act", "params", "pool.gathered", ...
std::map<std::string, std::string> buffer_classes(const core::Program& p) {
  std::map<std::string, std::string> out;
  for (const auto& st : p.streams) {
    for (const auto& op : st.ops) {
      if (op.kind == core::OpKind::Alloc)
        out.emplace(op.buffer().name, std::string(core::to_string(op.buffer().buffer_class)));
    }
  }
  return out;
}

}  // namespace

bool Metrics::fits() const {
  return std::all_of(memory.begin(), memory.end(), [](const ProgramMemory& m) { return m.fits; });
}

core::Bytes Metrics::host_memory() const {
  core::Bytes h{};
  for (const auto& m : memory) h = std::max(h, m.host);
  return h;
}

bool Metrics::host_fits() const {
  return std::all_of(memory.begin(), memory.end(), [](const ProgramMemory& m) { return m.host_fits; });
}

core::Bytes Metrics::peak_reserved() const {
  core::Bytes p{};
  for (const auto& m : memory) p = std::max(p, m.peak_reserved);
  return p;
}

const ProgramMemory* Metrics::worst_memory() const {
  const ProgramMemory* w = nullptr;
  for (const auto& m : memory) {
    if (!w || m.peak_reserved > w->peak_reserved) w = &m;
  }
  return w;
}

core::Bytes Metrics::peak_memory() const {
  core::Bytes p{};
  for (const auto& m : memory) p = std::max(p, m.peak);
  return p;
}

Metrics compute_metrics(const core::Schedule& s, const traces::Timeline& t, const topologies::DeviceProfile& device) {
  Metrics m;
  core::StepSpan span;  // a Timeline's ops are the timed ones (core::is_timed)
  for (const auto& r : t.ops) span.add(r.start, r.end);
  m.step_time = span.step();
  const double secs = m.step_time.to_seconds();
  if (secs > 0) {
    m.tokens_per_s = static_cast<double>(s.step.tokens()) / secs;
    m.model_tflops_per_gpu =
        core::FlopRate::from_flops_per_s(s.step.model_flops.count() / secs / s.step.world_size).TFLOPs();
    m.mfu = m.model_tflops_per_gpu / device.peak_tflops.at(core::Dtype::Bf16);
  }

  const std::size_t np = s.programs.size();
  std::vector<std::vector<Interval>> compute(np);
  std::vector<std::map<std::string, std::vector<Interval>>> comm(np);
  std::map<std::pair<int, int>, std::int64_t> busy;
  for (const auto& r : t.ops) {
    const auto p = static_cast<std::size_t>(r.program);
    const core::Stream& st = s.programs.at(p).streams.at(static_cast<std::size_t>(r.stream));
    Interval iv{r.start.count_ns(), r.end.count_ns()};
    busy[{r.program, r.stream}] += iv.second - iv.first;
    if (r.kind == core::OpKind::Compute && st.kind == core::StreamKind::Compute) compute[p].push_back(iv);
    if (r.kind == core::OpKind::Collective) comm[p][std::string(core::to_string(r.group_kind))].push_back(iv);
    if (r.kind == core::OpKind::Send || r.kind == core::OpKind::Recv) comm[p]["p2p"].push_back(iv);
  }
  for (std::size_t p = 0; p < np; ++p) {
    auto c = merged(compute[p]);
    m.compute_idle = std::max(m.compute_idle, core::Duration::ns(m.step_time.count_ns() - length(c)));
    for (auto& [kind, ivs] : comm[p]) {
      auto exposed = core::Duration::ns(minus_length(merged(ivs), c));
      auto& slot = m.exposed_comm[kind];
      slot = std::max(slot, exposed);
    }
    for (const auto& st : s.programs[p].streams) {
      double f = secs > 0 ? static_cast<double>(busy[{static_cast<int>(p), st.id}]) /
                                static_cast<double>(m.step_time.count_ns())
                          : 0;
      m.busy.push_back(StreamBusy{static_cast<int>(p), st.name, f});
    }
  }
  m.split = time_split(s, t, m.step_time);
  const core::Bytes capacity = core::gib(device.hbm_GiB);
  for (std::size_t p = 0; p < np; ++p) {
    ProgramMemory pm{static_cast<int>(p), s.programs[p].name, core::Bytes(0), core::Bytes(0), true, {}};
    const std::map<std::string, std::string> class_of = buffer_classes(s.programs[p]);
    std::map<std::string, core::Bytes> live;  // buffer -> bytes
    for (const auto& pt : t.memory) {
      if (pt.program != static_cast<int>(p)) continue;
      if (pt.delta.count() > 0 || (pt.delta.count() == 0 && !live.contains(pt.buffer))) {
        live[pt.buffer] = pt.delta;
      } else {
        live.erase(pt.buffer);
      }
      pm.peak_reserved = std::max(pm.peak_reserved, pt.reserved);
      if (pt.in_use > pm.peak || pm.at_peak.empty()) {
        pm.peak = std::max(pm.peak, pt.in_use);
        std::map<std::string, core::Bytes> by_class;
        for (const auto& [name, bytes] : live) {
          auto it = class_of.find(name);
          by_class[it != class_of.end() ? it->second : "other"] += bytes;  // other: not in this Schedule
        }
        pm.at_peak.assign(by_class.begin(), by_class.end());
      }
    }
    std::stable_sort(pm.at_peak.begin(), pm.at_peak.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    pm.host = s.programs[p].host_bytes;
    pm.host_fits = pm.host.count() == 0 || pm.host <= core::gib(device.host_memory_GiB_per_device);
    pm.fits = std::max(pm.peak, pm.peak_reserved) <= capacity && pm.host_fits;
    m.memory.push_back(pm);
  }
  return m;
}

}  // namespace hzp::sim
