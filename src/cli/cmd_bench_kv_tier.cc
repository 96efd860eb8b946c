// `pagoda bench kv-tier`: time to first token when a long shared prefix comes back from a KV tier
// against recomputing it, on the engine core of `generate` / `serve`.
//
// For each prefix length P, two engine cores with the same small primary KV pool (one sequence of
// P + 64 tokens): one without tiers, one with the tier under test (--kv-host-gb and / or
// --kv-disk-dir). Each runs three greedy requests one after another:
//   warm   the prefix + 16 tokens of its own (computes and caches the prefix)
//   evict  two other prompts of the same length, one after the other: the first pushes the prefix
//          out of the primary pool (with a tier, into the host tier), the second pushes the first
//          into the host tier, and with a host tier of one sequence (--kv-disk-dir alone) the
//          prefix on to the disk tier
//   probe  the prefix + 16 other tokens: TTFT measured, from add_request to the first token.
// Without tiers the probe recomputes the prefix; with one it copies the prefix back. The probes'
// tokens (-n of them) must be the same in both cores, else the run fails. Reported: both TTFTs,
// their ratio, the prefix tokens the probe found per tier.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <random>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/options.h"
#include "engine/engine_core.h"
#include "model/model_loader.h"

namespace pagoda::cli {
namespace {

struct KvTierBenchOptions {
  std::string model;
  LoadFormat load_format = LoadFormat::kAuto;
  std::vector<int> prefix_lens = {2048, 4096};
  int gen = 4;
  int threads = 0;
  int repeats = 1;
  int max_num_batched_tokens = 2048;
  std::string kv_dtype = "f16";
  KvTierOptions tiers;
  bool json = false;
};

struct ProbeResult {
  double ttft_s = 0;
  std::vector<int32_t> tokens;
  int32_t cached = 0;
  KvTierStats tier;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Runs the request to its end; returns the seconds to its first token and its tokens.
Result<std::pair<double, std::vector<int32_t>>> run_request(EngineCore& core, std::vector<int32_t> prompt, int gen,
                                                            const std::string& id) {
  auto r = std::make_unique<Request>();
  r->id = id;
  r->prompt = std::move(prompt);
  r->sampling.temperature = 0;
  r->stop.max_tokens = gen;
  r->stop.ignore_eos = true;
  const auto t0 = std::chrono::steady_clock::now();
  PAGODA_RETURN_IF_ERROR(core.add_request(std::move(r)));
  double ttft = -1;
  std::vector<int32_t> tokens;
  while (core.has_unfinished()) {
    for (const CoreOutput& o : core.step()) {
      if (o.id != id) continue;
      if (!o.error.empty()) return make_status(StatusCode::kInternal, "request {} failed: {}", id, o.error);
      if (o.has_token) {
        if (ttft < 0) ttft = seconds_since(t0);
        tokens.push_back(o.sample.token);
      }
    }
  }
  return std::make_pair(ttft, tokens);
}

Result<ProbeResult> probe(const KvTierBenchOptions& o, DType kv_dtype, const KvTierConfig& tiers, bool use_default_tier,
                          int prefix_len, int rep) {
  ModelLoadOptions lo;
  lo.max_model_len = prefix_len + 64;
  lo.load_format = o.load_format;
  PAGODA_ASSIGN_OR_RETURN(LoadedModel loaded, load_model(o.model, lo));
  const int64_t vocab = loaded.config.vocab_size;
  EngineConfig cfg;
  cfg.model = o.model;
  cfg.load_format = o.load_format;
  cfg.threads = o.threads;
  cfg.device = "cpu";
  cfg.kv_dtype = kv_dtype;
  cfg.max_model_len = prefix_len + 64;
  cfg.scheduler.max_num_seqs = 1;
  cfg.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  // One sequence of max_model_len, plus the null block: the evicting request takes every block.
  cfg.kv_cache_memory = loaded.config.kv_bytes_per_token(kv_dtype) * (cfg.max_model_len + 2 * cfg.block_size);
  cfg.kv_tiers = tiers;
  // Default tier: a host tier of three sequences (the prefix and both evicting prompts).
  if (use_default_tier) cfg.kv_tiers.host_bytes = loaded.config.kv_bytes_per_token(kv_dtype) * 3 * (cfg.max_model_len + 16);
  ThreadPool pool(o.threads);
  PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::create(cfg, std::move(loaded), pool));
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(prefix_len) + static_cast<uint64_t>(rep) * 7);
  auto random_ids = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& t : v) t = static_cast<int32_t>(5 + rng() % static_cast<uint64_t>(vocab - 5));
    return v;
  };
  const std::vector<int32_t> prefix = random_ids(prefix_len);
  std::vector<int32_t> warm = prefix, probe_prompt = prefix;
  const std::vector<int32_t> own_a = random_ids(16), own_b = random_ids(16);
  warm.insert(warm.end(), own_a.begin(), own_a.end());
  probe_prompt.insert(probe_prompt.end(), own_b.begin(), own_b.end());
  PAGODA_RETURN_IF_ERROR(run_request(*core, warm, 1, "warm").status());
  PAGODA_RETURN_IF_ERROR(run_request(*core, random_ids(prefix_len + 16), 1, "evict-1").status());
  PAGODA_RETURN_IF_ERROR(run_request(*core, random_ids(prefix_len + 16), 1, "evict-2").status());
  const KvTierStats before = core->kv_manager().tier_stats();
  PAGODA_ASSIGN_OR_RETURN(auto res, run_request(*core, probe_prompt, o.gen, "probe"));
  ProbeResult p;
  p.ttft_s = res.first;
  p.tokens = std::move(res.second);
  const KvTierStats& after = core->kv_manager().tier_stats();
  p.tier.host_hits = after.host_hits - before.host_hits;
  p.tier.disk_hits = after.disk_hits - before.disk_hits;
  p.cached = static_cast<int32_t>(p.tier.host_hits + p.tier.disk_hits);
  return p;
}

