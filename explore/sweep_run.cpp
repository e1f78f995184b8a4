// The sweep runner (see sweep.hpp): points farmed out to worker processes,
// rows recorded in the database as they finish, a dead worker replaced.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <set>

#include "core/io.hpp"
#include "core/subprocess.hpp"
#include "explore/sweep.hpp"
#include "explore/sweep_db.hpp"

namespace hzp::explore {
namespace {

using json = nlohmann::ordered_json;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

// A worker process: reads point numbers (one per line) and writes one JSON
// result line each, until its input closes.
struct Worker {
  core::Child child;
  std::int64_t current = -1;  // index into the to_run list, -1 when idle
  std::string buffer;
};

int worker_main(const std::vector<SweepPoint>& to_run, const WorkLimits& limits, int in, int out) {
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
    PointResult r = run_point(pt, limits);
    if (!core::write_all_fd(out, r.row.dump() + "\n")) return 1;
  }
}

Worker spawn(const std::vector<SweepPoint>& to_run, const WorkLimits& limits, const std::vector<Worker>& others) {
  core::ChildOptions options;
  options.pipe_to_child = true;
  options.die_with_parent = true;  // never outlive the sweep
  for (const auto& w : others) {   // the other workers' pipes stay theirs
    options.close_in_child.push_back(w.child.to_child());
    options.close_in_child.push_back(w.child.from_child());
  }
  return Worker{
      core::Child([&to_run, &limits](int in, int out) { return worker_main(to_run, limits, in, out); }, options),
      -1,
      {}};
}

void send(Worker& w, std::int64_t i) {
  std::string msg = fmt::format("{}\n", i);
  w.current = i;
  // A worker that is gone fails the write (EPIPE: SIGPIPE is ignored); its EOF
  // is handled by the main loop.
  (void)core::write_all_fd(w.child.to_child(), msg);
}

}  // namespace

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

// One run of a sweep: its database, the points still to run, the workers
// running them, the counts and the progress line.
class Runner {
 public:
  Runner(const SweepSpec& spec, const std::string& spec_file, const SweepOptions& o);
  /// Runs every point (or until interrupted); returns the summary.
  SweepSummary run();

 private:
  void say(const std::string& s) const {
    if (o_.progress) o_.progress(s);
  }
  void record(json row);
  void progress(bool final);
  /// Reads what the worker at `k` wrote; false when it died (then replaced).
  bool read_from(std::size_t k);
  void replace_dead(std::size_t k);
  void loop();

  const SweepOptions& o_;
  const double t0_;
  SweepSummary sum_;
  std::vector<SweepPoint> mine_;  // expanded (and checked) before the database is opened
  std::vector<SweepPoint> to_run_;
  SweepDb db_;
  std::string shard_;
  std::vector<Worker> workers_;
  std::size_t next_ = 0, finished_ = 0;
  double last_progress_ = 0;
};

// The files and catalog names the points read (model, cluster, stack,
// calibration, with the cluster's what-ifs), each distinct combination
// resolved once before anything runs: a path to /dev/zero or a misspelt
// model is the sweep's bad input (exit 2), not a row of errors.
void check_inputs(const std::vector<SweepPoint>& points, const std::string& spec_file) {
  std::set<std::string> seen;
  for (const SweepPoint& p : points) {
    nlohmann::ordered_json files = nlohmann::ordered_json::object();
    for (const char* k :
         {"model", "cluster", "stack", "calibration", "nic_gbps", "oversubscription", "power_limit_w"}) {
      if (p.inputs.contains(k)) files[k] = p.inputs[k];
    }
    if (seen.insert(files.dump()).second) (void)resolve_inputs(scenario_of(p.inputs, spec_file));
  }
}

std::vector<SweepPoint> rank_points(const SweepSpec& spec, const std::string& spec_file, const SweepOptions& o) {
  std::vector<SweepPoint> mine;
  for (auto& p : expand(spec, spec_file)) {
    if (p.index % o.ranks == o.rank) mine.push_back(std::move(p));
  }
  check_inputs(mine, spec_file);
  return mine;
}

Runner::Runner(const SweepSpec& spec, const std::string& spec_file, const SweepOptions& o)
    : o_(o), t0_(now_s()), mine_(rank_points(spec, spec_file, o)), db_(o.db, spec.hash(), spec.to_json().dump()) {
  sum_.points = static_cast<std::int64_t>(mine_.size());
  const std::set<std::string> done = db_.done();
  for (auto& p : mine_) {
    if (done.count(p.key)) {
      ++sum_.skipped;
    } else {
      to_run_.push_back(std::move(p));
    }
  }
  mine_.clear();
  shard_ = o.ranks > 1 ? fmt::format("{}/{}", o.rank, o.ranks) : "";
  say(fmt::format("sweep: {} points{}, {} already in {}, {} to run on {} worker{}", sum_.points,
                  shard_.empty() ? "" : " (rank " + shard_ + ")", sum_.skipped, o.db, to_run_.size(), o.jobs,
                  o.jobs == 1 ? "" : "s"));
}

void Runner::record(json row) {
  row["shard"] = shard_.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(shard_);
  const std::string status = row.value("status", "error");
  if (status == "ok") ++sum_.ok;
  if (status == "infeasible") ++sum_.infeasible;
  if (status == "error") {
    ++sum_.errors;
    sum_.add_error(row.value("point", std::int64_t{-1}), row.value("error", std::string("(no message)")));
  }
  if (row.contains("batch_rounded_from") && !row["batch_rounded_from"].is_null()) ++sum_.rounded;
  db_.add(row);
  ++finished_;
  ++sum_.ran;
}

}  // namespace

