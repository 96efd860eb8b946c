// `pagoda bench throughput`: offline generation throughput through the Engine (no server).
//
// N requests of --input-len random token ids, each generating exactly --output-len tokens
// (ignore_eos), are submitted at once (continuous batching; offline::BatchRun, the batch reader
// of the Python package's LLM.generate), then the first --sequential of them
// again one at a time. Reports output tokens/s of both and their ratio, and the KV memory
// utilisation during the batched run: tokens the running sequences hold in the cache / tokens of
// the KV blocks in use, summed over the run's engine steps (EngineStats).
//
// --json-schema FILE: every request of the batched and sequential runs is constrained to the
// schema (structured outputs). Then --rounds rounds of the same batch, unconstrained and
// constrained, the order alternating per round (load drifts on a shared machine), each run
// generating exactly num_prompts x output_len tokens (ignore_eos; a run that ends short is an
// error: the ratio compares equal work); prefix caching is off so that no run reuses another's
// prompt blocks. Reported per round and as the median ratio, with each run's engine steps.
// Also: the schema's compile time (cold, and cached on reuse) and the mask time per request-step
// (median, p99) replayed over the generated tokens, from the warm mask cache and cold; that replay
// checks every output of the batched run against the schema (an invalid one is an error).
// --schema-dir DIR: also the compile time of every *.json schema in DIR (a corpus), cold and on
// reuse (the engine's constraint cache).
#include <algorithm>
#include <cmath>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iostream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/prompt_file.h"
#include "cli/command.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "common/process_stats.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "model/model_config.h"
#include "grammar/constraint.h"
#include "offline/batch_run.h"

