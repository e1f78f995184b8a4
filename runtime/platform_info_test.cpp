// Version strings and the platform description; query_platform must answer
// (not crash) on a machine without a GPU.
#include "runtime/platform_info.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace hzp::runtime {
namespace {

// Issue 21, item 1: bench results carry the catalog's device name, which
// hzp calibrate matches against the cluster (the GPU's own name never did).
TEST(PlatformInfo, BenchDeviceNameIsTheCatalogs) {
  EXPECT_EQ(bench_device_name("NVIDIA H200", "H200 SXM 141GB"), "H200 SXM 141GB");
  EXPECT_EQ(bench_device_name("NVIDIA H100 80GB HBM3", "H100 SXM 80GB"), "H100 SXM 80GB");
  EXPECT_THROW((void)bench_device_name("NVIDIA H100 80GB HBM3", "H200 SXM 141GB"), core::InputError);
  EXPECT_THROW((void)bench_device_name("NVIDIA H200", ""), core::InputError);
}

TEST(PlatformInfo, VersionStrings) {
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda_version_string(12040), "12.4");
  EXPECT_EQ(nccl_version_string(22809), "2.28.9");
  EXPECT_EQ(nccl_version_string(2708), "2.7.8");
}

TEST(PlatformInfo, DescribesAbsence) {
  PlatformInfo none;
  EXPECT_EQ(describe(none), "built without CUDA/NCCL: the runtime can only use the host backend");
  PlatformInfo no_gpu{true, "13.0", "", "2.28.9", {}, "driver version is insufficient"};
  EXPECT_EQ(describe(no_gpu),
            "CUDA runtime 13.0, driver none, NCCL 2.28.9; no usable GPU (driver version is insufficient)");
}

TEST(PlatformInfo, QueryAnswers) {
  PlatformInfo p = query_platform();
  if (p.gpus.empty()) {
    EXPECT_FALSE(p.error.empty());
  }
#ifdef HZP_HAVE_CUDA
  EXPECT_TRUE(p.cuda_built);
  EXPECT_FALSE(p.nccl.empty());
#else
  EXPECT_FALSE(p.cuda_built);
#endif
}

}  // namespace
}  // namespace hzp::runtime
