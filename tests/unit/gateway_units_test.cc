// The gateway's socket-free parts: worker specs and the config file, request summaries, prefix
// keys, routing (rendezvous hashing with bounded loads, least load, weights) and admission.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "gateway/admission.h"
#include "gateway/config.h"
#include "gateway/gateway_metrics.h"
#include "gateway/prefix_key.h"
#include "gateway/request_summary.h"
#include "gateway/router.h"

namespace pagoda::gateway {
namespace {

TEST(GatewayConfig, WorkerSpecs) {
  auto w = parse_worker("http://10.0.0.2:8000#m1,m2@2.5");
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->host, "10.0.0.2");
  EXPECT_EQ(w->port, 8000);
  EXPECT_EQ(w->models, (std::vector<std::string>{"m1", "m2"}));
  EXPECT_DOUBLE_EQ(w->weight, 2.5);
  EXPECT_FALSE(w->dns);
  auto d = parse_worker("dns:workers.default.svc:8000");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->dns);
  EXPECT_EQ(d->host, "workers.default.svc");
  for (const char* bad : {"10.0.0.2:8000", "http://host", "http://h:0", "http://h:70000", "http://h:1@0", "http://h:1@x"})
    EXPECT_FALSE(parse_worker(bad).ok()) << bad;
}

TEST(GatewayConfig, FileAndValidation) {
  const std::string path = ::testing::TempDir() + "/gw.json";
  {
    std::ofstream f(path);
    f << R"({"port": 9000, "policy": "least-load", "workers": ["http://127.0.0.1:1",
            {"url": "http://127.0.0.1:2", "models": ["a"], "weight": 3}, {"dns": "svc:8000"}],
            "api_keys": ["k1", {"key": "k2", "requests_per_s": 2, "tokens_per_min": 600}],
            "global_limit": {"requests_per_s": 100}})";
  }
  GatewayConfig c;
  ASSERT_TRUE(load_config_file(path, &c).ok());
  EXPECT_EQ(c.port, 9000);
  EXPECT_EQ(c.policy, "least-load");
  ASSERT_EQ(c.workers.size(), 3u);
  EXPECT_EQ(c.workers[1].models, std::vector<std::string>{"a"});
  EXPECT_DOUBLE_EQ(c.workers[1].weight, 3);
  EXPECT_TRUE(c.workers[2].dns);
  ASSERT_EQ(c.api_keys.size(), 2u);
  EXPECT_DOUBLE_EQ(c.api_keys[1].limit.tokens_per_min, 600);
  EXPECT_DOUBLE_EQ(c.global_limit.requests_per_s, 100);
  EXPECT_TRUE(validate(c).ok());
  c.policy = "random";
  EXPECT_NE(validate(c).message().find("policy"), std::string::npos);
  {
    std::ofstream f(path);
    f << R"({"prot": 9000})";
  }
  GatewayConfig c2;
  EXPECT_NE(load_config_file(path, &c2).message().find("unknown key 'prot'"), std::string::npos);
  EXPECT_FALSE(validate(GatewayConfig()).ok());  // no workers
  std::remove(path.c_str());
}

TEST(GatewayRequest, Summaries) {
  auto s = summarize_request(false, R"({"model":"m","prompt":"abcdefgh","max_tokens":10,"stream":true})", 256);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->model, "m");
  EXPECT_TRUE(s->stream);
  EXPECT_EQ(s->affinity_text, "abcdefgh");
  EXPECT_EQ(s->estimated_tokens, 2 + 10);
  auto c = summarize_request(true, R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"U"}]}]})", 256);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->affinity_text, std::string("system\x1fS\x1euser\x1fU\x1e"));
  EXPECT_EQ(c->max_tokens, 256);
  auto ids = summarize_request(false, R"({"prompt":[1,2,3]})", 16);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->affinity_text, "1 2 3");
  EXPECT_FALSE(summarize_request(false, "not json", 1).ok());
  EXPECT_FALSE(summarize_request(false, R"({"prompt":"x","max_tokens":-1})", 1).ok());
  EXPECT_FALSE(summarize_request(true, R"({"prompt":"x"})", 1).ok());
  EXPECT_FALSE(summarize_request(false, R"({"model":3,"prompt":"x"})", 1).ok());
}