namespace pagoda::cli {
namespace {

struct ThroughputOptions {
  std::string model;
  std::string tokenizer;  // empty: the model's
  int num_prompts = 64;
  int input_len = 128;
  int output_len = 64;
  int sequential = 4;
  int threads = 0;
  int max_num_seqs = 256;
  int64_t kv_cache_memory = 0;
  KvTierOptions kv_tiers;
  std::string cpu_offload;
  int64_t n_gpu_layers = -1;
  int tensor_parallel_size = 1;
  uint64_t seed = 0;
  bool json = false;
  WeightQuantization quantization = WeightQuantization::kNone;
  LoadFormat load_format = LoadFormat::kAuto;
  std::string device = "auto";
  std::string dtype = "auto";
  bool cuda_graphs = true;
  TuningFlags tuning;
  SpeculativeOptions spec;
  std::string prompt_file;  // text prompts separated by lines "---" (default: random ids)
  std::string json_schema;  // file; empty: unconstrained
  int rounds = 3;           // --json-schema: interleaved unconstrained / constrained rounds
  std::string schema_dir;   // a corpus of *.json schemas: compile times
};

// One batched run: every request submitted at once and read through offline::BatchRun.
struct BatchFigures {
  double seconds = 0;
  double cpu_seconds = 0;  // this process's CPU time (all threads): steadier than wall time on a shared machine
  int64_t tokens = 0;
  int64_t steps = 0;
  std::vector<std::vector<int32_t>> outputs;
};

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

GenerateRequest make_request(const std::vector<int32_t>& prompt, int output_len,
                             std::shared_ptr<const TokenConstraintSpec> constraint = nullptr) {
  GenerateRequest g;
  g.prompt_ids = prompt;
  g.sampling.temperature = 0;
  g.sampling.constraint = std::move(constraint);
  g.stop.max_tokens = output_len;
  g.stop.ignore_eos = true;
  return g;
}

Result<BatchFigures> run_batch(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int output_len,
                               const std::shared_ptr<const TokenConstraintSpec>& constraint) {
  BatchFigures f;
  f.outputs.resize(prompts.size());
  std::vector<GenerateRequest> reqs;
  for (const auto& p : prompts) reqs.push_back(make_request(p, output_len, constraint));
  const int64_t steps0 = e.stats().steps;
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  PAGODA_ASSIGN_OR_RETURN(auto run, offline::BatchRun::submit(e, std::move(reqs)));
  while (!run->done()) {
    auto out = run->next_for(std::chrono::milliseconds(200));
    if (!out) continue;
    f.tokens += static_cast<int64_t>(out->output.tokens.size());
    for (const auto& t : out->output.tokens) f.outputs[out->request_index].push_back(t.token);
  }
  f.seconds = since(t0);
  f.cpu_seconds = process_cpu_seconds() - cpu0;
  f.steps = e.stats().steps - steps0;
  return f;
}

int run_throughput(ThroughputOptions& o) {
  if (!check_tensor_parallel_option(o.tensor_parallel_size, "bench throughput")) return 2;
  if (!resolve_device_option(o.device, "bench throughput", o.model)) return 2;
  if (o.num_prompts < 1 || o.input_len < 1 || o.output_len < 1) {
    std::cerr << "pagoda bench throughput: --num-prompts, --input-len, --output-len must be positive\n";
    return 2;
  }
  EngineConfig cfg;
  cfg.model = o.model;
  cfg.tokenizer = o.tokenizer;
  cfg.threads = o.threads;
  cfg.scheduler.max_num_seqs = o.max_num_seqs;
  cfg.max_model_len = o.input_len + o.output_len + 1;
  std::vector<std::string> texts;
  if (!o.prompt_file.empty()) {
    texts = read_prompt_file(o.prompt_file);
    if (texts.empty()) {
      std::cerr << "pagoda bench throughput: --prompt-file " << o.prompt_file << " holds no prompts (or cannot be read)\n";
      return 2;
    }
    cfg.max_model_len = 0;  // the model's (prompt lengths are known after tokenizing)
  }
  if (!resolve_speculative_options(o.spec, cfg.speculative, "bench throughput")) return 2;
  cfg.kv_cache_memory = o.kv_cache_memory;
  cfg.kv_tiers = resolve_kv_tier_options(o.kv_tiers);
  if (!resolve_cpu_offload_option(o.cpu_offload, cfg.cpu_offload_bytes, "bench throughput")) return 2;
  cfg.n_gpu_layers = o.n_gpu_layers;
  cfg.tensor_parallel_size = o.tensor_parallel_size;
  cfg.device = o.device;
  cfg.quantization = o.quantization;
  cfg.load_format = o.load_format;
  cfg.dtype = o.dtype;
  cfg.cuda_graphs = o.cuda_graphs;
  // Constrained vs unconstrained rounds run the same prompts: none may reuse another's blocks.
  if (!o.json_schema.empty()) cfg.enable_prefix_caching = false;
  auto tuning = resolve_tuning(o.tuning);
  if (!tuning.ok()) {
    std::cerr << "pagoda bench throughput: " << tuning.status().to_string() << "\n";
    return 2;
  }
  cfg.tuning = *tuning;
  if (!o.json) std::cout << "tuning: " << cfg.tuning.to_string() << "\n";
  auto engine = [&] {
    Progress progress("bench throughput", "loading weights", "B");
    cfg.load_progress = [&progress](int64_t done, int64_t total) { progress.update(done, total); };
    auto created = Engine::create(cfg);
    cfg.load_progress = nullptr;
    return created;
  }();
  if (!engine.ok()) {
    std::cerr << "pagoda bench throughput: " << engine.status().to_string() << "\n";
    return 1;
  }
  Engine& e = **engine;
  const int64_t vocab = e.model_config().vocab_size;
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<int32_t>> prompts(o.num_prompts, std::vector<int32_t>(o.input_len));
  for (auto& p : prompts)
    for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  for (size_t i = 0; i < prompts.size() && !texts.empty(); ++i) prompts[i] = e.tokenize(texts[i % texts.size()], true);

  // Warm-up: one short request.
  if (auto s = e.submit(make_request(prompts[0], 2)); s.ok())
    while ((*s)->next()) {
    }

  std::shared_ptr<const TokenConstraintSpec> constraint;
  double compile_cold_s = 0, compile_cached_s = 0;
  if (!o.json_schema.empty()) {
    auto text = read_text_file(o.json_schema);
    if (!text.ok()) {
      std::cerr << "pagoda bench throughput: " << text.status().to_string() << "\n";
      return 2;
    }
    e.constraint_cache();  // the vocabulary index is built once per model, not per schema
    grammar::ConstraintSource src{grammar::ConstraintKind::kJsonSchema, *text, {}, nullptr};
    auto t = std::chrono::steady_clock::now();
    auto c = e.constraint(src);
    compile_cold_s = since(t);
    if (!c.ok()) {
      std::cerr << "pagoda bench throughput: --json-schema: " << c.status().to_string() << "\n";
      return 2;
    }
    t = std::chrono::steady_clock::now();
    (void)e.constraint(src);
    compile_cached_s = since(t);
    constraint = *c;
  }

  // Compile times of a schema corpus: each schema cold, then again (the engine's cache).
  nlohmann::json corpus;
  if (!o.schema_dir.empty()) {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(o.schema_dir))
      if (entry.path().extension() == ".json") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    e.constraint_cache();
    std::vector<double> cold, warm;
    int failed = 0;
    for (const auto& f : files) {
      auto text = read_text_file(f.string());
      if (!text.ok()) return 2;
      grammar::ConstraintSource src{grammar::ConstraintKind::kJsonSchema, *text, {}, nullptr};
      auto t = std::chrono::steady_clock::now();
      auto c = e.constraint(src);
      cold.push_back(since(t));
      if (!c.ok()) {
        ++failed;
        std::cerr << "pagoda bench throughput: " << f.string() << ": " << c.status().to_string() << "\n";
        continue;
      }
      t = std::chrono::steady_clock::now();
      (void)e.constraint(src);
      warm.push_back(since(t));
    }
    auto stat = [](std::vector<double> v, double q) {
      if (v.empty()) return 0.0;
      std::sort(v.begin(), v.end());
      return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
    };
    double cold_sum = 0, warm_sum = 0;
    for (double x : cold) cold_sum += x;
    for (double x : warm) warm_sum += x;
    corpus = {{"dir", o.schema_dir},     {"schemas", files.size()},          {"failed", failed},
              {"cold_total_s", cold_sum}, {"cold_median_s", stat(cold, 0.5)}, {"cold_p99_s", stat(cold, 0.99)},
              {"cold_max_s", stat(cold, 1.0)}, {"cached_total_s", warm_sum}, {"cached_max_s", stat(warm, 1.0)}};
    if (!o.json)
      std::cout << fmt::format(
          "schema corpus {}: {} schemas ({} refused) compiled in {:.1f} ms (median {:.2f} ms, p99 {:.2f} ms, max {:.2f} ms); "
          "on reuse {:.3f} ms in all (max {:.4f} ms)\n",
          o.schema_dir, files.size(), failed, 1e3 * cold_sum, 1e3 * stat(cold, 0.5), 1e3 * stat(cold, 0.99),
          1e3 * stat(cold, 1.0), 1e3 * warm_sum, 1e3 * stat(warm, 1.0));
  }

