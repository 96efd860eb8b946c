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
//
// --compare-url B: a paired A/B comparison in one run. Every prompt is sent twice, once to --url
// (arm A) and once to B, as adjacent requests in a seeded random order, so the two arms share the
// client, the arrival process and whatever queue is behind both URLs (a gateway in front of the
// worker that --url reaches directly): the per-prompt TTFT difference B - A cancels that queue's
// noise. Reported per arm and as the median of the paired differences and the difference of the
// arms' median TTFTs, each with a 95 % confidence interval (order statistics of the differences;
// a bootstrap over pairs). --num-prompts counts the pairs; --max-concurrency caps both arms together.
// A pair's requests are launched together, so where both URLs lead to one queue, the slower path's
// request always reaches it second; --jitter-ms (a random wait before each request's clock starts)
// makes that order random.
#include <utility>  // before Asio 1.74's awaitable.hpp, which uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
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
  std::string compare_url;  // arm B of a paired comparison (empty: none)
  std::string model;
  std::string api_key;
  int num_prompts = 100;
  double request_rate = std::numeric_limits<double>::infinity();
  int max_concurrency = 0;
  int input_len = 128;
  int output_len = 64;
  int64_t vocab_size = 0;
  uint64_t seed = 0;
  double jitter_ms = 0;  // each request waits U(0, jitter_ms) before it is sent
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
                        Result& r, double delay_s = 0) {
  if (delay_s > 0) {  // --jitter-ms: before the request's own clock starts
    net::steady_timer wait(co_await net::this_coro::executor,
                           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(delay_s)));
    co_await wait.async_wait(use_awaitable);
  }
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

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t h = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + h, v.end());
  const double hi = v[h];
  if (v.size() % 2) return hi;
  return 0.5 * (*std::max_element(v.begin(), v.begin() + h) + hi);
}

// The paired comparison of --compare-url: ttft_a[i], ttft_b[i] (seconds) of prompt i, both arms
// completed. Returns the JSON block (milliseconds).
nlohmann::json paired_ttft(const std::vector<double>& ttft_a, const std::vector<double>& ttft_b, uint64_t seed) {
  const size_t n = ttft_a.size();
  nlohmann::json j;
  j["pairs"] = n;
  if (n == 0) return j;
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = 1000 * (ttft_b[i] - ttft_a[i]);
  std::sort(d.begin(), d.end());
  // A distribution-free 95 % interval of the median difference: the order statistics of 1-based
  // ranks floor(n/2 - 0.98 sqrt(n)) and ceil(n/2 + 0.98 sqrt(n)) (the normal approximation of the
  // binomial).
  const double half = 0.98 * std::sqrt(static_cast<double>(n));
  const auto at = [&](double rank) {
    return d[static_cast<size_t>(std::clamp(rank, 0.0, static_cast<double>(n - 1)))];
  };
  j["median_diff_ms"] = median_of(d);
  j["median_diff_ci95_ms"] = {at(std::floor(n / 2.0 - half) - 1), at(std::ceil(n / 2.0 + half) - 1)};
  j["mean_diff_ms"] = std::accumulate(d.begin(), d.end(), 0.0) / n;
  // The difference of the arms' medians (what "p50 TTFT added" compares), and a bootstrap over
  // the pairs (2,000 resamples, percentile interval).
  j["median_ttft_a_ms"] = 1000 * median_of(ttft_a);
  j["median_ttft_b_ms"] = 1000 * median_of(ttft_b);
  j["median_ttft_delta_ms"] = 1000 * (median_of(ttft_b) - median_of(ttft_a));
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<double> deltas, a(n), b(n);
  for (int rep = 0; rep < 2000; ++rep) {
    for (size_t i = 0; i < n; ++i) {
      const size_t k = rng() % n;
      a[i] = ttft_a[k];
      b[i] = ttft_b[k];
    }
    deltas.push_back(1000 * (median_of(b) - median_of(a)));
  }
  std::sort(deltas.begin(), deltas.end());
  j["median_ttft_delta_ci95_ms"] = {deltas[50], deltas[1949]};
  return j;
}

