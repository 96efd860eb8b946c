// `pagoda bench serve`: an OpenAI-API load generator (vLLM `bench serve` definitions).
//
// Each request is a streaming /v1/completions call whose prompt is `--input-len` random token ids
// and which generates exactly `--output-len` tokens (max_tokens + ignore_eos), on its own
// connection. Arrivals are Poisson at --request-rate (inf: all at once), optionally capped at
// --max-concurrency requests in flight. All requests run as C++20 coroutines on one Asio thread.
//
// Per request: TTFT = first content chunk - send time; E2EL = last byte - send time;
// TPOT = (E2EL - TTFT) / (output tokens - 1); ITL = gaps between successive content chunks.
// Summary: mean / median / p99 of each, request and token throughput over the benchmark's
// duration, goodput = requests/s meeting every --goodput SLO (ttft:MS tpot:MS e2el:MS).
#include <utility>  // before Asio 1.74's awaitable.hpp, which uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/progress.h"

namespace pagoda::cli {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using net::awaitable;
using net::use_awaitable;
using Clock = std::chrono::steady_clock;

struct BenchServeOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string model;
  std::string api_key;
  int num_prompts = 100;
  double request_rate = std::numeric_limits<double>::infinity();
  int max_concurrency = 0;
  int input_len = 128;
  int output_len = 64;
  int64_t vocab_size = 0;
  uint64_t seed = 0;
  std::vector<std::string> goodput;
  bool json = false;
};

struct Result {
  bool ok = false;
  std::string error;
  double ttft = 0, latency = 0;
  int output_tokens = 0;
  std::vector<double> itl;
};

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Target {
  std::string host, port, path_prefix;
};

bool parse_url(const std::string& url, Target* t) {
  std::string s = url;
  if (s.rfind("http://", 0) == 0) s = s.substr(7);
  else if (s.find("://") != std::string::npos) return false;
  const size_t slash = s.find('/');
  std::string hostport = s.substr(0, slash);
  t->path_prefix = slash == std::string::npos ? "" : s.substr(slash);
  while (!t->path_prefix.empty() && t->path_prefix.back() == '/') t->path_prefix.pop_back();
  if (t->path_prefix.size() >= 3 && t->path_prefix.ends_with("/v1")) t->path_prefix.resize(t->path_prefix.size() - 3);
  const size_t colon = hostport.rfind(':');
  t->host = hostport.substr(0, colon);
  t->port = colon == std::string::npos ? "80" : hostport.substr(colon + 1);
  return !t->host.empty();
}

// A plain GET returning the body (for /v1/models).
awaitable<std::string> http_get(tcp::endpoint ep, std::string host, std::string target, std::string auth) {
  beast::tcp_stream stream(co_await net::this_coro::executor);
  co_await stream.async_connect(ep, use_awaitable);
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, host);
  if (!auth.empty()) req.set(http::field::authorization, "Bearer " + auth);
  co_await http::async_write(stream, req, use_awaitable);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  co_await http::async_read(stream, buf, res, use_awaitable);
  co_return res.body();
}