  // Batched run; the engine sums the KV utilisation of every step (EngineStats), read around it.
  const EngineStats before = e.stats();
  std::vector<std::vector<int32_t>> outputs(prompts.size());
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_seconds();
  std::vector<GenerateRequest> batch_requests;
  for (const auto& p : prompts) batch_requests.push_back(make_request(p, o.output_len, constraint));
  // Submitted at once; one consumer reads the outputs as the engine queues them (offline/batch_run.h:
  // woken by the streams, no polling that would take CPU from the engine's threads).
  auto run = offline::BatchRun::submit(e, std::move(batch_requests));
  if (!run.ok()) {
    std::cerr << "pagoda bench throughput: " << run.status().to_string() << "\n";
    return 1;
  }
  int64_t generated = 0;
  // Progress in output tokens: every sequence advances together under continuous batching.
  const int64_t total_out = static_cast<int64_t>(prompts.size()) * o.output_len;
  Progress batched("bench throughput", "batched run", "tokens");
  while (!(*run)->done()) {
    batched.update(generated, total_out);
    auto out = (*run)->next_for(std::chrono::milliseconds(200));
    if (!out) continue;
    generated += static_cast<int64_t>(out->output.tokens.size());
    for (const auto& t : out->output.tokens) outputs[out->request_index].push_back(t.token);
  }
  batched.update(generated, total_out);
  batched.finish();
  const double batched_s = since(t0);
  const double batched_cpu_s = process_cpu_seconds() - cpu0;
  // A client that has seen its final output also sees the engine's stats of that step.
  const EngineStats after = e.stats();
  const double held_sum = after.kv_tokens_held_sum - before.kv_tokens_held_sum;
  const double alloc_sum = after.kv_tokens_allocated_sum - before.kv_tokens_allocated_sum;
  const int64_t kv_steps = after.kv_util_steps - before.kv_util_steps;

