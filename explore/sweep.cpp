// Sweeps (see sweep.hpp): spec, expansion, one point, and the runner that
// farms points out to worker processes and records them in the database.
#include "explore/sweep.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "explore/sweep_db.hpp"
#include "plan/options.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_reader.hpp"
#include "core/sha256.hpp"
#include "core/subprocess.hpp"

namespace hzp::explore {
namespace {

using json = nlohmann::ordered_json;

// Every key a sweep may set: the scenario's options, then the plan's.
const core::OptionSpec* find_key(std::string_view key) {
  if (const ScenarioOption* row = find_scenario_option(key)) return &row->spec;
  if (const plan::PlanOption* row = plan::find_plan_option(key)) return &row->spec;
  return nullptr;
}

std::vector<std::string> known_keys() {
  std::vector<std::string> keys;
  for (const auto& row : scenario_option_table()) keys.push_back(row.spec.key);
  for (const auto& row : plan::plan_option_table()) keys.push_back(row.spec.key);
  return keys;
}

core::InputError unknown_key(const std::string& key, const std::string& file, const std::string& where) {
  const auto near = core::closest(key, known_keys());
  std::string all;
  for (const auto& k : known_keys()) all += (all.empty() ? "" : ", ") + k;
  return core::InputError(file, where,
                          near ? fmt::format("unknown key '{}' (did you mean '{}'?)", key, *near)
                               : fmt::format("unknown key '{}': expected one of {}", key, all));
}

// Checks one value against its key's option; returns it normalised.
// The point's inputs as columns (every input key has one), for the rows of
// points that fail before they resolve.
void copy_input_columns(const json& inputs, json& row) {
  for (const auto& [key, value] : inputs.items()) row[key] = value;
}

json check_value(const std::string& key, const json& v, const std::string& file, const std::string& where) {
  const core::OptionSpec* spec = find_key(key);
  if (!spec) throw unknown_key(key, file, where);
  core::Checked c = core::check_value(*spec, v);
  if (!c.problem.empty()) throw core::InputError(file, where, c.problem);
  return c.value;
}

// A value typed from `--set` text: integer, number, boolean or string.
json value_from_text(const std::string& s) {
  if (s == "true") return true;
  if (s == "false") return false;
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() <= 15) return std::stoll(s);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && end && *end == '\0' && std::isfinite(d)) return d;
  return s;
}

// Filters: "a op b", "a * b op c", "a divides b".
struct Filter {
  std::vector<std::string> lhs;  // operands multiplied
  std::string op;
  std::string rhs;
  std::string text;
};

Filter parse_filter(const std::string& text, const std::string& file, const std::string& where) {
  std::istringstream in(text);
  std::vector<std::string> tok;
  for (std::string t; in >> t;) tok.push_back(t);
  Filter f;
  f.text = text;
  static const std::set<std::string> ops = {"<", "<=", "==", "!=", ">=", ">", "divides"};
  std::size_t i = 0;
  if (tok.empty()) throw core::InputError(file, where, "expected a filter like 'tp * pp <= 8', got nothing");
  f.lhs.push_back(tok[i++]);
  while (i + 1 < tok.size() && tok[i] == "*") {
    f.lhs.push_back(tok[i + 1]);
    i += 2;
  }
  if (i + 2 != tok.size() || !ops.count(tok[i])) {
    throw core::InputError(
        file, where,
        fmt::format("expected 'KEY [* KEY] OP KEY' with OP one of < <= == != >= > divides, got '{}'", text));
  }
  f.op = tok[i];
  f.rhs = tok[i + 1];
  for (const auto& operand : f.lhs) {
    if (!find_key(operand) && value_from_text(operand).is_string()) {
      throw core::InputError(file, where, fmt::format("unknown key '{}' in filter '{}'", operand, text));
    }
  }
  return f;
}

std::optional<double> operand(const std::string& name, const json& point) {
  auto it = point.find(name);
  if (it != point.end()) {
    if (it->is_number()) return it->get<double>();
    return std::nullopt;
  }
  json v = value_from_text(name);
  if (v.is_number()) return v.get<double>();
  return std::nullopt;  // a key the point leaves at its default: the filter does not apply
}

bool passes(const Filter& f, const json& point) {
  double l = 1;
  for (const auto& name : f.lhs) {
    auto v = operand(name, point);
    if (!v) return true;
    l *= *v;
  }
  auto r = operand(f.rhs, point);
  if (!r) return true;
  if (f.op == "<") return l < *r;
  if (f.op == "<=") return l <= *r;
  if (f.op == "==") return l == *r;
  if (f.op == "!=") return l != *r;
  if (f.op == ">=") return l >= *r;
  if (f.op == ">") return l > *r;
  return l != 0 && std::fmod(*r, l) == 0;  // divides
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<long long>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

}  // namespace

