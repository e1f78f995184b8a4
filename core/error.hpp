// The error types of every layer. Library code throws these; only `main`
// turns them into exit codes (0 ok, 2 bad input, 3 infeasible, other internal).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace hzp::core {

/// Bad user input: a file, a key in it, and what was expected there.
/// The message is one line: "<file>: <key>: <expected>".
class InputError : public std::runtime_error {
 public:
  InputError(std::string file, std::string key, std::string expected)
      : std::runtime_error(compose(file, key, expected)),
        file_(std::move(file)),
        key_(std::move(key)),
        expected_(std::move(expected)) {}
  [[nodiscard]] const std::string& file() const { return file_; }
  [[nodiscard]] const std::string& key() const { return key_; }
  [[nodiscard]] const std::string& expected() const { return expected_; }

 private:
  static std::string compose(const std::string& f, const std::string& k, const std::string& e) {
    std::string s = f;
    if (!k.empty()) s += ": " + k;
    return s + ": " + e;
  }
  std::string file_, key_, expected_;
};

/// A well-formed plan that cannot run: it does not fit in device memory.
class InfeasibleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A Schedule that violates the contract (unmatched collective, deadlock, ...).
/// Raised by the checker; names the first offending op.
class ScheduleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace hzp::core
