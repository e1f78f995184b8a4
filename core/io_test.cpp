// Atomic output: an interrupted write leaves the previous file intact.
#include "core/io.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <filesystem>

#include "core/error.hpp"

namespace hzp::core {
namespace {

TEST(WriteFileAtomic, ReplacesWholeFile) {
  auto dir = std::filesystem::temp_directory_path() / ("hzp_io_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "out.json").string();
  write_file_atomic(path, "old");
  write_file_atomic(path, "new contents");
  EXPECT_EQ(read_file(path), "new contents");
  std::filesystem::remove_all(dir);
}

// A writer killed mid-write (SIGKILL: no chance to clean up) must leave the
// destination holding the old content or the complete new one, never a part.
TEST(WriteFileAtomic, KillDuringWriteKeepsPreviousFile) {
  auto dir = std::filesystem::temp_directory_path() / ("hzp_io_kill_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "trace.json").string();
  write_file_atomic(path, "previous");
  const std::string big(512u << 20, 'x');  // 512 MiB: the write takes long enough to be interrupted
  for (int attempt = 0; attempt < 3; ++attempt) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      write_file_atomic(path, big);
      ::_exit(0);
    }
    ::usleep(static_cast<useconds_t>(20000 * (attempt + 1)));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    const auto size = std::filesystem::file_size(path);
    EXPECT_TRUE(size == 8 || size == big.size()) << "partial file of " << size << " bytes";
    if (size == 8) {
      EXPECT_EQ(read_file(path), "previous");
    } else {
      write_file_atomic(path, "previous");
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(WriteFileAtomic, UnwritableFolderIsInputError) {
  EXPECT_THROW(write_file_atomic("/proc/hzp_cannot_write/x.json", "x"), InputError);
}

}  // namespace
}  // namespace hzp::core
