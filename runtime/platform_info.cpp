// Version formatting and the description of a platform (see platform_info.hpp).
#include "runtime/platform_info.hpp"

#include <fmt/format.h>

#include <cctype>

#include "core/error.hpp"

namespace hzp::runtime {

std::string cuda_version_string(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

std::string nccl_version_string(int v) {
  if (v >= 20900) return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
  return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);  // before 2.9: 1000·major + 100·minor + patch
}

std::string describe(const PlatformInfo& p) {
  if (!p.cuda_built) return "built without CUDA/NCCL: the runtime can only use the host backend";
  std::string s = fmt::format("CUDA runtime {}, driver {}, NCCL {}", p.cuda_runtime,
                              p.cuda_driver.empty() ? "none" : p.cuda_driver, p.nccl);
  if (p.gpus.empty()) return s + fmt::format("; no usable GPU ({})", p.error);
  for (const auto& g : p.gpus) {
    s += fmt::format("\n  GPU {}: {} (sm_{}{}, {} SMs, {:.1f} GiB)", g.index, g.name, g.sm_major, g.sm_minor,
                     g.multiprocessors, g.memory_GiB);
  }
  return s;
}

std::string bench_device_name(const std::string& gpu, const std::string& catalog) {
  auto lower = [](std::string t) {
    for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return t;
  };
  const std::string model = lower(catalog.substr(0, catalog.find(' ')));
  const std::string g = " " + lower(gpu) + " ";
  if (model.empty() || g.find(" " + model + " ") == std::string::npos) {
    throw core::InputError("command line", "--cluster",
                           fmt::format("expected a cluster whose device is this GPU ('{}'), got '{}'", gpu, catalog));
  }
  return catalog;
}

}  // namespace hzp::runtime
