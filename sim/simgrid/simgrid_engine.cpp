// The SimGrid engine's driver (see simgrid_engine.hpp): checks the Schedule,
// simulates it in a forked child (simulation.hpp), reads the result back
// (result_wire.hpp) and emits the Timeline.
#include "sim/simgrid/simgrid_engine.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/options.hpp"
#include "core/subprocess.hpp"
#include "schedule/replay.hpp"
#include "sim/emit.hpp"
#include "sim/simgrid/module.hpp"
#include "sim/simgrid/result_wire.hpp"

namespace hzp::sim::simgrid {
namespace {

// Runs the simulation in a child process, which loads the SimGrid module
// (module.hpp), and returns what it reported.
SimResult simulate_forked(const core::Schedule& s, const cost::PerfModel& pm, const EngineOptions& o) {
  core::Child child(
      [&](int, int fd) {
        const std::string path = module_path();
        void* module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        void* entry = module ? ::dlsym(module, kSimulateEntry) : nullptr;
        if (!entry) {
          const char* err = ::dlerror();
          const std::string why = fmt::format("{}: {}", path, err ? err : "no entry point");
          // A module the environment names is the user's to fix; a missing one
          // beside the binary is a broken build.
          const char* env = std::getenv("HZP_SIMGRID_MODULE");
          const std::exception_ptr e =
              env && *env
                  ? std::make_exception_ptr(
                        core::InputError("environment", "HZP_SIMGRID_MODULE",
                                         fmt::format("expected the SimGrid module libhzp_simgrid.so, got {}", why)))
                  : std::make_exception_ptr(std::runtime_error(fmt::format(
                        "simgrid engine: cannot load the SimGrid module {} (build the hzp_simgrid target)", why)));
          (void)core::write_all_fd(fd, encode_error(e));
          return 0;
        }
        // A function pointer from dlsym's object pointer (POSIX guarantees it converts).
        SimulateEntry simulate = nullptr;
        std::memcpy(&simulate, &entry, sizeof simulate);
        simulate(s, pm, o, cost::collective_algorithms(), fd);
        return 0;
      },
      core::ChildOptions{});
  const std::string data = child.read_all();
  const core::ExitStatus status = child.wait();
  if (status.signaled) {
    throw std::runtime_error(fmt::format("simgrid engine: the simulation process died of signal {}", status.signal));
  }
  if (!status.ok() || data.empty()) {
    throw std::runtime_error(fmt::format("simgrid engine: the simulation process exited with status {}", status.code));
  }
  return decode_result(data);
}

}  // namespace

std::string module_path() {
  if (const char* env = std::getenv("HZP_SIMGRID_MODULE"); env && *env) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = exe.parent_path().parent_path() / "lib" / "libhzp_simgrid.so";
    if (std::filesystem::exists(beside, ec)) return beside.string();
  }
  return HZP_SIMGRID_MODULE_PATH;
}

namespace {

// The SimGrid 3.32 settings hzp passes on, each with the values that keep a
// simulation meaningful and finite (measured: surf/precision 1e300 and
// network/bandwidth-factor 1e-6 stall it, maxmin/precision 1 and the Constant
// network model abort it, contexts/stack-size 1 crashes it). The settings hzp
// sets itself (contexts/factory) and the parallel ones are not among them.
const std::vector<core::OptionSpec>& simgrid_settings() {
  static const std::vector<core::OptionSpec> table = [] {
    using core::ValueType;
    auto number = [](const char* key, double lo, double hi) {
      return core::option_spec(key, ValueType::Number, "", lo, hi);
    };
    auto integer = [](const char* key, double lo, double hi) {
      return core::option_spec(key, ValueType::Integer, "", lo, hi);
    };
    auto choice = [](const char* key, std::vector<std::string> choices) {
      core::OptionSpec s = core::option_spec(key, ValueType::Choice, "");
      s.choices = std::move(choices);
      return s;
    };
    const std::vector<std::string> boolean{"0", "1", "no", "yes", "off", "on", "false", "true"};
    return std::vector<core::OptionSpec>{
        number("surf/precision", 1e-15, 1e-3),
        number("maxmin/precision", 1e-15, 1e-2),
        choice("network/model", {"CM02", "LV08", "SMPI", "IB"}),
        choice("network/optim", {"Lazy", "Full", "TI"}),
        choice("cpu/optim", {"Lazy", "Full", "TI"}),
        number("network/TCP-gamma", 0, 1e12),
        number("network/bandwidth-factor", 0.01, 100),
        number("network/latency-factor", 0, 100),
        number("network/weight-S", 0, 1e9),
        number("network/loopback-bw", 1, 1e15),
        number("network/loopback-lat", 0, 1),
        choice("network/crosstraffic", boolean),
        choice("network/maxmin-selective-update", boolean),
        choice("cpu/maxmin-selective-update", boolean),
        integer("contexts/stack-size", 64, 1048576),
        integer("contexts/guard-size", 0, 1024),
    };
  }();
  return table;
}

}  // namespace