int run_bench_serve(const BenchServeOptions& o) {
  Target target;
  if (!parse_url(o.url, &target)) {
    std::cerr << "pagoda bench serve: cannot parse --url '" << o.url << "' (http://host:port)\n";
    return 2;
  }
  const bool paired = !o.compare_url.empty();
  Target target_b;
  if (paired && !parse_url(o.compare_url, &target_b)) {
    std::cerr << "pagoda bench serve: cannot parse --compare-url '" << o.compare_url << "' (http://host:port)\n";
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
  tcp::endpoint ep, ep_b;
  for (auto [t, e] : {std::pair{&target, &ep}, std::pair{&target_b, &ep_b}}) {
    if (t == &target_b && !paired) break;
    try {
      tcp::resolver resolver(ioc);
      *e = *resolver.resolve(t->host, t->port).begin();
    } catch (const std::exception& x) {
      std::cerr << "pagoda bench serve: cannot resolve " << t->host << ":" << t->port << ": " << x.what() << "\n";
      return 1;
    }
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
  // Request i sends prompt prompt_of[i] to arm arm_of[i] (1: --compare-url). Paired: each prompt
  // twice, adjacent, in a seeded random order within the pair.
  const int num_requests = paired ? 2 * o.num_prompts : o.num_prompts;
  std::vector<int> prompt_of(num_requests), arm_of(num_requests, 0);
  for (int i = 0; i < num_requests; ++i) prompt_of[i] = paired ? i / 2 : i;
  if (paired) {
    for (int p = 0; p < o.num_prompts; ++p) {
      const int first = static_cast<int>(rng() & 1);
      arm_of[2 * p] = first;
      arm_of[2 * p + 1] = 1 - first;
    }
  }
  std::vector<double> jitter(num_requests, 0.0);
  if (o.jitter_ms > 0) {
    std::mt19937_64 jrng(o.seed ^ 0x5bd1e995ull);  // its own stream: prompts and arrivals stay as without it
    std::uniform_real_distribution<double> u(0.0, o.jitter_ms / 1000.0);
    for (auto& x : jitter) x = u(jrng);
  }
  std::vector<double> arrivals(num_requests, 0.0);
  if (std::isfinite(o.request_rate)) {
    std::exponential_distribution<double> gap(o.request_rate);
    double t = 0;
    for (auto& a : arrivals) {
      a = t;
      t += gap(rng);
    }
  }

  std::vector<Result> results(num_requests);
  int in_flight = 0;
  net::steady_timer slot(ioc, Clock::time_point::max());
  const auto start = Clock::now();
  Progress progress("bench serve", "requests", "requests");
  int ended = 0;
  auto driver = [&]() -> awaitable<void> {
    auto ex = co_await net::this_coro::executor;
    for (int i = 0; i < num_requests; ++i) {
      net::steady_timer wait(ex, start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
      co_await wait.async_wait(use_awaitable);
      while (o.max_concurrency > 0 && in_flight >= o.max_concurrency) {
        beast::error_code ec;
        co_await slot.async_wait(net::redirect_error(use_awaitable, ec));
      }
      ++in_flight;
      const bool b = arm_of[i] == 1;
      // A pair's first request copies the prompt's body (its second one still needs it).
      std::string body = paired && i % 2 == 0 ? bodies[prompt_of[i]] : std::move(bodies[prompt_of[i]]);
      net::co_spawn(ex, run_one(b ? ep_b : ep, b ? target_b : target, o, std::move(body), results[i], jitter[i]), [&](std::exception_ptr) {
        --in_flight;
        progress.update(++ended, num_requests);
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
  j["failed"] = num_requests - completed;
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
  if (paired) {
    // Per arm (A: --url, B: --compare-url), and the pairs where both requests completed.
    nlohmann::json arms = nlohmann::json::array();
    std::vector<std::vector<double>> arm_ttft(2), arm_e2el(2), arm_tpot(2);
    std::vector<int> arm_done(2, 0);
    for (int i = 0; i < num_requests; ++i) {
      const Result& r = results[i];
      if (!r.ok) continue;
      ++arm_done[arm_of[i]];
      arm_ttft[arm_of[i]].push_back(r.ttft);
      arm_e2el[arm_of[i]].push_back(r.latency);
      if (r.output_tokens > 1) arm_tpot[arm_of[i]].push_back((r.latency - r.ttft) / (r.output_tokens - 1));
    }
    for (int a = 0; a < 2; ++a) {
      nlohmann::json arm{{"url", a ? o.compare_url : o.url}, {"completed", arm_done[a]}};
      const Summary t = summarize(arm_ttft[a]), e = summarize(arm_e2el[a]), p = summarize(arm_tpot[a]);
      arm["median_ttft_ms"] = 1000 * t.median;
      arm["mean_ttft_ms"] = 1000 * t.mean;
      arm["p99_ttft_ms"] = 1000 * t.p99;
      arm["median_tpot_ms"] = 1000 * p.median;
      arm["median_e2el_ms"] = 1000 * e.median;
      arms.push_back(arm);
    }
    std::vector<double> pa, pb;
    std::vector<std::array<double, 2>> pairs;
    for (int i = 0; i + 1 < num_requests; i += 2) {
      const Result& x = results[i];
      const Result& y = results[i + 1];
      if (!x.ok || !y.ok) continue;
      const Result& a = arm_of[i] == 0 ? x : y;
      const Result& b = arm_of[i] == 0 ? y : x;
      pa.push_back(a.ttft);
      pb.push_back(b.ttft);
      pairs.push_back({1000 * a.ttft, 1000 * b.ttft});
    }
    j["compare"] = {{"arms", arms}, {"ttft", paired_ttft(pa, pb, o.seed)}, {"pair_ttft_ms", pairs}};
  }
  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    auto line = [](const std::string& k, const std::string& v) { std::cout << fmt::format("{:<40}{:>12}\n", k, v); };
    auto num = [](double v, int prec = 2) { return fmt::format("{:.{}f}", v, prec); };
    std::cout << "============ Serving Benchmark Result ============\n";
    line("Successful requests:", std::to_string(completed));
    line("Failed requests:", std::to_string(num_requests - completed));
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
    if (paired) {
      const auto& c = j["compare"]["ttft"];
      std::cout << fmt::format("{:-^50}\n", " Paired: --compare-url minus --url ");
      line("Pairs:", std::to_string(c["pairs"].get<size_t>()));
      if (c["pairs"].get<size_t>() > 0) {
        line("Median TTFT A / B (ms):", num(c["median_ttft_a_ms"].get<double>()) + " / " + num(c["median_ttft_b_ms"].get<double>()));
        line("Median TTFT B - A (ms):", num(c["median_ttft_delta_ms"].get<double>()));
        line("  95% CI (bootstrap):", num(c["median_ttft_delta_ci95_ms"][0].get<double>()) + ".." + num(c["median_ttft_delta_ci95_ms"][1].get<double>()));
        line("Median paired TTFT diff (ms):", num(c["median_diff_ms"].get<double>()));
        line("  95% CI:", num(c["median_diff_ci95_ms"][0].get<double>()) + ".." + num(c["median_diff_ci95_ms"][1].get<double>()));
      }
    }
    std::cout << "==================================================\n";
  }
  return completed == num_requests ? 0 : 1;
}

const BenchSubcommandRegistration kBenchServe("serve", "Load-test an OpenAI-compatible server (TTFT, TPOT, ITL, throughput)", [](CLI::App* app) {
  auto o = std::make_shared<BenchServeOptions>();
  app->add_option("--url", o->url, "Server base URL (http://host:port)");
  app->add_option("--compare-url", o->compare_url,
                  "Second server URL: send every prompt to both, paired and interleaved, and report the TTFT differences");
  app->add_option("--model", o->model, "Model name (default: the server's first)");
  app->add_option("--api-key", o->api_key, "API key (Authorization: Bearer)");
  app->add_option("--num-prompts", o->num_prompts, "Requests to send")->check(CLI::Range(1, 16777216));
  app->add_option("--request-rate", o->request_rate, "Poisson arrival rate, requests/s (default inf: all at once)")->check(CLI::PositiveNumber);
  app->add_option("--max-concurrency", o->max_concurrency, "Requests in flight at most (0: unlimited)")->check(CLI::Range(0, 1048576));
  app->add_option("--input-len", o->input_len, "Prompt tokens (random ids)")->check(CLI::Range(1, 1048576));
  app->add_option("--output-len", o->output_len, "Generated tokens per request (exact: ignore_eos)")->check(CLI::Range(1, 1048576));
  app->add_option("--vocab-size", o->vocab_size, "Token id range for random prompts (default: from /v1/models)")->check(CLI::NonNegativeNumber);
  app->add_option("--seed", o->seed, "Seed of prompts and arrival times")->check(CLI::NonNegativeNumber);
  app->add_option("--jitter-ms", o->jitter_ms,
                  "Each request waits a uniform random 0..MS before it is sent (its times start then; it holds its "
                  "concurrency slot meanwhile): with --compare-url, the two requests of a pair then reach a queue they "
                  "share in a random order")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--goodput", o->goodput, "SLOs for goodput: ttft:MS tpot:MS e2el:MS")->expected(1, 3);
  app->add_flag("--json", o->json, "Print JSON");
  return [o] { return run_bench_serve(*o); };
});

}  // namespace
}  // namespace pagoda::cli
