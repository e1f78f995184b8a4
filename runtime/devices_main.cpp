// hzp-devices: prints what the runtime would run on (CUDA, driver, NCCL, GPUs).
#include <iostream>

#include "runtime/platform_info.hpp"

int main() {
  hzp::runtime::PlatformInfo p = hzp::runtime::query_platform();
  std::cout << hzp::runtime::describe(p) << "\n";
  return 0;
}
