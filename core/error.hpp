// The error types of every layer. Library code throws these; only `main`
// turns them into exit codes (0 ok, 2 bad input, 3 infeasible, other internal).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace hzp::core {

/// `text` on one line: control characters (a newline decoded from a JSON
/// string, say) are written as escapes, so an error that echoes user input
/// stays one line however the input looks.
inline std::string one_line(const std::string& text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

/// Bad user input: a file, a key in it, and what was expected there.
/// The message is one line: "<file>: <key>: <expected>" (see one_line).
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
    return one_line(s + ": " + e);
  }
  std::string file_, key_, expected_;
};

/// A well-formed plan that cannot run: it does not fit in device memory.
class InfeasibleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A quantity that has no value in its unit: a NaN or negative duration, say.
/// A bug in the caller (inputs are checked before they reach the units), so
/// `main` reports it as an internal error.
class UnitError : public std::domain_error {
 public:
  using std::domain_error::domain_error;
};

/// A Schedule that violates the contract (unmatched collective, deadlock, ...).
/// Raised by the checker; names the first offending op. One line (see one_line).
class ScheduleError : public std::runtime_error {
 public:
  explicit ScheduleError(const std::string& what) : std::runtime_error(one_line(what)) {}
};

}  // namespace hzp::core