json sweep_schema() {
  json props = json::object();
  json axes = json::object();
  const Scenario sc;
  const plan::PlanOptions o;
  auto add = [&](const core::OptionSpec& spec, const nlohmann::json& def) {
    props[spec.key] = core::schema_property(spec, def);
    axes[spec.key] = {{"type", "array"}, {"minItems", 1}, {"items", core::schema_property(spec, def)}};
  };
  for (const auto& row : scenario_option_table()) add(row.spec, row.get(sc));
  for (const auto& row : plan::plan_option_table()) add(row.spec, row.get(o));
  return {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"$id", "hzp/sweep.schema.json"},
          {"title", "hzp sweep spec (hzp sweep --spec FILE)"},
          {"type", "object"},
          {"additionalProperties", false},
          {"required", {"schema_version"}},
          {"properties",
           {{"schema_version", {{"const", 1}}},
            {"base", {{"type", "object"}, {"additionalProperties", false}, {"properties", props}}},
            {"axes",
             {{"type", "object"},
              {"additionalProperties", false},
              {"description", "swept keys in order: the last varies fastest"},
              {"properties", axes}}},
            {"where",
             {{"type", "array"},
              {"items", {{"type", "string"}}},
              {"description", "filters: 'KEY|NUMBER [* KEY|NUMBER] OP KEY|NUMBER' (OP < <= == != >= > divides)"}}}}}};
}

json SweepSpec::to_json() const {
  json axes_json = json::object();
  for (const auto& [k, vs] : axes) axes_json[k] = vs;
  return json{{"schema_version", 1}, {"base", base}, {"axes", axes_json}, {"where", where}};
}

std::string SweepSpec::hash() const { return core::sha256_hex(to_json().dump()); }

SweepSpec sweep_from_json(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw core::InputError(file, "", fmt::format("expected JSON ({})", e.what()));
  }
  if (!j.is_object()) throw core::InputError(file, "", "expected a JSON object");
  SweepSpec s;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "schema_version") {
      if (*it != 1) throw core::InputError(file, "schema_version", fmt::format("expected 1, got {}", it->dump()));
    } else if (k == "base") {
      if (!it->is_object()) throw core::InputError(file, "base", "expected an object of key: value");
      for (auto b = it->begin(); b != it->end(); ++b) {
        s.base[b.key()] = check_value(b.key(), *b, file, "base." + b.key());
      }
    } else if (k == "axes") {
      if (!it->is_object()) throw core::InputError(file, "axes", "expected an object of key: [values]");
      for (auto a = it->begin(); a != it->end(); ++a) {
        if (!a->is_array() || a->empty()) {
          throw core::InputError(file, "axes." + a.key(), "expected a non-empty array of values");
        }
        std::vector<json> values;
        for (std::size_t i = 0; i < a->size(); ++i) {
          values.push_back(check_value(a.key(), (*a)[i], file, fmt::format("axes.{}[{}]", a.key(), i)));
        }
        s.axes.emplace_back(a.key(), std::move(values));
      }
    } else if (k == "where") {
      if (!it->is_array()) throw core::InputError(file, "where", "expected an array of filter strings");
      for (std::size_t i = 0; i < it->size(); ++i) {
        if (!(*it)[i].is_string()) throw core::InputError(file, fmt::format("where[{}]", i), "expected a string");
        (void)parse_filter((*it)[i].get<std::string>(), file, fmt::format("where[{}]", i));
        s.where.push_back((*it)[i].get<std::string>());
      }
    } else {
      throw core::InputError(file, k, "unknown key: expected schema_version, base, axes, where");
    }
  }
  if (!j.contains("schema_version")) throw core::InputError(file, "schema_version", "expected 1");
  return s;
}

void add_set(SweepSpec& spec, const std::string& set) {
  const auto eq = set.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == set.size()) {
    throw core::InputError("command line", "--set", fmt::format("expected key=v1,v2,..., got '{}'", set));
  }
  const std::string key = set.substr(0, eq);
  const core::OptionSpec* option = find_key(key);
  if (!option) throw unknown_key(key, "command line", "--set " + key);
  std::vector<json> values;
  std::stringstream in(set.substr(eq + 1));
  for (std::string v; std::getline(in, v, ',');) {
    core::Checked c = core::value_from_text(*option, v);
    if (!c.problem.empty()) throw core::InputError("command line", "--set " + key, c.problem);
    values.push_back(c.value);
  }
  if (values.size() == 1) {
    spec.base[key] = values[0];
  } else {
    spec.axes.emplace_back(key, std::move(values));
  }
}

