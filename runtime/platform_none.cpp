// query_platform for builds without CUDA and NCCL.
#include "runtime/platform_info.hpp"

namespace hzp::runtime {

PlatformInfo query_platform() {
  PlatformInfo p;
  p.error = "hzp was built where CUDA or NCCL was not found";
  return p;
}

}  // namespace hzp::runtime
