// Operations pieces of `pagoda serve` without a model: the metric prefix renaming, process
// metrics, the stats and access log lines, the early-bound port, log levels and --device auto.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "runtime/cuda_executor.h"
#include "engine/device_spec.h"
#include "server/access_log.h"
#include "server/listen_socket.h"
#include "server/process_metrics.h"
#include "server/stats_logger.h"

namespace pagoda {
namespace {

TEST(MetricPrefix, RenamesOnlyPagodaSeries) {
  const std::string text =
      "# HELP pagoda:num_requests_running Running.\n# TYPE pagoda:num_requests_running gauge\n"
      "pagoda:num_requests_running{model_name=\"m\"} 2\nprocess_open_fds 7\n"
      "pagoda:e2e_request_latency_seconds_bucket{le=\"0.5\",model_name=\"pagoda:x\"} 1\n";
  const std::string v = server::rename_metric_prefix(text, "vllm");
  EXPECT_EQ(v,
            "# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\n"
            "vllm:num_requests_running{model_name=\"m\"} 2\nprocess_open_fds 7\n"
            "vllm:e2e_request_latency_seconds_bucket{le=\"0.5\",model_name=\"pagoda:x\"} 1\n");
  EXPECT_EQ(server::rename_metric_prefix(text, "pagoda"), text);
}

double sample(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

TEST(ProcessMetrics, ReadsThisProcess) {
  const std::string m = "\n" + server::render_process_metrics();
  EXPECT_GT(sample(m, "process_resident_memory_bytes"), 1e6) << m;
  EXPECT_GE(sample(m, "process_cpu_seconds_total"), 0) << m;
  const double start = sample(m, "process_start_time_seconds");
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_GT(start, now - 3600 * 24) << m;
  EXPECT_LE(start, now + 2) << m;
  const double fds = sample(m, "process_open_fds");
  const int extra = ::dup(0);
  const std::string m2 = "\n" + server::render_process_metrics();
  EXPECT_EQ(sample(m2, "process_open_fds"), fds + 1) << m2;
  ::close(extra);
  EXPECT_GT(sample(m, "process_max_fds"), 0) << m;
  EXPECT_NE(m.find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
}

TEST(StatsLine, ThroughputsAndUsage) {
  EngineStats a, b;
  a.prompt_tokens_total = 100;
  a.generation_tokens_total = 50;
  b.prompt_tokens_total = 300;
  b.generation_tokens_total = 450;
  b.num_running = 3;
  b.num_waiting = 1;
  b.kv_cache_usage = 0.25;
  b.prefix_cache_queries = 200;
  b.prefix_cache_hits = 50;
  const std::string line = server::format_stats_line(a, b, 2.0);
  EXPECT_NE(line.find("Avg prompt throughput: 100.0 tokens/s"), std::string::npos) << line;
  EXPECT_NE(line.find("Avg generation throughput: 200.0 tokens/s"), std::string::npos) << line;
  EXPECT_NE(line.find("Running: 3 reqs, Waiting: 1 reqs"), std::string::npos) << line;
  EXPECT_NE(line.find("KV cache usage: 25.0%"), std::string::npos) << line;
  EXPECT_NE(line.find("Prefix cache hit rate: 25.0%"), std::string::npos) << line;
}

TEST(AccessLog, Line) {
  server::AccessLogEntry e{"127.0.0.1:5000", "POST", "/v1/completions", 200, 12, 64, 0.8124, true, false};
  EXPECT_EQ(server::format_access_log(e),
            "127.0.0.1:5000 \"POST /v1/completions\" 200 prompt_tokens=12 completion_tokens=64 812.4 ms stream");
  server::AccessLogEntry g{"", "GET", "/health", 200, -1, -1, 0.0001, false, false};
  EXPECT_EQ(server::format_access_log(g), "- \"GET /health\" 200 0.1 ms");
}

TEST(BoundSocket, PortInUseFailsAndPortZeroPicksOne) {
  auto a = server::BoundSocket::bind("127.0.0.1", 0);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_GT(a->port(), 0);
  ASSERT_EQ(::listen(a->fd(), 4), 0);
  auto b = server::BoundSocket::bind("127.0.0.1", a->port());
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(std::to_string(a->port())), std::string::npos) << b.status().to_string();
  EXPECT_NE(b.status().message().find("in use"), std::string::npos) << b.status().to_string();
  EXPECT_FALSE(server::BoundSocket::bind("127.0.0.1", 65536).ok());
  EXPECT_FALSE(server::BoundSocket::bind("localhost:1", 0).ok());
  auto v6 = server::BoundSocket::bind("::1", 0);
  if (v6.ok()) EXPECT_GT(v6->port(), 0);
}

TEST(LogLevel, ParseAndFilter) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::kWarn);
  EXPECT_FALSE(parse_log_level("verbose").has_value());
  const LogLevel saved = log_level();
  set_log_level(LogLevel::kWarn);
  EXPECT_FALSE(log_enabled(LogLevel::kInfo));
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  set_log_level(saved);
}

TEST(DeviceAuto, ResolvesWithAReason) {
  std::string why;
  auto d = resolve_device("auto", &why);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(why.empty());
  std::string cuda_why;
  const bool have_cuda = cuda_available(&cuda_why);
  EXPECT_EQ(d->type == Device::kCuda, have_cuda) << why;
  EXPECT_FALSE(resolve_device("tpu", &why).ok());
  auto cpu = resolve_device("cpu", &why);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->type, Device::kCpu);
}

}  // namespace
}  // namespace pagoda