std::vector<SweepPoint> expand(const SweepSpec& spec, const std::string& file) {
  std::vector<Filter> filters;
  for (std::size_t i = 0; i < spec.where.size(); ++i) {
    filters.push_back(parse_filter(spec.where[i], file, fmt::format("where[{}]", i)));
  }
  std::set<std::string> seen;
  for (const auto& [k, vs] : spec.axes) {
    if (!seen.insert(k).second || spec.base.contains(k)) {
      throw core::InputError(file, "axes." + k, "expected each key once (in base or in axes)");
    }
  }
  std::int64_t total = 1;
  for (const auto& [k, vs] : spec.axes) {
    total *= static_cast<std::int64_t>(vs.size());
    if (total > 10'000'000) throw core::InputError(file, "axes", "expected at most 10 million points");
  }
  std::vector<SweepPoint> points;
  for (std::int64_t idx = 0; idx < total; ++idx) {
    json inputs = spec.base;
    std::int64_t rest = idx;
    for (auto it = spec.axes.rbegin(); it != spec.axes.rend(); ++it) {  // the last axis varies fastest
      const auto n = static_cast<std::int64_t>(it->second.size());
      inputs[it->first] = it->second[static_cast<std::size_t>(rest % n)];
      rest /= n;
    }
    if (!std::all_of(filters.begin(), filters.end(), [&](const Filter& f) { return passes(f, inputs); })) continue;
    // The identity of a point: its inputs with keys sorted.
    nlohmann::json sorted = nlohmann::json::parse(inputs.dump());
    points.push_back(SweepPoint{idx, inputs, sorted.dump()});
  }
  return points;
}

Scenario scenario_of(const json& in, const std::string& file) {
  Scenario sc;
  std::vector<core::Problem> problems;
  for (const auto& [key, value] : in.items()) {
    std::optional<core::Problem> p = find_scenario_option(key) ? set_scenario_option(sc, key, value)
                                                               : plan::set_plan_option(sc.plan, key, value);
    if (p) problems.push_back(*p);
  }
  if (!problems.empty()) {
    throw core::InputError(file, "", core::join_problems(problems, [](const std::string& k) { return k; }));
  }
  sc.strategies = {sc.plan.strategy};
  sc.hash_schedules = false;  // rows carry the input hashes; the Schedule's adds 20 ms per point
  return sc;
}

PointResult run_point(const SweepPoint& pt) {
  PointResult res;
  json& row = res.row;
  row["point"] = pt.index;
  row["key"] = pt.key;
  row["inputs"] = pt.inputs.dump();
  copy_input_columns(pt.inputs, row);
  row["hzp_version"] = core::version();
  row["git_revision"] = core::git_revision();
  const double t0 = now_s();
  try {
    Scenario sc = scenario_of(pt.inputs, "sweep point");
    ScenarioResult r = run_scenario(sc);
    const StrategyResult& run = r.runs.at(0);
    const sim::Metrics& m = run.metrics;
    // Every input as it was resolved: the scenario's, then the plan's (group
    // sizes, async and batch as they ran).
    for (const auto& option : scenario_option_table()) row[option.spec.key] = option.get(sc);
    row["model"] = r.model.name;
    row["cluster"] = r.cluster.name;
    row["engine"] = r.engine;
    row["nic_gbps"] = r.cluster.scale_out.nic_Gbps;
    row["oversubscription"] =
        r.cluster.scale_out.tiers.empty() ? 1.0 : r.cluster.scale_out.tiers.front().oversubscription;
    const json resolved = plan::plan_options_json(run.plan.options);
    for (const auto& [key, value] : resolved.items()) row[key] = value;
    row["engine_detail"] = r.engine_detail;
    row["model_sha256"] = r.model_sha256;
    row["cluster_sha256"] = r.cluster_sha256;
    row["step_time_s"] = m.step_time.to_seconds();
    row["tokens_per_s"] = m.tokens_per_s;
    row["tflops_per_gpu"] = m.model_tflops_per_gpu;
    row["mfu"] = m.mfu;
    double exposed = 0;
    for (const auto& [kind, d] : m.exposed_comm) exposed += d.to_seconds();
    row["exposed_comm_s"] = exposed;
    row["peak_memory_gib"] = m.peak_memory().gib();
    row["peak_reserved_gib"] = m.peak_reserved().gib();
    row["fits"] = m.fits();
    if (m.fits()) {
      res.status = "ok";
    } else {
      res.status = "infeasible";
      res.error = fmt::format("out of memory: {:.1f} GiB reserved per device, {} has {:.0f} GiB",
                              m.peak_reserved().gib(), r.cluster.device.name, r.cluster.device.hbm_GiB);
    }
  } catch (const core::InfeasibleError& e) {
    res.status = "infeasible";
    res.error = e.what();
  } catch (const std::exception& e) {
    res.status = "error";
    res.error = e.what();
  }
  row["wall_s"] = now_s() - t0;
  row["status"] = res.status;
  if (!res.error.empty()) row["error"] = res.error;
  return res;
}