int run_kv_tier_bench(const KvTierBenchOptions& o) {
  auto kv = dtype_from_name(o.kv_dtype);
  if (!kv) {
    std::cerr << "pagoda bench kv-tier: unknown --kv-dtype '" << o.kv_dtype << "'\n";
    return 2;
  }
  const KvTierConfig tiers = resolve_kv_tier_options(o.tiers);
  const bool default_tier = !tiers.enabled();
  nlohmann::json runs = nlohmann::json::array();
  if (!o.json)
    std::cout << fmt::format("model {} | CPU | tiers: {} | probe: prefix + 16 tokens, {} generated\n", o.model,
                             default_tier ? "host, three sequences" : tiers.to_string(), o.gen);
  for (int P : o.prefix_lens) {
    for (int rep = 0; rep < o.repeats; ++rep) {
      auto base = probe(o, *kv, KvTierConfig{}, false, P, rep);
      if (!base.ok()) {
        std::cerr << "pagoda bench kv-tier: " << base.status().to_string() << "\n";
        return 1;
      }
      // A cold disk tier for each probe: a fresh subdirectory of --kv-disk-dir, removed after.
      KvTierConfig probe_tiers = tiers;
      if (!tiers.disk_dir.empty())
        probe_tiers.disk_dir = (std::filesystem::path(tiers.disk_dir) / fmt::format("bench-kv-tier-{}-{}-{}", ::getpid(), P, rep)).string();
      auto tier = probe(o, *kv, probe_tiers, default_tier, P, rep);
      if (!tiers.disk_dir.empty()) {
        std::error_code ec;
        std::filesystem::remove_all(probe_tiers.disk_dir, ec);
      }
      if (!tier.ok()) {
        std::cerr << "pagoda bench kv-tier: " << tier.status().to_string() << "\n";
        return 1;
      }
      const bool same = base->tokens == tier->tokens;
      const double ratio = base->ttft_s / tier->ttft_s;
      runs.push_back({{"prefix_len", P},
                      {"repeat", rep},
                      {"ttft_recompute_s", base->ttft_s},
                      {"ttft_tier_s", tier->ttft_s},
                      {"speedup", ratio},
                      {"tier_host_hit_tokens", tier->tier.host_hits},
                      {"tier_disk_hit_tokens", tier->tier.disk_hits},
                      {"recompute_hit_tokens", base->cached},
                      {"tokens_identical", same}});
      if (!o.json)
        std::cout << fmt::format(
            "prefix {:>6}: TTFT recompute {:8.3f} s | tier {:8.3f} s | x{:.1f} | prefix tokens from host {} disk {} | "
            "greedy tokens {}\n",
            P, base->ttft_s, tier->ttft_s, ratio, tier->tier.host_hits, tier->tier.disk_hits,
            same ? "identical" : "DIFFERENT");
      if (!same) {
        std::cerr << "pagoda bench kv-tier: the probe's tokens differ with the tier\n";
        return 1;
      }
    }
  }
  if (o.json) std::cout << nlohmann::json{{"model", o.model}, {"tiers", tiers.to_string()}, {"runs", runs}}.dump(2) << "\n";
  return 0;
}

const BenchSubcommandRegistration kBenchKvTier(
    "kv-tier", "Time to first token on a KV-tier hit vs recomputing a long shared prefix (CPU)", [](CLI::App* app) {
      auto o = std::make_shared<KvTierBenchOptions>();
      app->add_option("model,--model,-m", o->model, "GGUF file or Hugging Face model directory")->required();
      add_load_format_option(app, o->load_format);
      app->add_option("--prefix-len", o->prefix_lens, "Shared prefix lengths in tokens")
          ->check(CLI::Range(16, 1048576))
          ->delimiter(',');
      app->add_option("-n,--gen", o->gen, "Tokens the probe generates (compared with and without the tier)")
          ->check(CLI::Range(1, 4096));
      app->add_option("-t,--threads", o->threads, "Compute threads (default: one per core)")->check(CLI::Range(0, 4096));
      app->add_option("-r,--repeats", o->repeats, "Probes per prefix length")->check(CLI::Range(1, 1000));
      app->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Prefill chunk (token budget per step)")
          ->check(CLI::Range(16, 1048576));
      app->add_option("--kv-dtype", o->kv_dtype, "KV cache element type: f16, bf16, f32");
      add_kv_tier_options(app, &o->tiers);
      app->add_flag("--json", o->json, "Print JSON");
      return [o] { return run_kv_tier_bench(*o); };
    });

}  // namespace
}  // namespace pagoda::cli
