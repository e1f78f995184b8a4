// `hzp plot`: cli/plot/hzp_plot.py (matplotlib), compiled into the binary.
#pragma once

#include <string>

namespace hzp::cli {

/// The plotting script's text.
[[nodiscard]] std::string plot_script();

}  // namespace hzp::cli
