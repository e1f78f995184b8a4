// What the machine offers the runtime: CUDA runtime and driver, NCCL, and the
// GPUs — for the provenance every measured Timeline carries. Built without
// CUDA, it says so instead of failing.
#pragma once

#include <string>
#include <vector>

namespace hzp::runtime {

struct GpuInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  double memory_GiB = 0;
};

struct PlatformInfo {
  bool cuda_built = false;   // this binary was compiled against CUDA and NCCL
  std::string cuda_runtime;  // "13.0"
  std::string cuda_driver;   // "13.0", empty when no driver answers
  std::string nccl;          // "2.28.9"
  std::vector<GpuInfo> gpus;
  std::string error;  // why no GPU is usable, when none is
};

/// Queries the platform; never throws (a machine without GPUs is a normal answer).
[[nodiscard]] PlatformInfo query_platform();

/// "major.minor" from CUDA's integer version (1000·major + 10·minor).
[[nodiscard]] std::string cuda_version_string(int v);
/// "major.minor.patch" from NCCL's integer version code (≥ 2.9: 10000·major + 100·minor + patch).
[[nodiscard]] std::string nccl_version_string(int v);

/// The device name `hzp-run bench --cluster` writes into its results: the
/// cluster catalog's (e.g. "H200 SXM 141GB", what `hzp calibrate` matches),
/// once the GPU's own name (e.g. "NVIDIA H200") holds the catalog name's
/// first word; throws InputError when it does not (the wrong cluster).
[[nodiscard]] std::string bench_device_name(const std::string& gpu, const std::string& catalog);

/// One readable paragraph.
[[nodiscard]] std::string describe(const PlatformInfo& p);

}  // namespace hzp::runtime
