// evpool tests: in_child, a test's body run in a fork() child, its failures told by the exit
// status.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

namespace evpool::test {

/// Runs `child` in a fork() child and returns its exit status (the child's bit mask of failures),
/// or 128 plus the signal that killed it.
template <class Child>
int in_child(Child child) {
  const pid_t pid = fork();
  if (pid == 0) _exit(child());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace evpool::test
