// What every fuzz target checks: an input is accepted, or rejected with one of
// hzp's one-line errors (InputError for bad input, ProblemError for a plan a
// library check refuses, ScheduleError for a Schedule that breaks the contract). Anything else — another exception, a
// multi-line message, a crash, a sanitizer report — stops the fuzzer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "core/options.hpp"

namespace hzp::fuzz {

inline void one_line(const char* what) {
  if (std::string(what).find('\n') != std::string::npos) {
    std::fprintf(stderr, "fuzz: error message spans lines: %s\n", what);
    std::abort();
  }
}

template <class F>
int run(const std::uint8_t* data, std::size_t size, F&& body) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    body(text);
  } catch (const core::InputError& e) {
    one_line(e.what());
  } catch (const core::ProblemError& e) {
    one_line(e.what());
  } catch (const core::ScheduleError& e) {
    one_line(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}

}  // namespace hzp::fuzz