std::pair<int, int> launcher_rank() {
  for (auto [r, n] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, std::pair{"PMI_RANK", "PMI_SIZE"},
                      std::pair{"SLURM_PROCID", "SLURM_NTASKS"}}) {
    const char* rv = std::getenv(r);
    const char* nv = std::getenv(n);
    if (rv && nv) {
      const int rank = std::atoi(rv), size = std::atoi(nv);
      if (size >= 1 && rank >= 0 && rank < size) return {rank, size};
    }
  }
  return {0, 1};
}

std::string shard_path(const std::string& db, int rank, int ranks) {
  const auto dot = db.rfind('.');
  const bool ext = dot != std::string::npos && db.find('/', dot) == std::string::npos;
  const std::string stem = ext ? db.substr(0, dot) : db;
  return fmt::format("{}.rank{}of{}{}", stem, rank, ranks, ext ? db.substr(dot) : ".db");
}

namespace {

// A worker process: reads point numbers (one per line) and writes one JSON
// result line each, until its input closes.
struct Worker {
  core::Child child;
  std::int64_t current = -1;  // index into the to_run list, -1 when idle
  std::string buffer;
};

int worker_main(const std::vector<SweepPoint>& to_run, int in, int out) {
  std::signal(SIGINT, SIG_IGN);                        // the parent decides when to stop
  const char* fault = std::getenv("HZP_SWEEP_FAULT");  // fault injection for tests: "abort@<point>"
  std::string line;
  char c = 0;
  while (true) {
    ssize_t n = ::read(in, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    if (c != '\n') {
      line += c;
      continue;
    }
    const auto& pt = to_run.at(static_cast<std::size_t>(std::stoll(line)));
    line.clear();
    if (fault && std::string(fault) == fmt::format("abort@{}", pt.index)) std::abort();
    PointResult r = run_point(pt);
    if (!core::write_all_fd(out, r.row.dump() + "\n")) return 1;
  }
}

Worker spawn(const std::vector<SweepPoint>& to_run, const std::vector<Worker>& others) {
  core::ChildOptions options;
  options.pipe_to_child = true;
  options.die_with_parent = true;  // never outlive the sweep
  for (const auto& w : others) {   // the other workers' pipes stay theirs
    options.close_in_child.push_back(w.child.to_child());
    options.close_in_child.push_back(w.child.from_child());
  }
  return Worker{core::Child([&to_run](int in, int out) { return worker_main(to_run, in, out); }, options), -1, {}};
}

void send(Worker& w, std::int64_t i) {
  std::string msg = fmt::format("{}\n", i);
  w.current = i;
  // A worker that is gone fails the write (EPIPE: SIGPIPE is ignored); its EOF
  // is handled by the main loop.
  (void)core::write_all_fd(w.child.to_child(), msg);
}

}  // namespace

SweepSummary run_sweep(const SweepSpec& spec, const std::string& spec_file, const SweepOptions& o) {
  SweepSummary sum;
  const double t0 = now_s();
  std::vector<SweepPoint> all = expand(spec, spec_file);
  std::vector<SweepPoint> mine;
  for (auto& p : all) {
    if (p.index % o.ranks == o.rank) mine.push_back(std::move(p));
  }
  sum.points = static_cast<std::int64_t>(mine.size());
  SweepDb db(o.db, spec.hash(), spec.to_json().dump());
  const std::set<std::string> done = db.done();
  std::vector<SweepPoint> to_run;
  for (auto& p : mine) {
    if (done.count(p.key)) {
      ++sum.skipped;
    } else {
      to_run.push_back(std::move(p));
    }
  }
  const std::string shard = o.ranks > 1 ? fmt::format("{}/{}", o.rank, o.ranks) : "";
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  say(fmt::format("sweep: {} points{}, {} already in {}, {} to run on {} worker{}", sum.points,
                  shard.empty() ? "" : " (rank " + shard + ")", sum.skipped, o.db, to_run.size(), o.jobs,
                  o.jobs == 1 ? "" : "s"));

  g_stop = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  struct sigaction old_int {
  }, old_term{};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);

