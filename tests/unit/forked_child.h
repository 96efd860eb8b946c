// Test helpers for real processes: run a function in a forked child, read its exit status.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

namespace pagoda::test {

// Runs `child` in a forked process; returns its pid. The child's exit code is child()'s.
template <class F>
pid_t fork_child(F child) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(child());
  return pid;
}

// The child's exit code (128 + signal when it was killed), -1 when it cannot be waited for.
inline int exit_code(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace pagoda::test
