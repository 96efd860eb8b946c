// `pagoda bench masks`: the structured-output work of one engine step at a batch, without a model.
//
// --batch concurrent requests, each constrained to one of the schemas given (--json-schema files
// and every *.json of --schema-dir, cycled over the rows), against a real tokenizer's vocabulary
// (--tokenizer: a .gguf, a Hugging Face tokenizer.json or directory). Each step does what the
// engine's before_sampling hook does while the device computes the forward pass: the runner's
// own fill_constraint_masks (runtime/constraint_masks.h) on a pool of --threads workers, every
// row advancing its constraint by its last token, then its mask. The next token of each row
// (not timed) is a random allowed token (seeded); a row whose output may end stops with
// probability 1/2, and a finished row restarts as a new request with the same schema, so steady
// state mixes new requests on warm grammars with long ones. Uniform choice over the allowed
// tokens reaches far more distinct grammar states than a model's output does (a random-weight
// model's, as in the GPU benchmark, is close to it): a harsh load on the mask caches.
//
// Each round starts from a fresh constraint cache (every grammar compiled anew, every mask cache
// empty: cold) and runs --steps steps. Reported over the first --cold-steps steps of the rounds
// (cold) and the rest (warm): the step's wall time; its CPU work (thread CPU time, so a machine
// shared with other work does not inflate it): the rows' own work (advance, cached masks) plus
// the mask computations (the MaskJob parts), summed per step; the largest single item of a step
// (a row's own work or one part: no number of threads makes the step shorter); and the CPU time
// of each distinct mask computed (all its parts).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/process_stats.h"
#include "common/thread_pool.h"
#include "runtime/constraint_masks.h"
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

// This thread's CPU time: a row's work without the time the thread waited for a core (the
// machine may be shared; a step's wall time includes that wait).
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Dist {
  std::vector<double> v;
  nlohmann::json to_json() const { return {{"p50_us", 1e6 * pct(v, 0.5)}, {"p99_us", 1e6 * pct(v, 0.99)}, {"max_us", 1e6 * pct(v, 1.0)}}; }
  std::string str() const { return fmt::format("p50 {:.1f} us, p99 {:.1f} us, max {:.1f} us", 1e6 * pct(v, 0.5), 1e6 * pct(v, 0.99), 1e6 * pct(v, 1.0)); }
};

struct Phase {
  Dist step, cpu, largest, walk;
};

// Per-step CPU accounting of the timing decorators (thread CPU seconds, lock-free adds).
struct StepCpu {
  std::atomic<int64_t> total_ns{0}, largest_ns{0};
  void add(double s) {
    const int64_t ns = static_cast<int64_t>(s * 1e9);
    total_ns.fetch_add(ns, std::memory_order_relaxed);
    int64_t cur = largest_ns.load(std::memory_order_relaxed);
    while (ns > cur && !largest_ns.compare_exchange_weak(cur, ns, std::memory_order_relaxed)) {
    }
  }
};

// A MaskJob timed part by part; its parts' CPU time summed (one distinct mask's cost).
class TimedJob final : public MaskJob {
 public:
  TimedJob(std::shared_ptr<MaskJob> inner, StepCpu* cpu) : inner_(std::move(inner)), cpu_(cpu) {}
  int32_t parts() const override { return inner_->parts(); }
  void run_part(int32_t k) override {
    const double a = thread_cpu_seconds();
    inner_->run_part(k);
    const double s = thread_cpu_seconds() - a;
    cpu_->add(s);
    ns_.fetch_add(static_cast<int64_t>(s * 1e9), std::memory_order_relaxed);
  }
  double seconds() const { return 1e-9 * static_cast<double>(ns_.load()); }

 private:
  std::shared_ptr<MaskJob> inner_;
  StepCpu* cpu_;
  std::atomic<int64_t> ns_{0};
};

// A row's constraint with its own calls timed; the jobs it hands out wrapped in TimedJob, one
// wrapper per underlying job (rows sharing a job share the wrapper, as the runner shares jobs).
struct StepJobs {
  std::mutex mu;
  std::map<MaskJob*, std::shared_ptr<TimedJob>> wrapped;
};

