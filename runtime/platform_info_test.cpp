// Version strings and the platform description; query_platform must answer
// (not crash) on a machine without a GPU.
#include "runtime/platform_info.hpp"

#include <gtest/gtest.h>

namespace hzp::runtime {
namespace {

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