std::vector<std::string> simgrid_setting_keys() {
  std::vector<std::string> keys;
  for (const auto& s : simgrid_settings()) keys.push_back(s.key);
  return keys;
}

void check_simgrid_settings(const std::vector<std::string>& settings) {
  for (const std::string& setting : settings) {
    const std::size_t colon = setting.find(':');
    if (colon == std::string::npos) {
      throw core::InputError("command line", "--simgrid-cfg", fmt::format("expected KEY:VALUE, got '{}'", setting));
    }
    const std::string key = setting.substr(0, colon);
    const core::OptionSpec* spec = nullptr;
    for (const auto& s : simgrid_settings()) {
      if (s.key == key) spec = &s;
    }
    if (spec == nullptr) {
      throw core::InputError("command line", "--simgrid-cfg",
                             fmt::format("expected one of the SimGrid settings hzp passes on ({}), got '{}'",
                                         fmt::join(simgrid_setting_keys(), ", "), key));
    }
    const core::Checked c = core::value_from_text(*spec, std::string_view(setting).substr(colon + 1));
    if (!c.problem.empty()) throw core::InputError("command line", "--simgrid-cfg", key + ": " + c.problem);
  }
}

std::int64_t estimate_flows(const core::Schedule& s, const cost::PerfModel& pm, bool all_ranks) {
  // Per member of a collective's group: one flow to the next member inside a
  // scale-up domain, and one more when the group leaves it (the ring's
  // channel across domains). With --ranks classes the groups of the same kind
  // without a representative add their flows only when they leave their leaf
  // switch (flows inside a leaf are dropped from the background).
  struct Reach {
    bool domain = false, leaf = false;
  };
  std::vector<Reach> reach(s.groups.size());
  for (const auto& g : s.groups) {
    const cost::GroupSpan span = pm.span(g.ranks);
    reach[static_cast<std::size_t>(g.id)] = Reach{span.domains > 1, span.top_tier >= 1};
  }
  std::int64_t flows = 0;
  for (const auto& p : s.programs) {
    const auto members = static_cast<std::int64_t>(p.ranks.size());
    for (const auto& st : p.streams) {
      for (const auto& op : st.ops) {
        if (op.kind == core::OpKind::Send || op.kind == core::OpKind::Recv) {
          flows += all_ranks ? members : 1;
        } else if (op.kind == core::OpKind::Collective) {
          const auto g = static_cast<std::size_t>(op.collective().group);
          const std::int64_t per_member = reach[g].domain ? 2 : 1;
          const auto group = static_cast<std::int64_t>(s.groups[g].ranks.size());
          flows += per_member * (all_ranks || reach[g].leaf ? members : group);
        }
      }
    }
  }
  return flows;
}

void SimGridEngine::check(const core::Schedule& s) const {
  check_simgrid_settings(options_.simgrid_config);
  const std::int64_t flows = estimate_flows(s, pm_, options_.ranks == "all");
  if (flows <= options_.max_flows) return;
  throw core::InputError(
      "command line", "--max-flows",
      fmt::format("the SimGrid simulation of {} would put about {} flows on the network (--ranks {}, {} GPUs), over "
                  "the limit of {}: raise --max-flows to run it, or use --ranks classes or --engine analytic",
                  s.name, flows, options_.ranks, pm_.topology().devices(), options_.max_flows));
}

void SimGridEngine::run(const core::Schedule& s, traces::TraceHeader header, traces::TraceSink& sink) {
  if (!HZP_HAVE_SIMGRID) {
    throw core::InputError("command line", "--engine",
                           "expected analytic: this hzp was built without SimGrid (a runtime-only build)");
  }
  check_fits(s, pm_.topology());
  check(s);
  // The walk with zero costs names the first offending op of a broken
  // Schedule before any actor runs.
  (void)core::replay(s, core::ReplayCosts{});
  SimResult r;
  try {
    r = simulate_forked(s, pm_, options_);
  } catch (const std::runtime_error& e) {
    // SimGrid aborts on a setting it does not know or accept.
    const bool died = std::string(e.what()).find("simulation process died") != std::string::npos;
    if (!died || options_.simgrid_config.empty()) throw;
    throw core::InputError("command line", "--simgrid-cfg",
                           fmt::format("expected SimGrid settings it accepts (key:value), got '{}' ({})",
                                       fmt::join(options_.simgrid_config, " "), e.what()));
  }
  header.engine = name();
  const int world = pm_.topology().devices();
  header.engine_detail = fmt::format(
      "ranks={} ({} of {} ranks in detail), {} NCCL channels, {} flows, compute slowdown under "
      "collectives {}",
      options_.ranks, r.ranks_simulated, world, options_.nccl_channels, r.flows,
      options_.interference ? pm_.topology().spec().device.comm_compute_slowdown : 1.0);
  if (header.schedule_sha256.empty()) header.schedule_sha256 = core::schedule_hash(s);
  header.schedule_name = s.name;
  header.schedule_provenance_json = s.provenance_json;
  emit_timeline(s, r.times, header, sink);
}

}  // namespace hzp::sim::simgrid