class TimedConstraint final : public TokenConstraint {
 public:
  TimedConstraint(std::unique_ptr<TokenConstraint> inner, StepCpu* cpu, StepJobs* jobs)
      : inner_(std::move(inner)), cpu_(cpu), jobs_(jobs) {}
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  void fill_mask(std::span<uint32_t> mask) const override { timed([&] { inner_->fill_mask(mask); }); }
  bool fill_mask_if_ready(std::span<uint32_t> mask, std::shared_ptr<MaskJob>* job) const override {
    bool ready = false;
    std::shared_ptr<MaskJob> inner_job;
    timed([&] { ready = inner_->fill_mask_if_ready(mask, &inner_job); });
    if (ready) return true;
    std::lock_guard<std::mutex> lock(jobs_->mu);
    auto& w = jobs_->wrapped[inner_job.get()];
    if (!w) w = std::make_shared<TimedJob>(inner_job, cpu_);
    *job = w;
    return false;
  }
  bool accepts(int32_t token) const override { return inner_->accepts(token); }
  bool advance(int32_t token) override {
    bool ok = false;
    timed([&] { ok = inner_->advance(token); });
    return ok;
  }
  void rollback(int n) override { inner_->rollback(n); }
  bool finished() const override { return inner_->finished(); }

 private:
  template <class F>
  void timed(F&& f) const {
    const double a = thread_cpu_seconds();
    f();
    cpu_->add(thread_cpu_seconds() - a);
  }
  std::unique_ptr<TokenConstraint> inner_;
  StepCpu* cpu_;
  StepJobs* jobs_;
};

struct Row {
  std::shared_ptr<const grammar::GrammarConstraintSpec> spec;
  std::unique_ptr<TokenConstraint> c;
  int32_t last = -1;  // the token to advance by at the next step; -1: none (a new request)
  std::vector<uint32_t> mask;
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
  int64_t restarts = 0, misses = 0, hits = 0, walks = 0, evictions = 0;
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
      rows[i].mask.assign(static_cast<size_t>(vocab->mask_words()), 0u);
      rows[i].rng.seed(o.seed * 1000003u + static_cast<uint64_t>(r) * 65537u + i);
    }
    Phase round_cold, round_warm;
    StepCpu cpu;
    StepJobs jobs;
    for (Row& row : rows) row.c = std::make_unique<TimedConstraint>(row.spec->start(), &cpu, &jobs);
    std::vector<ConstraintMaskRow> mask_rows(rows.size());
    for (int s = 0; s < o.steps; ++s) {
      cpu.total_ns = 0;
      cpu.largest_ns = 0;
      jobs.wrapped.clear();
      for (size_t k = 0; k < rows.size(); ++k) mask_rows[k] = {rows[k].c.get(), std::span<uint32_t>(rows[k].mask)};
      const auto t0 = std::chrono::steady_clock::now();
      fill_constraint_masks(pool, mask_rows, [&](size_t k) {
        if (rows[k].last >= 0) rows[k].c->advance(rows[k].last);
      });
      const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (Phase* p : {s < o.cold_steps ? &round_cold : &round_warm, s < o.cold_steps ? &cold : &warm}) {
        p->step.v.push_back(step_s);
        p->cpu.v.push_back(1e-9 * static_cast<double>(cpu.total_ns.load()));
        p->largest.v.push_back(1e-9 * static_cast<double>(cpu.largest_ns.load()));
        for (const auto& [inner, w] : jobs.wrapped) p->walk.v.push_back(w->seconds());
      }
      walks += static_cast<int64_t>(jobs.wrapped.size());
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
          row.c = std::make_unique<TimedConstraint>(row.spec->start(), &cpu, &jobs);
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
      evictions += st.evictions;
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
                      {"masks_computed", walks},
                      {"mask_cache_evictions", evictions},
                      {"cpu_seconds", cpu_s}};
  for (auto [name, ph] : {std::pair<const char*, Phase*>{"cold", &cold}, {"warm", &warm}})
    j[name] = {{"step_wall", ph->step.to_json()}, {"step_cpu", ph->cpu.to_json()}, {"step_largest_item", ph->largest.to_json()},
               {"mask_computed", ph->walk.to_json()}, {"masks_computed", ph->walk.v.size()}};
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{} rows, {} schemas, vocabulary {} ({}), {} threads, {} rounds x {} steps; {} requests restarted; "
                           "mask cache {} hits, {} misses, {} evictions; {:.2f} CPU s\n",
                           o.batch, files.size(), vocab->size(), o.tokenizer, pool.size(), o.rounds, o.steps, restarts, hits,
                           misses, evictions, cpu_s);
  for (auto [name, ph] : {std::pair<const char*, Phase*>{"cold", &cold}, {"warm", &warm}}) {
    std::cout << fmt::format("{:>4} step wall time:          {}\n", name, ph->step.str());
    std::cout << fmt::format("{:>4} step CPU work:           {}\n", name, ph->cpu.str());
    std::cout << fmt::format("{:>4} largest item of a step:  {}\n", name, ph->largest.str());
    std::cout << fmt::format("{:>4} mask computed ({:>5}):   {}\n", name, ph->walk.v.size(), ph->walk.str());
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
