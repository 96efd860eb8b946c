// `pagoda bench masks`: the structured-output work of one engine step at a batch, without a model.
//
// --batch concurrent requests, each constrained to one of the schemas given (--json-schema files
// and every *.json of --schema-dir, cycled over the rows), against a real tokenizer's vocabulary
// (--tokenizer: a .gguf, a Hugging Face tokenizer.json or directory). Each step does what the
// engine's before_sampling hook does for every constrained row while the device computes the
// forward pass: advance the row's constraint by its last token, then fill the row's mask (through
// core/token_constraint.h, the runner's interface), the rows split over a thread pool of
// --threads workers as the runner splits them. That work is timed: the step's wall time, and per
// row its own time. The next token of each row (not timed) is a random allowed token (seeded);
// a row whose output may end stops with probability 1/2 and a finished row restarts as a new
// request with the same schema, so steady state mixes new requests on warm grammars with long
// ones. Uniform choice over the allowed tokens reaches far more distinct grammar states than a
// model's output does: a harsher load on the mask caches than real traffic.
//
// Each round starts from a fresh constraint cache (every grammar compiled anew, every mask cache
// empty: cold), runs --steps steps, and reports the step time and the per-row time (p50, p99,
// max), the sum of the rows' times per step (the CPU work a step needs, whatever the thread
// count) and the largest row of each step (the floor of a step's time on any number of threads
// when one row is one thread's work), over the first --cold-steps steps (cold) and the rest (warm).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/process_stats.h"
#include "common/thread_pool.h"
#include "engine/engine.h"
#include "grammar/constraint.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

struct MasksBenchOptions {
  std::string tokenizer;
  std::vector<std::string> schemas;
  std::string schema_dir;
  int batch = 64;
  int steps = 256;
  int cold_steps = 16;
  int rounds = 3;
  int threads = 0;
  uint64_t seed = 0;
  bool json = false;
};

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

struct Dist {
  std::vector<double> v;
  nlohmann::json to_json() const { return {{"p50_us", 1e6 * pct(v, 0.5)}, {"p99_us", 1e6 * pct(v, 0.99)}, {"max_us", 1e6 * pct(v, 1.0)}}; }
  std::string str() const { return fmt::format("p50 {:.1f} us, p99 {:.1f} us, max {:.1f} us", 1e6 * pct(v, 0.5), 1e6 * pct(v, 0.99), 1e6 * pct(v, 1.0)); }
};

struct Phase {
  Dist step, row, row_sum, row_max;
};

struct Row {
  std::shared_ptr<const grammar::GrammarConstraintSpec> spec;
  std::unique_ptr<TokenConstraint> c;
  int32_t last = -1;  // the token to advance by at the next step; -1: none (a new request)
  std::vector<uint32_t> mask;
  double seconds = 0;
  std::mt19937_64 rng;
};

