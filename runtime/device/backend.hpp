// The GPU backend's logic over DeviceApi (runtime/device/api.hpp): the
// communicators of a rank (DeviceComms) and the Backend that executes a rank
// class's program (DeviceBackend). runtime/cuda wraps both with the real
// CUDA/NCCL/cuBLASLt calls; tests drive them with a recording fake.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cost/perf_model.hpp"
#include "runtime/device/api.hpp"
#include "runtime/device/logic.hpp"
#include "runtime/executor.hpp"
#include "runtime/launch.hpp"
#include "schedule/replay.hpp"
#include "traces/timeline.hpp"

namespace hzp::runtime::device {

using Clock = std::chrono::steady_clock;

struct CommOptions {
  /// Longest wait for a non-blocking communicator (init, split, a call) or a barrier.
  std::chrono::milliseconds timeout{60000};
  std::function<Clock::time_point()> now = [] { return Clock::now(); };
};

/// A rank's NCCL communicators, made by plan_comms's splits of the world.
class DeviceComms {
 public:
  /// `id`: the NCCL unique id's bytes, the same on every rank.
  DeviceComms(DeviceApi& api, const core::Schedule& s, int rank, int world, const std::string& id, CommOptions o);
  /// Destroys the communicators (ncclCommDestroy) after a clean run; after an
  /// abort, an error or while an exception unwinds, aborts them instead
  /// (ncclCommDestroy waits for pending work, which may never come).
  ~DeviceComms();
  DeviceComms(const DeviceComms&) = delete;
  DeviceComms& operator=(const DeviceComms&) = delete;

  [[nodiscard]] const CommPlan& plan() const { return plan_; }
  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] Handle world() const { return comms_.front(); }
  [[nodiscard]] Handle comm(std::size_t split) const { return comms_.at(split + 1); }
  /// Runs one NCCL call (`fn`) under the device's NCCL lock and waits until
  /// its communicator is ready again; throws RunError once aborted.
  void call(Handle comm, const std::string& what, const std::function<void()>& fn);
  /// ncclCommAbort on every communicator, once; the handles stay readable.
  void abort();
  [[nodiscard]] bool aborted() const { return aborted_; }
  /// The first communicator's asynchronous error (ncclCommGetAsyncError), or "".
  [[nodiscard]] std::string async_error();
  /// The max over the world of `v`: an all-reduce on buffers and a stream
  /// made once, polled with a timeout (a barrier, safe beside other ranks'
  /// threads allocating: no cudaMalloc, cudaFree or blocking copy here).
  [[nodiscard]] double world_max(double v);

 private:
  void wait_ready(Handle comm, const std::string& what);
  void release();
  DeviceApi& api_;
  CommOptions o_;
  int rank_;
  CommPlan plan_;
  std::vector<Handle> comms_;  // the world, then one per split (null where not a member); fixed after construction
  std::mutex nccl_;            // held for each NCCL call and by abort
  std::atomic<bool> aborted_{false};
  bool failed_ = false;
  int uncaught_ = 0;
  Handle stream_ = nullptr, device_buf_ = nullptr, host_buf_ = nullptr;
};

struct BackendOptions {
  int device = 0;
  bool emulate_collectives = false;
  int nccl_channels = 16;
  std::chrono::milliseconds watchdog{60000};
  bool watchdog_thread = true;  // tests call watch_once themselves
  std::function<Clock::time_point()> now = [] { return Clock::now(); };
};

class DeviceBackend final : public Backend {
 public:
  DeviceBackend(DeviceApi& api, const core::Schedule& s, const RankPlan& plan, const cost::PerfModel& pm,
                DeviceComms* comms, BackendOptions o);
  ~DeviceBackend() override;
  DeviceBackend(const DeviceBackend&) = delete;
  DeviceBackend& operator=(const DeviceBackend&) = delete;

  void begin_step();
  void enqueue(std::size_t program, std::size_t stream, std::size_t index) override;
  void host_wait(std::size_t program, const core::Thread& thread, int event) override;
  void issue_cost(std::size_t, const core::Thread&, const core::Op&) override {}  // a GPU pays it itself
  void drain() override;
  void abort(const std::string& why) override;
  /// One look of the watchdog: true when it fired (and aborted the run).
  bool watch_once();

  [[nodiscard]] std::vector<std::vector<core::OpTime>> times() const;
  void emit(traces::TraceHeader header, traces::TraceSink& sink) const;
  /// The pool's high-water marks since the step began.
  [[nodiscard]] core::Bytes peak_reserved() const;
  [[nodiscard]] core::Bytes peak_used() const;

  struct State;

 private:
  std::unique_ptr<State> st_;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

}  // namespace hzp::runtime::device