TEST(GatewayPrefixKey, SharedLeadingBlocks) {
  const std::string sys(300, 's');
  EXPECT_FALSE(prefix_key("short", 64, 4).has_value());
  // Same first 4 blocks of 64: same key whatever follows.
  EXPECT_EQ(prefix_key(sys + "question one", 64, 4), prefix_key(sys + "another question", 64, 4));
  // A difference inside the leading blocks changes it.
  std::string other = sys;
  other[100] = 't';
  EXPECT_NE(prefix_key(sys, 64, 4), prefix_key(other, 64, 4));
  // A partial last block is not hashed: 100 chars = 1 full block of 64.
  EXPECT_EQ(prefix_key(std::string(100, 'a'), 64, 4), prefix_key(std::string(127, 'a'), 64, 4));
  EXPECT_NE(prefix_key(std::string(100, 'a'), 64, 4), prefix_key(std::string(128, 'a'), 64, 4));
}

std::vector<Candidate> three(double w0 = 1, double w1 = 1, double w2 = 1) {
  std::vector<Candidate> c(3);
  c[0].label = "10.0.0.1:8000", c[0].weight = w0;
  c[1].label = "10.0.0.2:8000", c[1].weight = w1;
  c[2].label = "10.0.0.3:8000", c[2].weight = w2;
  return c;
}

TEST(GatewayRouter, PrefixAffinityIsStableAndSpreadsKeys) {
  auto c = three();
  RouteInput in;
  std::map<size_t, int> per_worker;
  for (uint64_t k = 0; k < 3000; ++k) {
    in.prefix_key = fnv1a64(std::to_string(k));
    const auto d1 = choose_worker(c, in);
    in.rotation = k * 7;  // the rotation does not move a key
    const auto d2 = choose_worker(c, in);
    EXPECT_EQ(d1.index, d2.index);
    EXPECT_EQ(d1.reason, "prefix");
    EXPECT_TRUE(d1.affinity_home);
    ++per_worker[d1.index];
  }
  for (auto& [i, n] : per_worker) EXPECT_NEAR(n, 1000, 150) << i;
}

TEST(GatewayRouter, RemovingAWorkerMovesOnlyItsKeys) {
  auto c = three();
  auto two = c;
  two.erase(two.begin() + 1);
  RouteInput in;
  int moved = 0;
  for (uint64_t k = 0; k < 2000; ++k) {
    in.prefix_key = fnv1a64("key" + std::to_string(k));
    const auto a = choose_worker(c, in);
    const auto b = choose_worker(two, in);
    if (a.index != 1) {
      moved += c[a.index].label != two[b.index].label;
    }
  }
  EXPECT_EQ(moved, 0);
}

TEST(GatewayRouter, WeightsShareTheKeys) {
  auto c = three(1, 1, 2);
  RouteInput in;
  std::map<size_t, int> per;
  for (uint64_t k = 0; k < 4000; ++k) {
    in.prefix_key = fnv1a64("w" + std::to_string(k));
    ++per[choose_worker(c, in).index];
  }
  EXPECT_NEAR(per[2], 2000, 200);
  EXPECT_NEAR(per[0], 1000, 150);
}

TEST(GatewayRouter, HotPrefixOverflowsBeyondTheBound) {
  auto c = three();
  RouteInput in;
  in.prefix_key = fnv1a64("hot system prompt");
  in.load_bound = 1.25;
  in.load_bound_floor = 0;
  const size_t home = choose_worker(c, in).index;
  // The home worker holds 4 of 6 in flight: bound = ceil(1.25 * 7 / 3) = 3 -> overflow.
  c[home].inflight = 4;
  c[(home + 1) % 3].inflight = 1;
  c[(home + 2) % 3].inflight = 1;
  const auto d = choose_worker(c, in);
  EXPECT_NE(d.index, home);
  EXPECT_EQ(d.reason, "prefix-overflow");
  EXPECT_FALSE(d.affinity_home);
  EXPECT_EQ(d.bound, 3);  // the decision names the taker's load and bound (the request line's load=N/B)
  EXPECT_EQ(d.inflight, 1);
  // Within the bound it stays home.
  c[home].inflight = 2;
  const auto h = choose_worker(c, in);
  EXPECT_EQ(h.index, home);
  EXPECT_EQ(h.inflight, 2);
  EXPECT_EQ(h.bound, 3);  // ceil(1.25 * 5 / 3)
  in.prefix_key.reset();  // no key: no bound
  EXPECT_EQ(choose_worker(c, in).bound, 0);
  in.prefix_key = fnv1a64("hot system prompt");
  // Below the floor a worker keeps its keys whatever the others hold.
  in.load_bound_floor = 8;
  c[home].inflight = 7;
  c[(home + 1) % 3].inflight = 0;
  c[(home + 2) % 3].inflight = 0;
  EXPECT_EQ(choose_worker(c, in).index, home);
}