awaitable<void> run_one(tcp::endpoint ep, const Target& target, const BenchServeOptions& o, std::string body,
                        Result& r) {
  const auto t0 = Clock::now();
  try {
    beast::tcp_stream stream(co_await net::this_coro::executor);
    co_await stream.async_connect(ep, use_awaitable);
    stream.socket().set_option(tcp::no_delay(true));
    http::request<http::string_body> req{http::verb::post, target.path_prefix + "/v1/completions", 11};
    req.set(http::field::host, target.host);
    req.set(http::field::content_type, "application/json");
    if (!o.api_key.empty()) req.set(http::field::authorization, "Bearer " + o.api_key);
    req.body() = std::move(body);
    req.prepare_payload();
    co_await http::async_write(stream, req, use_awaitable);

    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    std::string pending;
    double last = -1;
    bool done = false;
    int usage_tokens = -1;
    // SSE events arrive in chunks of the chunked body; split them and time each content event.
    auto on_data = [&](std::string_view data) {
      pending.append(data);
      size_t pos;
      while ((pos = pending.find("\n\n")) != std::string::npos) {
        std::string event = pending.substr(0, pos);
        pending.erase(0, pos + 2);
        if (event.rfind("data: ", 0) != 0) continue;
        const std::string payload = event.substr(6);
        if (payload == "[DONE]") {
          done = true;
          continue;
        }
        auto j = nlohmann::json::parse(payload, nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("error")) {
          r.error = j["error"].value("message", "error event");
          continue;
        }
        if (j.contains("usage") && j["usage"].is_object()) usage_tokens = j["usage"].value("completion_tokens", -1);
        if (!j.contains("choices") || j["choices"].empty()) continue;
        const auto& c = j["choices"][0];
        if (!c.contains("text") || !c["text"].is_string() || c["text"].get<std::string>().empty()) continue;
        const double t = since(t0);
        if (last < 0) r.ttft = t;
        else r.itl.push_back(t - last);
        last = t;
        ++r.output_tokens;
      }
    };
    auto on_chunk = [&](uint64_t, beast::string_view data, beast::error_code&) -> size_t {
      on_data(std::string_view(data.data(), data.size()));
      return data.size();
    };
    parser.on_chunk_body(on_chunk);
    co_await http::async_read_header(stream, buf, parser, use_awaitable);
    const int status = parser.get().result_int();
    while (!parser.is_done()) co_await http::async_read_some(stream, buf, parser, use_awaitable);
    if (status != 200) {
      r.error = "HTTP " + std::to_string(status) + ": " + parser.get().body();
    } else if (!done) {
      r.error = "stream ended without [DONE]";
    } else if (r.error.empty()) {
      r.ok = true;
      if (usage_tokens >= 0) r.output_tokens = usage_tokens;
    }
    r.latency = since(t0);
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  } catch (const std::exception& e) {
    r.error = e.what();
    r.latency = since(t0);
  }
}

struct Summary {
  double mean = 0, median = 0, p99 = 0, stddev = 0;
};
Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  // Linear interpolation between closest ranks (numpy's default percentile).
  const double rank = 0.99 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  s.p99 = v[lo] + (v[hi] - v[lo]) * (rank - lo);
  double var = 0;
  for (double x : v) var += (x - s.mean) * (x - s.mean);
  s.stddev = std::sqrt(var / v.size());
  return s;
}

