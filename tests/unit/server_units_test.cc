// Service-layer building blocks without sockets: SSE framing, metrics exposition, token buckets,
// HTTP response framing.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "api/sse.h"
#include "server/fim_prompt.h"
#include "server/http_message.h"
#include "server/metrics.h"
#include "server/startup_handler.h"
#include "server/http_request_rules.h"
#include "server/token_bucket.h"
#include "server/work_pool.h"

namespace pagoda {
namespace {

// The handler `serve` listens with while the model loads.
class FixedHandler final : public server::HttpHandler {
 public:
  server::HandlerResult handle(server::HttpRequest&) override {
    server::HandlerResult r;
    r.response.body = R"({"status":"ok"})";
    return r;
  }
  server::HttpResponse protocol_error(int status, const std::string&) override {
    server::HttpResponse r;
    r.status = status;
    r.body = "inner";
    return r;
  }
};

TEST(StartupHandler, LoadingThenReadyOrFailed) {
  server::StartupHandler h;
  server::HttpRequest health;
  health.method = "GET";
  health.path = "/health";
  server::HttpRequest chat;
  chat.method = "POST";
  chat.path = "/v1/chat/completions";
  server::HandlerResult r = h.handle(health);
  EXPECT_EQ(r.response.status, 503);
  EXPECT_EQ(r.response.body, R"({"status":"loading"})");
  r = h.handle(chat);
  EXPECT_EQ(r.response.status, 503);
  EXPECT_NE(r.response.body.find(R"("code":"loading")"), std::string::npos) << r.response.body;
  EXPECT_NE(std::find(r.response.headers.begin(), r.response.headers.end(), std::make_pair(std::string("Retry-After"), std::string("1"))),
            r.response.headers.end());
  EXPECT_EQ(h.protocol_error(413, "too large").status, 413);
  FixedHandler inner;
  h.set_ready(inner);
  EXPECT_TRUE(h.ready());
  r = h.handle(health);
  EXPECT_EQ(r.response.status, 200);
  EXPECT_EQ(r.response.body, R"({"status":"ok"})");
  EXPECT_EQ(h.protocol_error(431, "x").body, "inner");

  server::StartupHandler failed;
  failed.set_failed("no such file");
  r = failed.handle(health);
  EXPECT_EQ(r.response.status, 503);
  EXPECT_EQ(r.response.body, R"({"status":"failed","error":"no such file"})");
}

TEST(FimPrompt, FindsTheFamiliesTokensAndBuildsPsm) {
  auto lookup = [](const std::map<std::string, int32_t>& vocab) {
    return [&vocab](std::string_view t) -> std::optional<int32_t> {
      auto it = vocab.find(std::string(t));
      if (it == vocab.end()) return std::nullopt;
      return it->second;
    };
  };
  const std::map<std::string, int32_t> qwen = {{"<|fim_prefix|>", 151659}, {"<|fim_middle|>", 151660},
                                               {"<|fim_suffix|>", 151661}, {"<fim_prefix>", 7}};
  auto fim = server::find_fim_tokens(lookup(qwen));
  ASSERT_TRUE(fim);
  EXPECT_EQ(fim->prefix, 151659);
  EXPECT_EQ(fim->suffix, 151661);
  EXPECT_EQ(fim->middle, 151660);
  const std::vector<int32_t> pre = {10, 11}, suf = {20};
  EXPECT_EQ(server::fim_prompt(*fim, -1, pre, suf), (std::vector<int32_t>{151659, 10, 11, 151661, 20, 151660}));
  EXPECT_EQ(server::fim_prompt(*fim, 1, pre, {}), (std::vector<int32_t>{1, 151659, 10, 11, 151661, 151660}));
  const std::map<std::string, int32_t> starcoder = {{"<fim_prefix>", 1}, {"<fim_middle>", 2}, {"<fim_suffix>", 3}};
  fim = server::find_fim_tokens(lookup(starcoder));
  ASSERT_TRUE(fim);
  EXPECT_EQ(fim->names, "<fim_prefix> <fim_suffix> <fim_middle>");
  // Two of the three are not a FIM vocabulary.
  const std::map<std::string, int32_t> partial = {{"<|fim_prefix|>", 1}, {"<|fim_suffix|>", 2}, {"<fim_middle>", 3}};
  EXPECT_FALSE(server::find_fim_tokens(lookup(partial)));
}

TEST(Sse, Framing) {
  EXPECT_EQ(api::sse_event(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(api::sse_event("l1\nl2\r\nl3\rl4"), "data: l1\ndata: l2\ndata: l3\ndata: l4\n\n");
  EXPECT_EQ(api::sse_event(""), "data: \n\n");
  EXPECT_EQ(api::kSseDone, "data: [DONE]\n\n");
}

TEST(HttpFraming, ChunksAndHead) {
  std::string out;
  server::append_chunk("hello", &out);
  server::append_chunk(std::string(26, 'x'), &out);
  server::append_chunk({}, &out);
  EXPECT_EQ(out, "5\r\nhello\r\n1a\r\n" + std::string(26, 'x') + "\r\n0\r\n\r\n");
  const std::string head = server::format_response_head(429, "application/json", {{"Retry-After", "3"}}, false, 12, true);
  EXPECT_EQ(head.rfind("HTTP/1.1 429 Too Many Requests\r\n", 0), 0u);
  EXPECT_NE(head.find("Retry-After: 3\r\n"), std::string::npos);
  EXPECT_NE(head.find("Content-Length: 12\r\n"), std::string::npos);
  EXPECT_NE(head.find("Connection: close\r\n"), std::string::npos);
  EXPECT_TRUE(head.ends_with("\r\n\r\n"));
}

TEST(Metrics, ExpositionFormat) {
  server::MetricsRegistry r;
  auto& c = r.counter("pagoda:http_requests_total", "HTTP requests.\nBy route.", {"route", "status"});
  c.labels({"/v1/completions", "200"}).inc();
  c.labels({"/v1/completions", "200"}).inc(2);
  c.labels({"we\"ird\\path\n", "404"}).inc();
  auto& g = r.gauge("pagoda:kv_cache_usage_perc", "KV usage.", {"model_name"});
  g.labels({"m"}).set(0.25);
  auto& h = r.histogram("pagoda:ttft_seconds", "TTFT.", {"model_name"}, {0.1, 0.005, 1});
  auto& hm = h.labels({"m"});
  hm.observe(0.001);
  hm.observe(0.1);   // le is inclusive
  hm.observe(0.5);
  hm.observe(7);
  const std::string text = r.render();
  EXPECT_NE(text.find("# HELP pagoda:http_requests_total HTTP requests.\\nBy route.\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE pagoda:http_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("pagoda:http_requests_total{route=\"/v1/completions\",status=\"200\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("pagoda:http_requests_total{route=\"we\\\"ird\\\\path\\n\",status=\"404\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE pagoda:kv_cache_usage_perc gauge\npagoda:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE pagoda:ttft_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("pagoda:ttft_seconds_bucket{model_name=\"m\",le=\"0.005\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("pagoda:ttft_seconds_bucket{model_name=\"m\",le=\"0.1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("pagoda:ttft_seconds_bucket{model_name=\"m\",le=\"1\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("pagoda:ttft_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("pagoda:ttft_seconds_sum{model_name=\"m\"} 7.601"), std::string::npos) << text;
  EXPECT_NE(text.find("pagoda:ttft_seconds_count{model_name=\"m\"} 4\n"), std::string::npos);
  EXPECT_EQ(server::format_metric_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(server::format_metric_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(server::format_metric_value(0.0 / 0.0), "NaN");
  EXPECT_EQ(server::format_metric_value(12345678), "12345678");
}

TEST(Metrics, ConcurrentUpdates) {
  server::MetricsRegistry r;
  auto& c = r.counter("c_total", "c", {"k"});
  auto& h = r.histogram("h", "h", {}, {1, 2});
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        c.labels({std::to_string(i % 3)}).inc();
        h.labels({}).observe(t);
      }
    });
  for (auto& t : ts) t.join();
  double total = 0;
  c.for_each([&](const std::vector<std::string>&, const server::Counter& x) { total += x.value(); });
  EXPECT_EQ(total, 40000);
  EXPECT_EQ(h.labels({}).snapshot().count, 40000u);
  EXPECT_EQ(h.labels({}).snapshot().cumulative[0], 20000u);  // le=1 holds the observations 0 and 1
}

TEST(TokenBucket, RefillAndRetryAfter) {
  server::TokenBucket b(/*rate=*/2, /*capacity=*/2, /*now=*/0);
  EXPECT_FALSE(b.take(1, 0));
  EXPECT_FALSE(b.take(1, 0));
  auto wait = b.take(1, 0);
  ASSERT_TRUE(wait);
  EXPECT_NEAR(*wait, 0.5, 1e-9);
  EXPECT_FALSE(b.take(1, 0.5));   // refilled one token
  EXPECT_TRUE(b.take(1, 0.6));
  EXPECT_NEAR(b.available(10), 2, 1e-9);  // capped at capacity
  // Oversized requests pass on a full bucket and leave it in debt.
  EXPECT_FALSE(b.take(5, 10));
  auto w2 = b.take(1, 10);
  ASSERT_TRUE(w2);
  EXPECT_NEAR(*w2, 2.0, 1e-9);  // from -3 to 1 at 2/s
  b.refund(3, 10);
  EXPECT_NEAR(b.available(10), 0, 1e-9);
}

TEST(RateLimiter, PerKeyAndParse) {
  server::RateLimitConfig cfg;
  ASSERT_FALSE(server::parse_rate_limit("rps=2,tpm=600", &cfg));
  EXPECT_EQ(cfg.requests_per_s, 2);
  EXPECT_EQ(cfg.tokens_per_min, 600);
  server::RateLimitConfig bad;
  EXPECT_TRUE(server::parse_rate_limit("rps=x", &bad));
  EXPECT_TRUE(server::parse_rate_limit("qps=1", &bad));
  server::RateLimiter lim(cfg);
  EXPECT_FALSE(lim.admit("a", 100, 0));
  EXPECT_FALSE(lim.admit("a", 100, 0));
  EXPECT_TRUE(lim.admit("a", 100, 0));   // third request within the second
  EXPECT_FALSE(lim.admit("b", 100, 0));  // other keys are independent
  // Tokens: 600/min = 10/s; a request for 590 more tokens than are left must wait.
  EXPECT_FALSE(lim.admit("c", 550, 0));
  auto w = lim.admit("c", 100, 0.0);
  ASSERT_TRUE(w);
  EXPECT_NEAR(*w, 5.0, 1e-6);
  lim.refund("c", 500, 0);
  EXPECT_FALSE(lim.admit("c", 100, 0.0));
}

TEST(RateLimiter, IdleKeysAreDropped) {
  // 50k distinct callers once each, 1 s apart in groups: the table keeps only callers whose
  // buckets have not refilled (issue 25: entries were never freed).
  server::RateLimitConfig cfg;
  cfg.requests_per_s = 1;
  server::RateLimiter lim(cfg);
  double now = 0;
  for (int i = 0; i < 50000; ++i) {
    if (i % 500 == 0) now += 2;  // everything older than 1 s has refilled
    EXPECT_FALSE(lim.admit("addr:" + std::to_string(i), 1, now));
  }
  EXPECT_LE(lim.num_keys(), 2048u);
  // A caller still inside its refill period keeps its state across sweeps.
  EXPECT_FALSE(lim.admit("busy", 1, now));
  for (int i = 0; i < 5000; ++i) EXPECT_FALSE(lim.admit("new:" + std::to_string(i), 1, now));
  EXPECT_TRUE(lim.admit("busy", 1, now));
}

TEST(HttpRules, BearerToken) {
  EXPECT_EQ(server::bearer_token("Bearer K1"), "K1");
  EXPECT_EQ(server::bearer_token("bearer K1"), "K1");
  EXPECT_EQ(server::bearer_token("BEARER K1"), "K1");
  EXPECT_EQ(server::bearer_token("  BeArEr \t K1  "), "K1");
  EXPECT_EQ(server::bearer_token("Bearer"), "");
  EXPECT_EQ(server::bearer_token("BearerK1"), "");
  EXPECT_EQ(server::bearer_token("Basic K1"), "");
  EXPECT_EQ(server::bearer_token(""), "");
}

TEST(HttpRules, PeerHost) {
  EXPECT_EQ(server::peer_host("ipv4:127.0.0.1:54321"), "127.0.0.1");
  EXPECT_EQ(server::peer_host("ipv6:[::1]:50051"), "::1");
  EXPECT_EQ(server::peer_host("unix:/tmp/s"), "unix:/tmp/s");
}

TEST(HttpRules, FramingAndContentType) {
  EXPECT_FALSE(server::check_request_framing(""));
  EXPECT_FALSE(server::check_request_framing("chunked"));
  EXPECT_FALSE(server::check_request_framing(" Chunked "));
  auto v = server::check_request_framing("gzip, chunked");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->status, 501);
  EXPECT_TRUE(server::check_request_framing("chunked, chunked"));
  EXPECT_FALSE(server::check_request_content_type("POST", "application/json"));
  EXPECT_FALSE(server::check_request_content_type("POST", "Application/JSON; charset=utf-8"));
  EXPECT_FALSE(server::check_request_content_type("GET", ""));
  auto t = server::check_request_content_type("POST", "text/plain");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, 415);
  EXPECT_TRUE(server::check_request_content_type("POST", ""));
  EXPECT_TRUE(server::check_request_content_type("POST", "application/jsonp"));
}

TEST(WorkPool, BoundedQueue) {
  server::WorkPool pool(1, 2);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> ran{0};
  auto blocker = [&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
    ++ran;
  };
  ASSERT_TRUE(pool.try_submit(blocker));
  // Wait until the worker took the blocker, then fill the queue.
  for (int i = 0; i < 1000 && pool.queued() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(pool.try_submit([&] { ++ran; }));
  EXPECT_TRUE(pool.try_submit([&] { ++ran; }));
  EXPECT_FALSE(pool.try_submit([&] { ++ran; }));  // full: refused, not queued
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (int i = 0; i < 2000 && ran.load() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ran.load(), 3);
}

}  // namespace
}  // namespace pagoda