  std::vector<Worker> workers;
  std::size_t next = 0, finished = 0;
  const int jobs = std::max(1, std::min<int>(o.jobs, static_cast<int>(std::max<std::size_t>(1, to_run.size()))));
  double last_progress = 0;
  auto record = [&](json row) {
    row["shard"] = shard.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(shard);
    const std::string status = row.value("status", "error");
    if (status == "ok") ++sum.ok;
    if (status == "infeasible") ++sum.infeasible;
    if (status == "error") ++sum.errors;
    db.add(row);
    ++finished;
    ++sum.ran;
  };
  auto progress = [&](bool final) {
    const double t = now_s();
    if (!final && t - last_progress < (o.progress_tty ? 0.2 : 5.0)) return;
    last_progress = t;
    const double rate = static_cast<double>(finished) / std::max(1e-9, t - t0);
    const double eta = (static_cast<double>(to_run.size()) - static_cast<double>(finished)) / std::max(1e-9, rate);
    const double frac = to_run.empty() ? 1.0 : static_cast<double>(finished) / static_cast<double>(to_run.size());
    if (o.progress_tty) {
      const int width = 30, filled = static_cast<int>(frac * width);
      std::string bar(static_cast<std::size_t>(filled), '=');
      if (filled < width) bar += '>' + std::string(static_cast<std::size_t>(width - filled - 1), ' ');
      say(fmt::format("\r[{}] {}/{} {:5.1f}%  {:.1f} points/s  ETA {}{}", bar, finished, to_run.size(), 100 * frac,
                      rate, fmt_duration(eta), final ? "\n" : ""));
    } else {
      say(fmt::format("sweep: {}/{} points ({:.1f}%), {:.1f} points/s, ETA {}\n", finished, to_run.size(), 100 * frac,
                      rate, fmt_duration(eta)));
    }
  };
  try {
    for (int j = 0; j < jobs && next < to_run.size(); ++j) {
      workers.push_back(spawn(to_run, workers));
      send(workers.back(), static_cast<std::int64_t>(next++));
    }
    while (finished < to_run.size() && !g_stop) {
      std::vector<pollfd> fds;
      for (const auto& w : workers) fds.push_back(pollfd{w.child.from_child(), POLLIN, 0});
      const int n = ::poll(fds.data(), fds.size(), 200);
      if (n < 0 && errno != EINTR) throw std::runtime_error(fmt::format("poll: {}", std::strerror(errno)));
      for (std::size_t k = 0; k < workers.size() && n > 0; ++k) {
        if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Worker& w = workers[k];
        char buf[1 << 14];
        const ssize_t got = ::read(w.child.from_child(), buf, sizeof buf);
        if (got > 0) {
          w.buffer.append(buf, static_cast<std::size_t>(got));
          std::size_t nl;
          while ((nl = w.buffer.find('\n')) != std::string::npos) {
            record(json::parse(w.buffer.substr(0, nl)));
            w.buffer.erase(0, nl + 1);
            w.current = -1;
            if (next < to_run.size()) send(w, static_cast<std::int64_t>(next++));
          }
          continue;
        }
        if (got < 0 && errno == EINTR) continue;
        // The worker died: its point is recorded as a crash, a new worker takes over.
        const core::ExitStatus st = w.child.kill();
        if (w.current >= 0) {
          const SweepPoint& pt = to_run[static_cast<std::size_t>(w.current)];
          json row{{"point", pt.index}, {"key", pt.key}, {"inputs", pt.inputs.dump()}, {"status", "error"}};
          row["error"] = st.signaled ? fmt::format("worker crashed (signal {}: {})", st.signal, ::strsignal(st.signal))
                                     : fmt::format("worker exited with status {}", st.code);
          row["hzp_version"] = core::version();
          row["git_revision"] = core::git_revision();
          copy_input_columns(pt.inputs, row);
          record(row);
        }
        workers.erase(workers.begin() + static_cast<std::ptrdiff_t>(k));
        if (next < to_run.size()) {
          workers.push_back(spawn(to_run, workers));
          send(workers.back(), static_cast<std::int64_t>(next++));
        }
        break;  // the fd list changed
      }
      progress(false);
    }
  } catch (...) {
    workers.clear();  // each worker is killed and reaped by its core::Child
    db.flush();
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
    throw;
  }
  workers.clear();
  db.flush();
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  sum.interrupted = g_stop != 0;
  progress(true);
  sum.seconds = now_s() - t0;
  return sum;
}

}  // namespace hzp::explore