int run_bench_serve(const BenchServeOptions& o) {
  Target target;
  if (!parse_url(o.url, &target)) {
    std::cerr << "pagoda bench serve: cannot parse --url '" << o.url << "' (http://host:port)\n";
    return 2;
  }
  if (o.num_prompts < 1 || o.input_len < 1 || o.output_len < 1 || !(o.request_rate > 0)) {
    std::cerr << "pagoda bench serve: --num-prompts, --input-len, --output-len and --request-rate must be positive\n";
    return 2;
  }
  std::map<std::string, double> slo_ms;
  for (const auto& g : o.goodput) {
    const size_t colon = g.find(':');
    const std::string key = g.substr(0, colon);
    if (colon == std::string::npos || (key != "ttft" && key != "tpot" && key != "e2el")) {
      std::cerr << "pagoda bench serve: --goodput takes ttft:MS, tpot:MS, e2el:MS; got '" << g << "'\n";
      return 2;
    }
    slo_ms[key] = std::atof(g.c_str() + colon + 1);
  }

  net::io_context ioc(1);
  tcp::endpoint ep;
  try {
    tcp::resolver resolver(ioc);
    ep = *resolver.resolve(target.host, target.port).begin();
  } catch (const std::exception& e) {
    std::cerr << "pagoda bench serve: cannot resolve " << target.host << ":" << target.port << ": " << e.what() << "\n";
    return 1;
  }
  // Model name and vocabulary size from /v1/models.
  std::string model = o.model;
  int64_t vocab = o.vocab_size;
  {
    std::string body;
    std::string err;
    net::co_spawn(ioc, http_get(ep, target.host, target.path_prefix + "/v1/models", o.api_key),
                  [&](std::exception_ptr e, std::string b) {
                    if (e) {
                      try {
                        std::rethrow_exception(e);
                      } catch (const std::exception& x) {
                        err = x.what();
                      }
                    }
                    body = std::move(b);
                  });
    ioc.run();
    ioc.restart();
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (!err.empty() || j.is_discarded() || !j.contains("data") || j["data"].empty()) {
      std::cerr << "pagoda bench serve: GET /v1/models failed: " << (err.empty() ? body : err) << "\n";
      return 1;
    }
    if (model.empty()) model = j["data"][0].value("id", "");
    if (vocab <= 0) vocab = j["data"][0].value("vocab_size", int64_t{0});
    if (vocab <= 0) {
      std::cerr << "pagoda bench serve: the server does not report vocab_size; pass --vocab-size\n";
      return 2;
    }
  }

  std::mt19937_64 rng(o.seed);
  std::vector<std::string> bodies;
  for (int i = 0; i < o.num_prompts; ++i) {
    std::vector<int32_t> ids(o.input_len);
    for (auto& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    nlohmann::json b{{"model", model},        {"prompt", ids},       {"max_tokens", o.output_len},
                     {"ignore_eos", true},    {"stream", true},      {"temperature", 0.0},
                     {"stream_options", {{"include_usage", true}}}};
    bodies.push_back(b.dump());
  }
  std::vector<double> arrivals(o.num_prompts, 0.0);
  if (std::isfinite(o.request_rate)) {
    std::exponential_distribution<double> gap(o.request_rate);
    double t = 0;
    for (auto& a : arrivals) {
      a = t;
      t += gap(rng);
    }
  }

  std::vector<Result> results(o.num_prompts);
  int in_flight = 0;
  net::steady_timer slot(ioc, Clock::time_point::max());
  const auto start = Clock::now();
  Progress progress("bench serve", "requests", "requests");
  int ended = 0;
  auto driver = [&]() -> awaitable<void> {
    auto ex = co_await net::this_coro::executor;
    for (int i = 0; i < o.num_prompts; ++i) {
      net::steady_timer wait(ex, start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
      co_await wait.async_wait(use_awaitable);
      while (o.max_concurrency > 0 && in_flight >= o.max_concurrency) {
        beast::error_code ec;
        co_await slot.async_wait(net::redirect_error(use_awaitable, ec));
      }
      ++in_flight;
      net::co_spawn(ex, run_one(ep, target, o, std::move(bodies[i]), results[i]), [&](std::exception_ptr) {
        --in_flight;
        progress.update(++ended, o.num_prompts);
        slot.cancel_one();
      });
    }
  };
  net::co_spawn(ioc, driver(), net::detached);
  ioc.run();
  progress.finish();
  const double duration = since(start);

  std::vector<double> ttft, tpot, itl, e2el;
  int completed = 0, good = 0;
  int64_t total_out = 0;
  std::string first_error;
  for (const auto& r : results) {
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++completed;
    total_out += r.output_tokens;
    ttft.push_back(r.ttft);
    e2el.push_back(r.latency);
    const double t = r.output_tokens > 1 ? (r.latency - r.ttft) / (r.output_tokens - 1) : 0;
    if (r.output_tokens > 1) tpot.push_back(t);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    bool ok = true;
    if (slo_ms.count("ttft") && r.ttft * 1000 > slo_ms["ttft"]) ok = false;
    if (slo_ms.count("tpot") && t * 1000 > slo_ms["tpot"]) ok = false;
    if (slo_ms.count("e2el") && r.latency * 1000 > slo_ms["e2el"]) ok = false;
    good += ok;
  }
  const Summary s_ttft = summarize(ttft), s_tpot = summarize(tpot), s_itl = summarize(itl), s_e2el = summarize(e2el);
  nlohmann::json j;
  j["url"] = o.url;
  j["model"] = model;
  j["num_prompts"] = o.num_prompts;
  j["request_rate"] = std::isfinite(o.request_rate) ? nlohmann::json(o.request_rate) : nlohmann::json("inf");
  j["max_concurrency"] = o.max_concurrency;
  j["input_len"] = o.input_len;
  j["output_len"] = o.output_len;
  j["completed"] = completed;
  j["failed"] = o.num_prompts - completed;
  if (!first_error.empty()) j["first_error"] = first_error;
  j["duration_s"] = duration;
  j["total_input_tokens"] = static_cast<int64_t>(completed) * o.input_len;
  j["total_output_tokens"] = total_out;
  j["request_throughput"] = completed / duration;
  j["output_throughput"] = total_out / duration;
  j["total_token_throughput"] = (static_cast<double>(completed) * o.input_len + total_out) / duration;
  if (!slo_ms.empty()) j["request_goodput"] = good / duration;
  auto put = [&](const char* name, const Summary& s) {
    j[std::string("mean_") + name + "_ms"] = s.mean * 1000;
    j[std::string("median_") + name + "_ms"] = s.median * 1000;
    j[std::string("p99_") + name + "_ms"] = s.p99 * 1000;
    j[std::string("std_") + name + "_ms"] = s.stddev * 1000;
  };
  put("ttft", s_ttft);
  put("tpot", s_tpot);
  put("itl", s_itl);
  put("e2el", s_e2el);
  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    auto line = [](const std::string& k, const std::string& v) { std::cout << fmt::format("{:<40}{:>12}\n", k, v); };
    auto num = [](double v, int prec = 2) { return fmt::format("{:.{}f}", v, prec); };
    std::cout << "============ Serving Benchmark Result ============\n";
    line("Successful requests:", std::to_string(completed));
    line("Failed requests:", std::to_string(o.num_prompts - completed));
    if (!first_error.empty()) std::cout << "First error: " << first_error << "\n";
    line("Benchmark duration (s):", num(duration));
    line("Total input tokens:", std::to_string(static_cast<int64_t>(completed) * o.input_len));
    line("Total generated tokens:", std::to_string(total_out));
    line("Request throughput (req/s):", num(completed / duration));
    if (!slo_ms.empty()) line("Request goodput (req/s):", num(good / duration));
    line("Output token throughput (tok/s):", num(total_out / duration));
    line("Total Token throughput (tok/s):", num(j["total_token_throughput"].get<double>()));
    auto block = [&](const char* title, const char* name, const Summary& s) {
      std::cout << fmt::format("{:-^50}\n", std::string(" ") + title + " ");
      line(fmt::format("Mean {} (ms):", name), num(s.mean * 1000));
      line(fmt::format("Median {} (ms):", name), num(s.median * 1000));
      line(fmt::format("P99 {} (ms):", name), num(s.p99 * 1000));
    };
    block("Time to First Token", "TTFT", s_ttft);
    block("Time per Output Token (excl. 1st token)", "TPOT", s_tpot);
    block("Inter-token Latency", "ITL", s_itl);
    block("End-to-end Latency", "E2EL", s_e2el);
    std::cout << "==================================================\n";
  }
  return completed == o.num_prompts ? 0 : 1;
}

const BenchSubcommandRegistration kBenchServe("serve", "Load-test an OpenAI-compatible server (TTFT, TPOT, ITL, throughput)", [](CLI::App* app) {
  auto o = std::make_shared<BenchServeOptions>();
  app->add_option("--url", o->url, "Server base URL (http://host:port)");
  app->add_option("--model", o->model, "Model name (default: the server's first)");
  app->add_option("--api-key", o->api_key, "API key (Authorization: Bearer)");
  app->add_option("--num-prompts", o->num_prompts, "Requests to send")->check(CLI::Range(1, 16777216));
  app->add_option("--request-rate", o->request_rate, "Poisson arrival rate, requests/s (default inf: all at once)")->check(CLI::PositiveNumber);
  app->add_option("--max-concurrency", o->max_concurrency, "Requests in flight at most (0: unlimited)")->check(CLI::Range(0, 1048576));
  app->add_option("--input-len", o->input_len, "Prompt tokens (random ids)")->check(CLI::Range(1, 1048576));
  app->add_option("--output-len", o->output_len, "Generated tokens per request (exact: ignore_eos)")->check(CLI::Range(1, 1048576));
  app->add_option("--vocab-size", o->vocab_size, "Token id range for random prompts (default: from /v1/models)")->check(CLI::NonNegativeNumber);
  app->add_option("--seed", o->seed, "Seed of prompts and arrival times")->check(CLI::NonNegativeNumber);
  app->add_option("--goodput", o->goodput, "SLOs for goodput: ttft:MS tpot:MS e2el:MS")->expected(1, 3);
  app->add_flag("--json", o->json, "Print JSON");
  return [o] { return run_bench_serve(*o); };
});

}  // namespace
}  // namespace pagoda::cli