TEST(GatewayRouter, SessionBeatsPrefixAndLeastLoadWithoutKeys) {
  auto c = three();
  RouteInput in;
  in.session_key = fnv1a64("session-42");
  in.prefix_key = fnv1a64("p");
  EXPECT_EQ(choose_worker(c, in).reason, "session");
  in.session_key.reset();
  in.prefix_key.reset();
  c[0].outstanding_tokens = 500;
  c[1].outstanding_tokens = 100;
  c[2].outstanding_tokens = 300;
  auto d = choose_worker(c, in);
  EXPECT_EQ(d.reason, "least-load");
  EXPECT_EQ(d.index, 1u);
  // Foreign load reported by the worker counts: worker 1 runs 5 requests of which 0 are ours.
  c[1].reported_requests = 5;
  EXPECT_EQ(choose_worker(c, in).index, 2u);
  // Weight divides the score: worker 0 with weight 10 is the least loaded per unit.
  c[0].weight = 10;
  EXPECT_EQ(choose_worker(c, in).index, 0u);
  // Idle workers: the rotation spreads ties.
  std::set<size_t> seen;
  auto idle = three();
  for (uint64_t r = 0; r < 3; ++r) {
    in.rotation = r;
    seen.insert(choose_worker(idle, in).index);
  }
  EXPECT_EQ(seen.size(), 3u);
}

TEST(GatewayAdmission, KeysAndLimits) {
  GatewayConfig c;
  c.api_keys = {{"a", {}}, {"b", {}}};
  c.api_keys[0].limit.requests_per_s = 2;
  c.global_limit.requests_per_s = 100;
  Admission adm(c);
  std::string key;
  EXPECT_EQ(adm.authenticate("", &key)->status, 401);
  EXPECT_EQ(adm.authenticate("Bearer zzz", &key)->status, 401);
  EXPECT_FALSE(adm.authenticate("Bearer a", &key).has_value());
  EXPECT_EQ(key, "a");
  double t = 1000;
  EXPECT_FALSE(adm.charge("a", 10, t));
  EXPECT_FALSE(adm.charge("a", 10, t));
  auto r = adm.charge("a", 10, t);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->scope, "key");
  EXPECT_GT(r->retry_after_s, 0);
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(adm.charge("b", 10, t)) << i;  // another key is unaffected
  EXPECT_FALSE(adm.charge("a", 10, t + 1));  // refilled
}

TEST(GatewayMetricsTest, Exposition) {
  GatewayMetrics m;
  m.count("requests_total", {{"route", "/v1/completions"}, {"worker", "w\"1"}, {"code", "200"}});
  m.observe("ttft_seconds", {{"route", "/v1/completions"}}, 0.003);
  const std::string text = m.render("");
  EXPECT_NE(text.find("pagoda_gateway_requests_total{route=\"/v1/completions\",worker=\"w\\\"1\",code=\"200\"} 1"), std::string::npos);
  EXPECT_NE(text.find("pagoda_gateway_ttft_seconds_bucket{route=\"/v1/completions\",le=\"0.005\"} 1"), std::string::npos);
  EXPECT_NE(text.find("pagoda_gateway_ttft_seconds_count{route=\"/v1/completions\"} 1"), std::string::npos);
  EXPECT_THROW(m.count("nope", {}), std::logic_error);
}

}  // namespace
}  // namespace pagoda::gateway
