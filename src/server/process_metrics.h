// Process metrics in the Prometheus text format, named as Prometheus' client libraries name them
// (so the usual dashboards and alerts work): process_cpu_seconds_total (user + system),
// process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds, process_max_fds,
// process_start_time_seconds (unix time). Read from /proc/self at each call; thread-safe.
// Also the --metrics-prefix renaming of the server's own `pagoda:` series.
#pragma once

#include <string>
#include <string_view>

namespace pagoda::server {

std::string render_process_metrics();

// `text` (Prometheus exposition) with every metric named "pagoda:NAME" renamed "PREFIX:NAME"
// (samples and their # HELP / # TYPE lines); other series untouched. "pagoda" returns it as is.
// With "vllm", vLLM's dashboards read the same series (ServerMetrics mirrors vLLM's names).
std::string rename_metric_prefix(std::string_view text, std::string_view prefix);

}  // namespace pagoda::server
