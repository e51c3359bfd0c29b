// Runs each scenario of exit_scenarios.cc in its own process: it must exit with status 0 within
// the time limit (no crash, no hang, no exception escaping). Status 77: the scenario skipped.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

extern char **environ;

namespace {

struct Outcome {
  bool hung = false;
  int status = 0;
  std::string stderr_text;
};

Outcome run_scenario(const std::string &scenario) {
  const std::filesystem::path helper =
      std::filesystem::read_symlink("/proc/self/exe").parent_path() / "evpool_exit_scenarios";
  const std::string log = std::filesystem::temp_directory_path() / ("evpool-exit-" + scenario + ".log");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const std::string program = helper.string();
  char *argv[] = {const_cast<char *>(program.c_str()), const_cast<char *>(scenario.c_str()), nullptr};
  pid_t pid = 0;
  Outcome outcome;
  if (posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ) != 0) {
    outcome.status = -1;
    outcome.stderr_text = "could not start " + program;
    return outcome;
  }
  posix_spawn_file_actions_destroy(&actions);
  int wait_status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(pid, &wait_status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &wait_status, 0);
      outcome.hung = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  outcome.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
  std::stringstream text;
  text << std::ifstream(log).rdbuf();
  outcome.stderr_text = text.str();
  return outcome;
}

class ProcessExit : public testing::TestWithParam<const char *> {};

TEST_P(ProcessExit, EndsCleanly) {
  const Outcome outcome = run_scenario(GetParam());
  if (outcome.status == 77) GTEST_SKIP() << outcome.stderr_text;
  EXPECT_FALSE(outcome.hung) << "the process did not exit within 60 s";
  EXPECT_EQ(outcome.status, 0) << "stderr:\n" << outcome.stderr_text;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ProcessExit,
                         testing::Values("host-pool-with-leases", "host-threads-running",
                                         "cuda-singleton-leases-at-exit", "cuda-threads-running",
                                         "cuda-pool-destroyed-after-runtime-unloads",
                                         "host-completion-queue-with-pending-work",
                                         "host-completion-queue-leaked-with-work-that-never-ends",
                                         "cuda-completion-queue-with-pending-work"),
                         [](const auto &info) {
                           std::string name = info.param;
                           for (char &c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
