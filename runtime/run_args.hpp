// hzp-run's command line: what a run is asked for (Args, BenchArgs), its
// flags and their checks, and the outputs checked before any work.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace hzp::run_cli {

// The most warm-up or timed steps a run takes, and timed steps with --trace.
constexpr int kMaxSteps = 100000;
constexpr int kMaxTracedSteps = 1000;

struct Args {
  std::string schedule;
  std::string backend = "host";
  std::string clock = "wall";  // host backend: wall | virtual
  std::string cluster;         // default: the Schedule's
  double step_seconds = 2.0;
  double late_ms = 2.0;  // host backend: wake-ups later than this count as real time
  int warmup = 1;
  int steps = 3;
  std::string trace;
  std::string summary;
  double watchdog_s = 30;
  bool skip_check = false;
  bool force = false;  // replace --trace / --summary if they exist
  // CUDA backend
  int local_gpus = 0;    // one process driving this many GPUs (ranks 0..N-1)
  bool emulate = false;  // one GPU: collectives as timed kernels
  int rank = 0;          // with --emulate-collectives: the rank to run
  int nccl_channels = 16;
  std::string rendezvous;  // shared directory for the NCCL id (torchrun-style launches)
};

struct BenchArgs {
  std::string kind;  // gemm | collectives | overlap
  std::string schedule;
  std::string out;
  int reps = 20;
  int ranks_per_node = 8;
  std::string rendezvous;
  std::vector<int> channels{1, 2, 4, 8, 16, 32};
  std::string cluster;  // names the results' device as the catalog does (hzp calibrate matches it)
  bool force = false;   // replace --out if it exists
};

void add_run_options(CLI::App& app, Args& a);
/// The `bench` subcommand and its flags.
CLI::App* add_bench_command(CLI::App& app, BenchArgs& b);
/// Every output checked before any work: new unless --force, in a folder
/// that exists and can be written; standard output takes one document.
void check_outputs(const Args& a, const BenchArgs& b, bool bench);

}  // namespace hzp::run_cli
