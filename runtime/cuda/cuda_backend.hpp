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
// and NCCL call is checked and names the op. Only this directory sees CUDA.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/schedule_replay.hpp"
#include "runtime/executor.hpp"
#include "runtime/launch.hpp"
#include "topologies/topology.hpp"
#include "traces/bench_results.hpp"
#include "traces/timeline.hpp"

namespace hzp::runtime::cuda {

/// NCCL communicators of one rank: the world, one per Schedule group this
/// rank belongs to (ncclCommSplit per round of comm_split_rounds), and one
/// clone of the world per stream that sends or receives.
class Communicators {
 public:
  /// The NCCL unique id: `shared_id` when given (ranks that are threads of
  /// one process, from new_nccl_id), else over MPI when launched by mpirun
  /// and built with MPI, else through a file in `rendezvous_dir` (a path
  /// every rank sees). Call on the rank's device.
  Communicators(const core::Schedule& s, const LaunchInfo& launch, const std::string& rendezvous_dir,
                const std::string& shared_id = "");
  ~Communicators();
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;
  struct State;
  [[nodiscard]] State& state() { return *state_; }
  /// Aborts every communicator (the watchdog's last act).
  void abort();

 private:
  std::unique_ptr<State> state_;
};

/// Makes `device` the calling thread's GPU (throws RunError naming it).
void use_device(int device);
/// A fresh NCCL unique id, as bytes (for Communicators' `shared_id`).
[[nodiscard]] std::string new_nccl_id();
/// The max over the world of `v` (an all-reduce), on the rank's device.
[[nodiscard]] double world_max(Communicators& comms, double v);

struct CudaOptions {
  int device = 0;
  bool emulate_collectives = false;  // one GPU: collectives and transfers as timed kernels
  int nccl_channels = 16;            // SMs an emulated collective occupies
  std::chrono::milliseconds watchdog{60000};
};

class CudaBackend final : public Backend {
 public:
  /// Executes `plan.program` as rank `plan.rank` on `o.device`. `comms` is
  /// required unless collectives are emulated; `pm` gives emulated durations.
  CudaBackend(const core::Schedule& s, const RankPlan& plan, const topologies::PerfModel& pm, Communicators* comms,
              CudaOptions o);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  /// Before each step: fresh timing, the time origin recorded on the device.
  void begin_step();
  void enqueue(std::size_t program, std::size_t stream, std::size_t index) override;
  void host_wait(std::size_t program, const core::Thread& thread, int event) override;
  void issue_cost(std::size_t program, const core::Thread& thread, const core::Op& op) override;
  void drain() override;

  /// This step's op times (from CUDA events), times[stream][op], from the origin.
  [[nodiscard]] std::vector<std::vector<core::OpTime>> times() const;
  /// The step's Timeline: this rank's class, measured.
  void emit(traces::TraceHeader header, traces::TraceSink& sink) const;
  /// Peak bytes the pool held and handed out since the backend started.
  [[nodiscard]] core::Bytes peak_reserved() const;
  [[nodiscard]] core::Bytes peak_used() const;

  struct State;

 private:
  std::unique_ptr<State> st_;
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