void SweepSummary::add_error(std::int64_t point, const std::string& reason) {
  std::string kind;
  for (std::size_t i = 0; i < reason.size(); ++i) {
    const bool digit = std::isdigit(static_cast<unsigned char>(reason[i])) != 0;
    if (!digit) {
      kind += reason[i];
    } else if (kind.empty() || kind.back() != '#') {
      kind += '#';
    }
  }
  auto it = std::find_if(error_groups.begin(), error_groups.end(), [&](const ErrorGroup& g) { return g.kind == kind; });
  if (it == error_groups.end()) {
    error_groups.push_back({kind, fmt::format("point {}: {}", point, reason), 0});
    it = error_groups.end() - 1;
  }
  ++it->points;
}

std::string eta_text(std::int64_t finished, std::int64_t total, double elapsed_s) {
  if (finished <= 0 || elapsed_s <= 0 || !std::isfinite(elapsed_s)) return "after the first point";
  const double s = static_cast<double>(total - finished) * elapsed_s / static_cast<double>(finished);
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<long long>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

namespace {

void Runner::progress(bool final) {
  const double t = now_s();
  if (!final && t - last_progress_ < (o_.progress_tty ? 0.2 : 5.0)) return;
  last_progress_ = t;
  const double rate = static_cast<double>(finished_) / std::max(1e-9, t - t0_);
  const std::string eta =
      eta_text(static_cast<std::int64_t>(finished_), static_cast<std::int64_t>(to_run_.size()), t - t0_);
  const double frac = to_run_.empty() ? 1.0 : static_cast<double>(finished_) / static_cast<double>(to_run_.size());
  if (o_.progress_tty) {
    const int width = 30, filled = static_cast<int>(frac * width);
    std::string bar(static_cast<std::size_t>(filled), '=');
    if (filled < width) bar += '>' + std::string(static_cast<std::size_t>(width - filled - 1), ' ');
    say(fmt::format("\r[{}] {}/{} {:5.1f}%  {:.1f} points/s  ETA {}{}", bar, finished_, to_run_.size(), 100 * frac,
                    rate, eta, final ? "\n" : ""));
  } else {
    say(fmt::format("sweep: {}/{} points ({:.1f}%), {:.1f} points/s, ETA {}\n", finished_, to_run_.size(), 100 * frac,
                    rate, eta));
  }
}

bool Runner::read_from(std::size_t k) {
  Worker& w = workers_[k];
  char buf[1 << 14];
  const ssize_t got = ::read(w.child.from_child(), buf, sizeof buf);
  if (got < 0 && errno == EINTR) return true;
  if (got <= 0) return false;
  w.buffer.append(buf, static_cast<std::size_t>(got));
  std::size_t nl;
  while ((nl = w.buffer.find('\n')) != std::string::npos) {
    record(json::parse(w.buffer.substr(0, nl)));
    w.buffer.erase(0, nl + 1);
    w.current = -1;
    if (next_ < to_run_.size()) send(w, static_cast<std::int64_t>(next_++));
  }
  return true;
}

// The worker died: its point is recorded as a crash, a new worker takes over.
void Runner::replace_dead(std::size_t k) {
  Worker& w = workers_[k];
  const core::ExitStatus st = w.child.kill();
  if (w.current >= 0) {
    const SweepPoint& pt = to_run_[static_cast<std::size_t>(w.current)];
    json row{{"point", pt.index}, {"key", pt.key}, {"inputs", pt.inputs.dump()}, {"status", "error"}};
    row["error"] = st.signaled ? fmt::format("worker crashed (signal {}: {})", st.signal, ::strsignal(st.signal))
                               : fmt::format("worker exited with status {}", st.code);
    row["hzp_version"] = core::version();
    row["git_revision"] = core::git_revision();
    copy_input_columns(pt.inputs, row);
    record(row);
  }
  workers_.erase(workers_.begin() + static_cast<std::ptrdiff_t>(k));
  if (next_ < to_run_.size()) {
    workers_.push_back(spawn(to_run_, o_.limits, workers_));
    send(workers_.back(), static_cast<std::int64_t>(next_++));
  }
}

void Runner::loop() {
  const int jobs = std::max(1, std::min<int>(o_.jobs, static_cast<int>(std::max<std::size_t>(1, to_run_.size()))));
  for (int j = 0; j < jobs && next_ < to_run_.size(); ++j) {
    workers_.push_back(spawn(to_run_, o_.limits, workers_));
    send(workers_.back(), static_cast<std::int64_t>(next_++));
  }
  while (finished_ < to_run_.size() && !g_stop) {
    std::vector<pollfd> fds;
    for (const auto& w : workers_) fds.push_back(pollfd{w.child.from_child(), POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), 200);
    if (n < 0 && errno != EINTR) throw std::runtime_error(fmt::format("poll: {}", std::strerror(errno)));
    for (std::size_t k = 0; k < workers_.size() && n > 0; ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (read_from(k)) continue;
      replace_dead(k);
      break;  // the fd list changed
    }
    progress(false);
  }
}

SweepSummary Runner::run() {
  g_stop = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  struct sigaction old_int {
  }, old_term{};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  auto restore = [&] {
    workers_.clear();  // each worker is killed and reaped by its core::Child
    db_.flush();
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  };
  try {
    loop();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  sum_.interrupted = g_stop != 0;
  progress(true);
  sum_.seconds = now_s() - t0_;
  return sum_;
}

}  // namespace

SweepSummary run_sweep(const SweepSpec& spec, const std::string& spec_file, const SweepOptions& o) {
  return Runner(spec, spec_file, o).run();
}

}  // namespace hzp::explore
