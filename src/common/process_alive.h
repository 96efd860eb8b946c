// Whether a process of this host is alive: it exists and is not a zombie (exited, not yet reaped).
// Thread-safe.
#pragma once

#include <sys/types.h>

namespace pagoda {

bool process_alive(pid_t pid);

}  // namespace pagoda
