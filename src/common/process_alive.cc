#include "common/process_alive.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace pagoda {

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  // /proc/<pid>/stat: "pid (comm) S ...": the state follows the last ')'.
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return true;  // no procfs: kill's answer
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace pagoda