  // Sequential run over the first few prompts.
  const int seq_n = std::min(o.sequential, o.num_prompts);
  int64_t seq_generated = 0;
  const EngineStats seq_before = e.stats();
  const auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < seq_n; ++i) {
    auto s = e.submit(make_request(prompts[i], o.output_len, constraint));
    if (!s.ok()) return 1;
    while (auto out = (*s)->next()) seq_generated += static_cast<int64_t>(out->tokens.size());
  }
  const double seq_s = since(t1);
  const EngineStats seq_after = e.stats();
  // Speculative decoding counters of a run (between two snapshots).
  auto spec_of = [](const EngineStats& a, const EngineStats& b, nlohmann::json& out) {
    std::vector<int64_t> per_pos(b.spec_accepted_per_position);
    for (size_t k = 0; k < per_pos.size() && k < a.spec_accepted_per_position.size(); ++k) per_pos[k] -= a.spec_accepted_per_position[k];
    out["num_drafts"] = b.spec_num_drafts - a.spec_num_drafts;
    out["num_draft_tokens"] = b.spec_num_draft_tokens - a.spec_num_draft_tokens;
    out["num_accepted_tokens"] = b.spec_num_accepted_tokens - a.spec_num_accepted_tokens;
    out["accepted_per_position"] = per_pos;
    return speculative_summary(out["num_drafts"].get<int64_t>(), out["num_draft_tokens"].get<int64_t>(),
                               out["num_accepted_tokens"].get<int64_t>(), per_pos);
  };
  nlohmann::json spec_batched, spec_seq;
  const std::string spec_batched_s = spec_of(before, after, spec_batched), spec_seq_s = spec_of(seq_before, seq_after, spec_seq);

