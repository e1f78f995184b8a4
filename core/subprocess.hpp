// Forked child processes, the one way hzp runs work apart from itself (the
// SimGrid engine, sweep workers, parallel maps, the plotting script): file
// descriptors that close themselves, pipes, a child that is always reaped,
// and SIGPIPE ignored so a dead child is an error, not the parent's death.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "core/fd.hpp"

namespace hzp::core {

/// How a child ended.
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code (when not signaled)
  int signal = 0;  // the signal that killed it
  [[nodiscard]] bool ok() const { return !signaled && code == 0; }
  /// "exited with status 3" or "died of signal 11 (Segmentation fault)".
  [[nodiscard]] std::string describe() const;
};

/// Ignores SIGPIPE in this process (idempotent): writing to a pipe whose
/// reader died then fails with EPIPE, which the writer reports.
void ignore_sigpipe();

struct ChildOptions {
  bool pipe_to_child = false;    // the parent writes to the child's `in`
  bool pipe_from_child = true;   // the child writes to `out`, the parent reads
  bool die_with_parent = false;  // SIGKILL the child when the parent dies (Linux)
  /// Descriptors the child must not inherit (e.g. other children's pipes).
  std::vector<int> close_in_child;
};

/// A forked child running `body(in, out)` (descriptors of its ends of the
/// pipes, -1 where none) and exiting with its return value; an exception in
/// the child exits 1 and never unwinds into the parent's code. The parent
/// holds the other ends; the destructor kills and reaps a child still running.
class Child {
 public:
  using Body = std::function<int(int in, int out)>;
  Child(const Body& body, const ChildOptions& options);
  ~Child();
  Child(Child&& o) noexcept;
  /// Kills and reaps the child held before, if still running.
  Child& operator=(Child&& o) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  /// The parent's ends: write to the child, read from it (-1 where none).
  [[nodiscard]] int to_child() const { return to_child_.get(); }
  [[nodiscard]] int from_child() const { return from_child_.get(); }
  void close_to_child() { to_child_.reset(); }
  /// Everything the child writes until it closes its end.
  [[nodiscard]] std::string read_all();
  /// Waits for the child to end (once; later calls return the same status).
  ExitStatus wait();
  /// SIGKILL, then wait.
  ExitStatus kill();

 private:
  pid_t pid_ = -1;
  Fd to_child_, from_child_;
  bool reaped_ = false;
  ExitStatus status_;
};

/// Runs `argv` (searched in PATH) with `input` on its standard input and the
/// parent's standard output and error; its exit status. A program that cannot
/// be started exits 127 after `not_found_message` on standard error.
[[nodiscard]] ExitStatus run_program(const std::vector<std::string>& argv, const std::string& input,
                                     const std::string& not_found_message);

}  // namespace hzp::core
