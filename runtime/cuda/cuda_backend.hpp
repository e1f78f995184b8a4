// The CUDA backend: the executor on a GPU. One CUDA stream per Schedule
// stream; GEMMs through cuBLASLt in the Schedule's shape; attention as a
// batched GEMM of the stated FLOPs plus a bandwidth kernel of the stated
// bytes (the Schedule gives attention by FLOPs and bytes, not shape, and no
// fused-attention library ships with the toolkit); element-wise, norm,
// embedding, loss and optimizer ops as bandwidth kernels moving their bytes;
// collectives through NCCL on communicators split per Schedule group (or, on
// one GPU, emulated by kernels that occupy the NCCL channels' SMs for the
// model's time); alloc/free from a stream-ordered memory pool; CUDA events
// for record/wait/sync and around every op for timing. Every CUDA, cuBLAS
// and NCCL call is checked and names the op. The decisions are in
// runtime/device/ (tested without a GPU); this directory holds the real calls
// (cuda_api.cpp) and is the only one that sees CUDA.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cost/perf_model.hpp"
#include "runtime/device/backend.hpp"
#include "runtime/executor.hpp"
#include "runtime/launch.hpp"
#include "schedule/replay.hpp"
#include "traces/bench_results.hpp"
#include "traces/timeline.hpp"

namespace hzp::runtime::cuda {

class CudaApi;

/// NCCL communicators of one rank (device::DeviceComms on the real API):
/// the world and the splits of device::plan_comms.
class Communicators {
 public:
  /// The NCCL unique id: `shared_id` when given (ranks that are threads of
  /// one process, from new_nccl_id), else over MPI when launched by mpirun
  /// and built with MPI, else through a file in `rendezvous_dir` (a path
  /// every rank sees). Call on the rank's device. `timeout`: the longest
  /// wait for a communicator or a barrier.
  Communicators(const core::Schedule& s, const LaunchInfo& launch, const std::string& rendezvous_dir,
                const std::string& shared_id = "", std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~Communicators();
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;
  [[nodiscard]] device::DeviceComms& comms() { return *comms_; }
  /// The world communicator (an ncclComm_t).
  [[nodiscard]] void* world() const { return comms_->world(); }

 private:
  std::unique_ptr<CudaApi> api_;
  std::unique_ptr<device::DeviceComms> comms_;
};

/// Makes `device` the calling thread's GPU (throws RunError naming it).
void use_device(int device);
/// A fresh NCCL unique id, as bytes (for Communicators' `shared_id`).
[[nodiscard]] std::string new_nccl_id();
/// The max over the world of `v` (a barrier; see DeviceComms::world_max).
[[nodiscard]] double world_max(Communicators& comms, double v);

struct CudaOptions {
  int device = 0;
  bool emulate_collectives = false;  // one GPU: collectives and transfers as timed kernels
  int nccl_channels = 16;            // SMs an emulated collective occupies
  std::chrono::milliseconds watchdog{60000};
};

/// device::DeviceBackend on the real API.
class CudaBackend final : public Backend {
 public:
  /// Executes `plan.program` as rank `plan.rank` on `o.device`. `comms` is
  /// required unless collectives are emulated; `pm` gives emulated durations.
  CudaBackend(const core::Schedule& s, const RankPlan& plan, const cost::PerfModel& pm, Communicators* comms,
              CudaOptions o);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  /// Before each step: fresh timing, the pool's high-water marks reset, the time origin recorded.
  void begin_step() { b_->begin_step(); }
  void enqueue(std::size_t program, std::size_t stream, std::size_t index) override {
    b_->enqueue(program, stream, index);
  }
  void host_wait(std::size_t program, const core::Thread& thread, int event) override {
    b_->host_wait(program, thread, event);
  }
  void issue_cost(std::size_t, const core::Thread&, const core::Op&) override {}
  void drain() override { b_->drain(); }
  void abort(const std::string& why) override { b_->abort(why); }

  /// This step's op times (from CUDA events), times[stream][op], from the origin.
  [[nodiscard]] std::vector<std::vector<core::OpTime>> times() const { return b_->times(); }
  /// The step's Timeline: this rank's class, measured.
  void emit(traces::TraceHeader header, traces::TraceSink& sink) const { b_->emit(std::move(header), sink); }
  /// Peak bytes the pool held and handed out in the last step.
  [[nodiscard]] core::Bytes peak_reserved() const { return b_->peak_reserved(); }
  [[nodiscard]] core::Bytes peak_used() const { return b_->peak_used(); }

 private:
  std::unique_ptr<CudaApi> api_;
  std::unique_ptr<device::DeviceBackend> b_;
};

/// Microbenchmarks for calibration, each written as traces::BenchResults.
/// GEMM: every shape given, timed alone (median of `reps` after warm-up).
[[nodiscard]] traces::BenchResults bench_gemm(const std::vector<core::GemmShape>& shapes, int device, int reps);
/// Collectives over the world communicator (and the rail and node groups it
/// holds): each kind at each size, max across ranks of the median.
[[nodiscard]] traces::BenchResults bench_collectives(Communicators& comms, const LaunchInfo& launch, int ranks_per_node,
                                                     const std::vector<std::int64_t>& sizes, int device, int reps);
/// A GEMM alone and beside a collective (or, on one GPU, its emulation with
/// `channels` SMs) on another stream.
[[nodiscard]] traces::BenchResults bench_overlap(Communicators* comms, const core::GemmShape& gemm, std::int64_t bytes,
                                                 const std::vector<int>& channels, int device, int reps);

/// GPU, driver, CUDA, cuBLAS and NCCL versions, clocks and host, for provenance.
[[nodiscard]] std::map<std::string, std::string> device_provenance(int device);

}  // namespace hzp::runtime::cuda