  nlohmann::json j;
  if (constraint) {
    // Interleaved rounds over the same prompts: unconstrained and constrained, the order
    // alternating. Every run must generate exactly the same number of tokens.
    const int64_t want_tokens = static_cast<int64_t>(prompts.size()) * o.output_len;
    if (generated != want_tokens) {
      std::cerr << fmt::format("pagoda bench throughput: the constrained run generated {} of {} tokens (a request ended "
                               "early: the schema must admit outputs of --output-len tokens)\n",
                               generated, want_tokens);
      return 1;
    }
    nlohmann::json rounds = nlohmann::json::array();
    std::vector<double> ratios, cpu_ratios;
    double plain_tps_sum = 0;
    for (int r = 0; r < o.rounds; ++r) {
      BatchFigures runs[2];  // [0] unconstrained, [1] constrained
      for (int k = 0; k < 2; ++k) {
        const int which = (r % 2 == 0) ? k : 1 - k;  // even rounds: unconstrained first
        auto f = run_batch(e, prompts, o.output_len, which == 1 ? constraint : nullptr);
        if (!f.ok()) {
          std::cerr << "pagoda bench throughput: " << f.status().to_string() << "\n";
          return 1;
        }
        if (f->tokens != want_tokens) {
          std::cerr << fmt::format("pagoda bench throughput: round {} {} run generated {} of {} tokens\n", r + 1,
                                   which ? "constrained" : "unconstrained", f->tokens, want_tokens);
          return 1;
        }
        runs[which] = std::move(*f);
      }
      const double plain_tps = runs[0].tokens / runs[0].seconds, cons_tps = runs[1].tokens / runs[1].seconds;
      const double cpu_ratio = (runs[1].tokens / runs[1].cpu_seconds) / (runs[0].tokens / runs[0].cpu_seconds);
      ratios.push_back(cons_tps / plain_tps);
      cpu_ratios.push_back(cpu_ratio);
      plain_tps_sum += plain_tps;
      rounds.push_back({{"round", r + 1},
                        {"first", r % 2 == 0 ? "unconstrained" : "constrained"},
                        {"unconstrained_tokens", runs[0].tokens},
                        {"unconstrained_steps", runs[0].steps},
                        {"unconstrained_seconds", runs[0].seconds},
                        {"unconstrained_output_tokens_per_s", plain_tps},
                        {"unconstrained_cpu_seconds", runs[0].cpu_seconds},
                        {"constrained_tokens", runs[1].tokens},
                        {"constrained_steps", runs[1].steps},
                        {"constrained_seconds", runs[1].seconds},
                        {"constrained_output_tokens_per_s", cons_tps},
                        {"constrained_cpu_seconds", runs[1].cpu_seconds},
                        {"constrained_over_unconstrained", cons_tps / plain_tps},
                        {"constrained_over_unconstrained_per_cpu_second", cpu_ratio}});
      if (!o.json)
        std::cout << fmt::format(
            "round {} ({} first): unconstrained {} tokens in {} steps, {:.2f} s = {:.1f} tok/s ({:.2f} CPU s); constrained "
            "{} tokens in {} steps, {:.2f} s = {:.1f} tok/s ({:.2f} CPU s); ratio x{:.3f} (per CPU second x{:.3f})\n",
            r + 1, r % 2 == 0 ? "unconstrained" : "constrained", runs[0].tokens, runs[0].steps, runs[0].seconds, plain_tps,
            runs[0].cpu_seconds, runs[1].tokens, runs[1].steps, runs[1].seconds, cons_tps, runs[1].cpu_seconds,
            cons_tps / plain_tps, cpu_ratio) << std::flush;
    }
    std::vector<double> sorted = ratios;
    std::sort(sorted.begin(), sorted.end());
    const double median_ratio = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
    // Geometric means: with the order alternating, a load that drifts during the run moves
    // the two kinds of round in opposite directions and cancels to first order (an even --rounds).
    auto geomean = [](const std::vector<double>& v) {
      double l = 0;
      for (double x : v) l += std::log(x);
      return v.empty() ? 0.0 : std::exp(l / static_cast<double>(v.size()));
    };
    const double geo_ratio = geomean(ratios), geo_cpu_ratio = geomean(cpu_ratios);
    std::sort(cpu_ratios.begin(), cpu_ratios.end());
    const double median_cpu_ratio = cpu_ratios.empty() ? 0.0 : cpu_ratios[cpu_ratios.size() / 2];
    const double plain_generated = o.rounds > 0 ? plain_tps_sum / o.rounds : 0, plain_s = 1.0;
    j["rounds"] = rounds;
    // Mask time per request-step, replayed over the generated tokens: warm (the run filled the
    // grammar's mask cache) and cold (the trie walk of every state).
    auto spec = std::dynamic_pointer_cast<const grammar::GrammarConstraintSpec>(constraint);
    std::vector<double> warm, cold, adv;  // adv: advancing the matcher by the sampled token
    std::vector<uint32_t> mask(static_cast<size_t>(spec->compiled()->vocab().mask_words()));
    // Outputs of the batched run the constraint does not take (a masking defect). With ignore_eos
    // an output that completed its schema goes on with stop ids only (the mask past the end).
    int64_t refused = 0;
    const grammar::TokenVocabulary& vocab = spec->compiled()->vocab();
    for (const auto& toks : outputs) {
      auto state = constraint->start();
      grammar::GrammarMatcher m(spec->compiled());
      for (size_t i = 0; i < toks.size(); ++i) {
        const int32_t t = toks[i];
        if (state->finished()) {
          if (!std::all_of(toks.begin() + static_cast<std::ptrdiff_t>(i), toks.end(), [&](int32_t x) { return vocab.is_stop(x); }))
            ++refused;
          break;
        }
        auto a = std::chrono::steady_clock::now();
        state->fill_mask(mask);
        warm.push_back(since(a));
        if (cold.size() < 2000) {
          a = std::chrono::steady_clock::now();
          spec->compiled()->compute_mask(m.state(), mask);
          cold.push_back(since(a));
        }
        a = std::chrono::steady_clock::now();
        const bool ok = state->advance(t);
        adv.push_back(since(a));
        if (!ok) {
          ++refused;
          break;
        }
        m.accept_token(t);
      }
    }
    if (refused > 0) {
      std::cerr << fmt::format("pagoda bench throughput: {} of {} constrained outputs are not valid under the schema\n",
                               refused, outputs.size());
      return 1;
    }
    auto pct = [](std::vector<double> v, double q) {
      if (v.empty()) return 0.0;
      std::sort(v.begin(), v.end());
      return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
    };
    const auto stats = spec->compiled()->cache_stats();
    j["json_schema"] = o.json_schema;
    j["schema_compile_seconds"] = compile_cold_s;
    j["schema_compile_cached_seconds"] = compile_cached_s;
    j["unconstrained_output_tokens_per_s"] = plain_generated / plain_s;  // mean over the rounds
    j["constrained_over_unconstrained"] = median_ratio;                   // median over the rounds
    j["constrained_over_unconstrained_per_cpu_second"] = median_cpu_ratio;
    j["constrained_over_unconstrained_geomean"] = geo_ratio;
    j["constrained_over_unconstrained_per_cpu_second_geomean"] = geo_cpu_ratio;
    j["mask_us_median"] = 1e6 * pct(warm, 0.5);
    j["mask_us_p99"] = 1e6 * pct(warm, 0.99);
    j["mask_cold_us_median"] = 1e6 * pct(cold, 0.5);
    j["mask_cold_us_p99"] = 1e6 * pct(cold, 0.99);
    j["advance_us_median"] = 1e6 * pct(adv, 0.5);
    j["advance_us_p99"] = 1e6 * pct(adv, 0.99);
    j["mask_steps"] = warm.size();
    j["mask_cache_entries"] = stats.entries;
    if (!o.json)
      std::cout << fmt::format(
          "json schema {}: compiled in {:.2f} ms ({:.3f} ms cached); first constrained run {:.1f} output tok/s, "
          "unconstrained (mean of the rounds) {:.1f}; ratio of the rounds: median x{:.3f}, geometric mean x{:.3f} (per CPU "
          "second: median x{:.3f}, geometric mean x{:.3f})\nmask per request-step over {} steps: median {:.1f} us, p99 {:.1f} us (cold trie walk: median {:.1f} us, "
          "p99 {:.1f} us; {} cached states); advancing by the token: median {:.1f} us, p99 {:.1f} us\n",
          o.json_schema, 1e3 * compile_cold_s, 1e3 * compile_cached_s, generated / batched_s, plain_generated / plain_s,
          j["constrained_over_unconstrained"].get<double>(), geo_ratio, median_cpu_ratio, geo_cpu_ratio, warm.size(), j["mask_us_median"].get<double>(),
          j["mask_us_p99"].get<double>(), j["mask_cold_us_median"].get<double>(), j["mask_cold_us_p99"].get<double>(),
          stats.entries, j["advance_us_median"].get<double>(), j["advance_us_p99"].get<double>());
  }
  if (!corpus.is_null()) j["schema_corpus"] = corpus;
  j["model"] = o.model;
  j["num_prompts"] = o.num_prompts;
  j["input_len"] = o.input_len;
  j["output_len"] = o.output_len;
  j["batched_seconds"] = batched_s;
  j["batched_output_tokens"] = generated;
  j["batched_output_tokens_per_s"] = generated / batched_s;
  // CPU seconds of every thread of this process during the batched run: wall seconds well above
  // it / threads means the run waited for cores that other jobs held.
  j["batched_cpu_seconds"] = batched_cpu_s;
  j["batched_total_tokens_per_s"] = (generated + static_cast<double>(o.num_prompts) * o.input_len) / batched_s;
  j["sequential_requests"] = seq_n;
  j["sequential_output_tokens_per_s"] = seq_n > 0 ? seq_generated / seq_s : 0;
  j["batching_speedup"] = seq_n > 0 ? (generated / batched_s) / (seq_generated / seq_s) : 0;
  j["kv_utilisation"] = alloc_sum > 0 ? held_sum / alloc_sum : 0;
  j["kv_steps"] = kv_steps;
  if (cfg.speculative.enabled()) {
    j["speculative"] = cfg.speculative.to_string();
    j["spec_batched"] = spec_batched;
    j["spec_sequential"] = spec_seq;
  }
  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format(
        "model {} | {} prompts x ({} in, {} out)\n"
        "continuous batching: {} output tokens in {:.2f} s = {:.1f} output tok/s ({:.1f} total tok/s)\n"
        "one at a time ({} requests): {:.1f} output tok/s -> batching speed-up x{:.2f}\n"
        "KV memory utilisation (tokens held / tokens in allocated blocks, {} steps): {:.1f}%\n",
        o.model, o.num_prompts, o.input_len, o.output_len, generated, batched_s, generated / batched_s,
        j["batched_total_tokens_per_s"].get<double>(), seq_n, j["sequential_output_tokens_per_s"].get<double>(),
        j["batching_speedup"].get<double>(), kv_steps, 100 * j["kv_utilisation"].get<double>());
    if (cfg.speculative.enabled())
      std::cout << "speculative " << cfg.speculative.to_string() << "\n  batched: " << spec_batched_s
                << "\n  one at a time: " << spec_seq_s << "\n";
  }
  e.shutdown();
  return 0;
}