int run_masks(const MasksBenchOptions& o) {
  auto tok = Tokenizer::load(o.tokenizer);
  if (!tok.ok()) {
    std::cerr << "pagoda bench masks: " << tok.status().to_string() << "\n";
    return 1;
  }
  std::vector<std::string> files = o.schemas;
  if (!o.schema_dir.empty()) {
    std::vector<std::string> dir;
    for (const auto& e : std::filesystem::directory_iterator(o.schema_dir))
      if (e.path().extension() == ".json") dir.push_back(e.path().string());
    std::sort(dir.begin(), dir.end());
    files.insert(files.end(), dir.begin(), dir.end());
  }
  if (files.empty()) {
    std::cerr << "pagoda bench masks: no schema (--json-schema or --schema-dir)\n";
    return 1;
  }
  std::vector<std::string> texts;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    texts.push_back(ss.str());
  }
  const auto vocab = make_token_vocabulary(**tok);
  ThreadPool pool(o.threads);
  const double cpu0 = process_cpu_seconds();
  Phase cold, warm;
  nlohmann::json rounds = nlohmann::json::array();
  int64_t restarts = 0, misses = 0, hits = 0;
  for (int r = 0; r < o.rounds; ++r) {
    grammar::ConstraintCache cache(vocab, texts.size() + 1);
    std::vector<Row> rows(static_cast<size_t>(o.batch));
    size_t next_schema = static_cast<size_t>(r) * static_cast<size_t>(o.batch);
    for (size_t i = 0; i < rows.size(); ++i) {
      // Rows cycle through the schemas; a schema that does not compile is skipped.
      for (size_t tries = 0; tries < texts.size() && !rows[i].spec; ++tries, ++next_schema) {
        auto spec = cache.get({grammar::ConstraintKind::kJsonSchema, texts[next_schema % texts.size()], {}, nullptr});
        if (spec.ok()) rows[i].spec = *spec;
      }
      if (!rows[i].spec) {
        std::cerr << "pagoda bench masks: no schema compiles\n";
        return 1;
      }
      rows[i].c = rows[i].spec->start();
      rows[i].mask.assign(static_cast<size_t>(vocab->mask_words()), 0u);
      rows[i].rng.seed(o.seed * 1000003u + static_cast<uint64_t>(r) * 65537u + i);
    }
    Phase round_cold, round_warm;
    for (int s = 0; s < o.steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      auto work = [&](int64_t k) {
        Row& row = rows[k];
        const auto a = std::chrono::steady_clock::now();
        if (row.last >= 0) row.c->advance(row.last);
        row.c->fill_mask(row.mask);
        row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      };
      const int64_t n = o.batch;
      pool.run([&](int ith, int nth) {
        for (int64_t k = n * ith / nth; k < n * (ith + 1) / nth; ++k) work(k);
      });
      const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Phase& ph = s < o.cold_steps ? round_cold : round_warm;
      Phase& all = s < o.cold_steps ? cold : warm;
      double sum = 0, mx = 0;
      for (const Row& row : rows) {
        ph.row.v.push_back(row.seconds);
        all.row.v.push_back(row.seconds);
        sum += row.seconds;
        mx = std::max(mx, row.seconds);
      }
      for (Phase* p : {&ph, &all}) {
        p->step.v.push_back(step_s);
        p->row_sum.v.push_back(sum);
        p->row_max.v.push_back(mx);
      }
      // The sampled tokens (not timed): a random allowed one; a stop id ends the request.
      std::vector<int32_t> allowed;
      for (Row& row : rows) {
        allowed.clear();
        bool stop_allowed = false;
        for (size_t w = 0; w < row.mask.size(); ++w)
          for (uint32_t bits = row.mask[w]; bits != 0; bits &= bits - 1) {
            const int32_t t = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
            if (vocab->is_stop(t)) stop_allowed = true;
            else allowed.push_back(t);
          }
        if (allowed.empty() || (stop_allowed && row.rng() % 2 == 0)) {
          row.c = row.spec->start();
          row.last = -1;
          ++restarts;
          continue;
        }
        row.last = allowed[row.rng() % allowed.size()];
      }
    }
    std::vector<const grammar::CompiledGrammar*> seen;
    for (const Row& row : rows) {
      const auto* g = row.spec->compiled().get();
      if (std::find(seen.begin(), seen.end(), g) != seen.end()) continue;
      seen.push_back(g);
      const auto st = g->cache_stats();
      misses += st.misses;
      hits += st.hits;
    }
    rounds.push_back({{"cold_step", round_cold.step.to_json()}, {"warm_step", round_warm.step.to_json()}});
    if (!o.json)
      std::cout << fmt::format("round {}: step wall time, first {} steps (cold): {}; later: {}\n", r + 1, o.cold_steps,
                               round_cold.step.str(), round_warm.step.str())
                << std::flush;
  }
  const double cpu_s = process_cpu_seconds() - cpu0;
  nlohmann::json j = {{"tokenizer", o.tokenizer},
                      {"vocab", vocab->size()},
                      {"schemas", files.size()},
                      {"batch", o.batch},
                      {"steps", o.steps},
                      {"threads", pool.size()},
                      {"rounds", rounds},
                      {"restarts", restarts},
                      {"mask_cache_hits", hits},
                      {"mask_cache_misses", misses},
                      {"cpu_seconds", cpu_s}};
  for (auto [name, ph] : {std::pair<const char*, Phase*>{"cold", &cold}, {"warm", &warm}})
    j[name] = {{"step", ph->step.to_json()}, {"row", ph->row.to_json()}, {"row_sum", ph->row_sum.to_json()}, {"row_max", ph->row_max.to_json()}};
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{} rows, {} schemas, vocabulary {} ({}), {} threads, {} rounds x {} steps; {} requests restarted; "
                           "mask cache {} hits, {} misses; {:.2f} CPU s\n",
                           o.batch, files.size(), vocab->size(), o.tokenizer, pool.size(), o.rounds, o.steps, restarts, hits,
                           misses, cpu_s);
  for (auto [name, ph] : {std::pair<const char*, Phase*>{"cold", &cold}, {"warm", &warm}}) {
    std::cout << fmt::format("{:>4} step wall time:      {}\n", name, ph->step.str());
    std::cout << fmt::format("{:>4} row (request-step):  {}\n", name, ph->row.str());
    std::cout << fmt::format("{:>4} sum of rows per step: {}\n", name, ph->row_sum.str());
    std::cout << fmt::format("{:>4} largest row per step: {}\n", name, ph->row_max.str());
  }
  return 0;
}

const BenchSubcommandRegistration kBenchMasks(
    "masks", "Structured outputs: the per-step token-mask work of a batch of JSON-schema requests (no model)", [](CLI::App* app) {
      auto o = std::make_shared<MasksBenchOptions>();
      app->add_option("--tokenizer", o->tokenizer, "Tokenizer: a .gguf, a tokenizer.json or a Hugging Face directory")->required();
      app->add_option("--json-schema", o->schemas, "A JSON Schema file (repeatable)")->check(CLI::ExistingFile);
      app->add_option("--schema-dir", o->schema_dir, "Every *.json schema in this folder")->check(CLI::ExistingDirectory);
      app->add_option("--batch", o->batch, "Concurrent requests (rows of a step)")->check(CLI::Range(1, 65536));
      app->add_option("--steps", o->steps, "Steps per round")->check(CLI::Range(1, 1000000));
      app->add_option("--cold-steps", o->cold_steps, "Leading steps of a round reported as cold")->check(CLI::Range(0, 1000000));
      app->add_option("--rounds", o->rounds, "Rounds, each from empty caches")->check(CLI::Range(1, 1000));
      app->add_option("-t,--threads", o->threads, "Pool threads (default: one per core)")->check(CLI::Range(0, 4096));
      app->add_option("--seed", o->seed, "Seed of the token choices")->check(CLI::NonNegativeNumber);
      app->add_flag("--json", o->json, "Print JSON");
      return [o] { return run_masks(*o); };
    });

}  // namespace
}  // namespace pagoda::cli
