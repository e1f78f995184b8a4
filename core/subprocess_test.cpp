// Forked children: exit statuses, pipes both ways, a child always reaped, a
// write to a dead child an error rather than the parent's death.
#include "core/subprocess.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "core/io.hpp"

namespace hzp::core {
namespace {

TEST(Child, ReportsWhatItWroteAndHowItEnded) {
  Child c([](int, int out) { return write_all_fd(out, "hello") ? 3 : 1; }, ChildOptions{});
  EXPECT_EQ(c.read_all(), "hello");
  const ExitStatus st = c.wait();
  EXPECT_FALSE(st.signaled);
  EXPECT_EQ(st.code, 3);
  EXPECT_EQ(st.describe(), "exited with status 3");
  EXPECT_EQ(c.wait().code, 3);  // waiting again returns the same status
}

TEST(Child, ASignalAndAnExceptionAreStatuses) {
  Child aborts([](int, int) -> int { std::abort(); }, ChildOptions{});
  const ExitStatus st = aborts.wait();
  EXPECT_TRUE(st.signaled);
  EXPECT_EQ(st.signal, SIGABRT);
  EXPECT_EQ(st.describe().rfind("died of signal 6", 0), 0u);
  Child throws([](int, int) -> int { throw 1; }, ChildOptions{});
  EXPECT_EQ(throws.wait().code, 1);  // never unwinds into the test's code
}

TEST(Child, EchoesThroughBothPipes) {
  ChildOptions o;
  o.pipe_to_child = true;
  Child c(
      [](int in, int out) {
        const std::string s = read_all_fd(in);
        return write_all_fd(out, s + s) ? 0 : 1;
      },
      o);
  ASSERT_TRUE(write_all_fd(c.to_child(), "ab"));
  c.close_to_child();
  EXPECT_EQ(c.read_all(), "abab");
  EXPECT_TRUE(c.wait().ok());
}

TEST(Child, DestructorKillsAndReapsARunningChild) {
  pid_t pid = -1;
  {
    Child c(
        [](int, int) {
          ::pause();
          return 0;
        },
        ChildOptions{});
    pid = c.pid();
  }
  int st = 0;
  EXPECT_EQ(::waitpid(pid, &st, WNOHANG), -1);  // already reaped: no zombie left
  EXPECT_EQ(errno, ECHILD);
}

TEST(Child, WritingToADeadChildFailsInsteadOfKillingTheParent) {
  ChildOptions o;
  o.pipe_to_child = true;
  o.pipe_from_child = false;
  Child c([](int, int) { return 0; }, o);
  const int to = c.to_child();
  siginfo_t info{};  // wait until it has exited, leaving it to be reaped by Child
  while (::waitid(P_PID, static_cast<id_t>(c.pid()), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  std::string big(1 << 20, 'x');
  EXPECT_FALSE(write_all_fd(to, big));  // EPIPE: SIGPIPE is ignored
  EXPECT_TRUE(c.wait().ok());
}

TEST(RunProgram, FeedsStdinAndReportsAMissingProgram) {
  EXPECT_EQ(run_program({"sh", "-c", "test \"$(cat)\" = abc"}, "abc", "no sh").code, 0);
  EXPECT_EQ(run_program({"sh", "-c", "test \"$(cat)\" = abc"}, "abd", "no sh").code, 1);
  testing::internal::CaptureStderr();
  const ExitStatus st = run_program({"/nonexistent/program"}, "", "no such program");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "no such program\n");
  EXPECT_EQ(st.code, 127);
}

}  // namespace
}  // namespace hzp::core