const BenchSubcommandRegistration kBenchThroughput("throughput", "Offline generation throughput through the Engine (batched vs one at a time)", [](CLI::App* app) {
  auto o = std::make_shared<ThroughputOptions>();
  app->add_option("model,--model,-m", o->model, "GGUF file or Hugging Face model directory")->required();
  app->add_option("--tokenizer", o->tokenizer, "Tokenizer (default: the model's; --json-schema needs one)");
  app->add_option("--num-prompts", o->num_prompts, "Requests in the batched run")->check(CLI::Range(1, 16777216));
  app->add_option("--input-len", o->input_len, "Prompt tokens (random ids)")->check(CLI::Range(1, 1048576));
  app->add_option("--output-len", o->output_len, "Generated tokens per request (exact)")->check(CLI::Range(1, 1048576));
  app->add_option("--sequential", o->sequential, "Requests in the one-at-a-time run")->check(CLI::Range(0, 16777216));
  app->add_option("-t,--threads", o->threads, "Compute threads (default: one per core)")->check(CLI::Range(0, 4096));
  app->add_option("--max-num-seqs", o->max_num_seqs, "Sequences batched together")->check(CLI::Range(1, 1048576));
  app->add_option("--kv-cache-memory", o->kv_cache_memory, "KV cache bytes (default: engine's)")->check(CLI::NonNegativeNumber);
  app->add_option("--seed", o->seed, "Seed of the random prompts")->check(CLI::NonNegativeNumber);
  add_device_options(app, o->device, o->dtype, o->cuda_graphs);
  add_quantization_option(app, o->quantization);
  add_load_format_option(app, o->load_format);
  add_tuning_options(app, o->tuning);
  app->add_option("--prompt-file", o->prompt_file, "Text prompts separated by lines '---' (cycled; default: random ids)");
  add_speculative_options(app, &o->spec);
  add_kv_tier_options(app, &o->kv_tiers);
  add_cpu_offload_option(app, &o->cpu_offload);
  add_n_gpu_layers_option(app, &o->n_gpu_layers);
  add_tensor_parallel_option(app, &o->tensor_parallel_size);
  app->add_flag("--json", o->json, "Print JSON");
  app->add_option("--json-schema", o->json_schema,
                  "Constrain every request to this JSON Schema (file); also runs unconstrained for the ratio")
      ->check(CLI::ExistingFile);
  app->add_option("--rounds", o->rounds, "With --json-schema: interleaved unconstrained / constrained rounds")
      ->check(CLI::Range(1, 1000));
  app->add_option("--schema-dir", o->schema_dir, "Also report the compile time of every *.json schema in this folder")
      ->check(CLI::ExistingDirectory);
  return [o] { return run_throughput(*o); };
});

}  // namespace
}  // namespace pagoda::cli
