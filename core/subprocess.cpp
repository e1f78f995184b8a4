// Forked children (see subprocess.hpp).
#include "core/subprocess.hpp"

#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "core/io.hpp"

namespace hzp::core {
namespace {

std::pair<Fd, Fd> make_pipe() {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  return {Fd(fds[0]), Fd(fds[1])};
}

}  // namespace

std::string ExitStatus::describe() const {
  if (signaled) return fmt::format("died of signal {} ({})", signal, ::strsignal(signal));
  return fmt::format("exited with status {}", code);
}

void ignore_sigpipe() {
  static const bool done = [] {
    std::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)done;
}

Child::Child(const Body& body, const ChildOptions& options) {
  ignore_sigpipe();
  std::pair<Fd, Fd> down, up;
  if (options.pipe_to_child) down = make_pipe();
  if (options.pipe_from_child) up = make_pipe();
  std::fflush(stdout);  // nothing buffered is written twice
  std::fflush(stderr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid_ == 0) {
    if (options.die_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int fd : options.close_in_child) ::close(fd);
    down.second.reset();
    up.first.reset();
    int code = 1;
    try {
      code = body(down.first.get(), up.second.get());
    } catch (...) {
      code = 1;
    }
    ::_exit(code);  // never run the parent's destructors or atexit handlers
  }
  to_child_ = std::move(down.second);
  from_child_ = std::move(up.first);
}

Child::Child(Child&& o) noexcept
    : pid_(o.pid_),
      to_child_(std::move(o.to_child_)),
      from_child_(std::move(o.from_child_)),
      reaped_(o.reaped_),
      status_(o.status_) {
  o.pid_ = -1;
}

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0 && !reaped_) (void)kill();
    pid_ = o.pid_;
    to_child_ = std::move(o.to_child_);
    from_child_ = std::move(o.from_child_);
    reaped_ = o.reaped_;
    status_ = o.status_;
    o.pid_ = -1;
  }
  return *this;
}

Child::~Child() {
  if (pid_ > 0 && !reaped_) (void)kill();
}

std::string Child::read_all() {
  std::string data = read_all_fd(from_child_.get());
  from_child_.reset();
  return data;
}

ExitStatus Child::wait() {
  if (pid_ <= 0 || reaped_) return status_;
  to_child_.reset();
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0) {
    if (errno != EINTR) {
      reaped_ = true;
      status_ = ExitStatus{false, -1, 0};
      return status_;
    }
  }
  reaped_ = true;
  status_ =
      WIFSIGNALED(st) ? ExitStatus{true, 0, WTERMSIG(st)} : ExitStatus{false, WIFEXITED(st) ? WEXITSTATUS(st) : -1, 0};
  return status_;
}

ExitStatus Child::kill() {
  if (pid_ > 0 && !reaped_) ::kill(pid_, SIGKILL);
  to_child_.reset();
  from_child_.reset();
  return wait();
}

ExitStatus run_program(const std::vector<std::string>& argv, const std::string& input,
                       const std::string& not_found_message) {
  Child child(
      [&](int in, int) {
        ::dup2(in, STDIN_FILENO);
        ::close(in);
        std::vector<std::string> args = argv;
        std::vector<char*> c_args;
        for (auto& a : args) c_args.push_back(a.data());
        c_args.push_back(nullptr);
        ::execvp(c_args[0], c_args.data());
        std::fprintf(stderr, "%s\n", not_found_message.c_str());
        return 127;
      },
      [] {
        ChildOptions o;
        o.pipe_to_child = true;
        o.pipe_from_child = false;
        return o;
      }());
  (void)write_all_fd(child.to_child(), input);  // a program that exits early closes its end: EPIPE, not a signal
  child.close_to_child();
  return child.wait();
}

}  // namespace hzp::core
