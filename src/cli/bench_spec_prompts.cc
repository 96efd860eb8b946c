// `pagoda bench spec --spec-method ...` (cli/bench_spec_prompts.h): a real proposer against plain
// decoding on text prompts, alternating rounds in one process.
#include "cli/bench_spec_prompts.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "cli/prompt_file.h"
#include "common/thread_pool.h"
#include "engine/device_spec.h"
#include "engine/engine_core.h"
#include "model/model_loader.h"
#include "runtime/ngram_proposer.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

// Forwards to a proposer and adds up the wall time of its propose() calls (the drafting share of
// a speculative step). Engine-core thread only, as every proposer.
class TimedProposer final : public Proposer {
 public:
  explicit TimedProposer(std::unique_ptr<Proposer> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  void propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) override {
    const auto t0 = std::chrono::steady_clock::now();
    inner_->propose(reqs, drafts);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double draft_cost() const override { return inner_->draft_cost(); }
  void forget(const std::string& id) override { inner_->forget(id); }
  std::vector<int64_t> hidden_layers() const override { return inner_->hidden_layers(); }
  void observe_hidden(std::span<const HiddenRows> rows, int64_t width) override {
    const auto t0 = std::chrono::steady_clock::now();
    inner_->observe_hidden(rows, width);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double seconds() const { return seconds_; }
  std::unique_ptr<Proposer> release() { return std::move(inner_); }

 private:
  std::unique_ptr<Proposer> inner_;
  double seconds_ = 0;
};

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct RunResult {
  double seconds = 0;         // whole run
  double decode_seconds = 0;  // after the first step in which every request had its first token
  double cpu = 0;             // process CPU seconds of the run
  int64_t tokens = 0, steps = 0;
  std::vector<std::vector<int32_t>> outputs;
  CoreStats before, after;
};

// Request i gets prompt (first + i) mod the number of prompts.
Result<RunResult> run_once(EngineCore& core, const std::vector<std::vector<int32_t>>& prompts, size_t first, int batch,
                           int output_len, const std::string& tag) {
  RunResult r;
  r.outputs.resize(batch);
  std::unordered_map<std::string, int> index;
  for (int i = 0; i < batch; ++i) {
    auto q = std::make_unique<Request>();
    q->id = fmt::format("{}-{}", tag, i);
    q->prompt = prompts[(first + static_cast<size_t>(i)) % prompts.size()];
    q->sampling.temperature = 0;
    q->stop.max_tokens = output_len;
    index[q->id] = i;
    PAGODA_RETURN_IF_ERROR(core.add_request(std::move(q)));
  }
  r.before = core.stats();
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  auto t_first = t0;
  int started = 0;
  while (core.has_unfinished()) {
    for (const CoreOutput& out : core.step()) {
      if (!out.error.empty()) return make_status(StatusCode::kInternal, "request {} failed: {}", out.id, out.error);
      auto it = index.find(out.id);
      if (!out.has_token || it == index.end()) continue;
      if (r.outputs[it->second].empty() && ++started == batch) t_first = std::chrono::steady_clock::now();
      r.outputs[it->second].push_back(out.sample.token);
    }
    ++r.steps;
  }
  const auto t1 = std::chrono::steady_clock::now();
  r.seconds = seconds_between(t0, t1);
  r.decode_seconds = seconds_between(t_first, t1);
  r.cpu = cpu_seconds() - cpu0;
  for (const auto& o : r.outputs) r.tokens += static_cast<int64_t>(o.size());
  r.after = core.stats();
  return r;
}

// One speculative configuration's sums over the rounds.
struct ConfigSums {
  std::string method;
  int k = 0;
  double seconds = 0, decode_seconds = 0, cpu = 0, draft_seconds = 0;
  int64_t tokens = 0, steps = 0, drafts = 0, draft_tokens = 0, accepted = 0, rejections = 0;
  std::vector<int64_t> per_pos;
  int identical = 0, requests = 0;
};

struct PlainSums {
  double seconds = 0, decode_seconds = 0, cpu = 0;
  int64_t tokens = 0, steps = 0;
};

}  // namespace

int run_spec_prompt_bench(const SpecPromptBenchOptions& o) {
  auto fail = [](const std::string& what, int code = 1) {
    std::cerr << "pagoda bench spec: " << what << "\n";
    return code;
  };
  auto dev = parse_device(o.device);
  if (!dev.ok()) return fail(dev.status().to_string());
  const bool cuda = dev->type == Device::kCuda;
  for (const std::string& m : o.methods)
    if (m != "ngram" && m != "draft" && m != "eagle3" && m != "mtp")
      return fail(fmt::format("--spec-method must be ngram, draft, eagle3 or mtp, got '{}'", m), 2);
  auto has = [&](const char* m) { return std::find(o.methods.begin(), o.methods.end(), m) != o.methods.end(); };
  if (has("draft") + has("eagle3") + has("mtp") > 1)
    return fail("--spec-method draft, eagle3 and mtp each read --spec-model: run them separately", 2);
  // The method with a model of its own ("" when only n-gram runs); mtp defaults to the target's.
  const std::string model_method = has("draft") ? "draft" : has("eagle3") ? "eagle3" : has("mtp") ? "mtp" : "";
  const bool has_draft = !model_method.empty();
  if (has_draft && model_method != "mtp" && o.draft_model.empty())
    return fail(fmt::format("--spec-method {} needs --spec-model", model_method), 2);
  if (!has_draft && !o.draft_model.empty()) return fail("--spec-model needs --spec-method draft, eagle3 or mtp", 2);
  if (o.prompt_file.empty()) return fail("--spec-method needs --prompt-file (text prompts separated by lines '---')", 2);
  std::vector<std::string> texts = read_prompt_file(o.prompt_file);
  if (texts.empty()) return fail(fmt::format("no prompts in {}", o.prompt_file), 2);
  auto tok = Tokenizer::load(o.model);
  if (!tok.ok()) return fail(tok.status().to_string());
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& t : texts) {
    if (!o.chat) {
      prompts.push_back((*tok)->encode(t));
      continue;
    }
    auto tmpl = load_chat_template(o.model);
    if (!tmpl.ok()) return fail("--chat: " + tmpl.status().to_string());
    ChatTemplateOptions opts;
    opts.add_generation_prompt = true;
    auto rendered = tmpl->render(nlohmann::json::array({{{"role", "user"}, {"content", t}}}), opts);
    if (!rendered.ok()) return fail("--chat: " + rendered.status().to_string());
    EncodeOptions eo;
    eo.add_special = false;
    eo.parse_special = true;
    prompts.push_back((*tok)->encode(*rendered, eo));
  }
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int max_k = *std::max_element(o.spec_tokens.begin(), o.spec_tokens.end());
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());

  ModelLoadOptions lo;
  lo.max_model_len = static_cast<int64_t>(longest) + o.output_len + max_k + 1;
  lo.cpu_kernels = !cuda;
  lo.load_format = o.load_format;
  auto loaded = load_model(o.model, lo);
  if (!loaded.ok()) return fail(loaded.status().to_string());
  EngineConfig cfg;
  cfg.model = o.model;
  cfg.threads = o.threads;
  cfg.device = o.device;
  cfg.dtype = o.dtype;
  cfg.cuda_graphs = o.cuda_graphs;
  cfg.batch_invariant = o.batch_invariant;
  cfg.load_format = o.load_format;
  cfg.max_model_len = lo.max_model_len;
  cfg.scheduler.max_num_seqs = max_batch;
  cfg.scheduler.max_num_batched_tokens = std::max<int>(o.max_num_batched_tokens, static_cast<int>(longest) + 1);
  cfg.enable_prefix_caching = false;  // no run reuses another's prompt blocks
  if (cuda) cfg.memory_utilization = o.memory_utilization;
  SpeculativeConfig base;
  base.num_speculative_tokens = max_k;  // the KV lookahead is planned for the largest k
  base.adaptive = o.adaptive;
  base.ngram_min = o.ngram_min;
  base.ngram_max = o.ngram_max;
  base.disable_by_batch_size = 0;  // every batch size here speculates (the rows are what it costs)
  if (has_draft) {
    cfg.speculative = base;
    cfg.speculative.method = model_method;
    cfg.speculative.model = o.draft_model;
  }
  ThreadPool pool(cuda ? 1 : o.threads);
  auto core_r = EngineCore::create(cfg, std::move(*loaded), pool);
  if (!core_r.ok()) return fail(core_r.status().to_string());
  EngineCore& core = **core_r;
  std::unique_ptr<Proposer> draft = core.release_proposer();  // the draft model's or EAGLE-3 head's proposer, if any
  std::unique_ptr<Proposer> ngram = std::make_unique<NgramProposer>(o.ngram_min, o.ngram_max);

  if (!o.json) {
    std::cout << core.executor().describe() << "\n"
              << fmt::format("prompts: {} from {}{} ({} to {} tokens), up to {} tokens out, greedy; {} rounds, {} k{}\n",
                             prompts.size(), o.prompt_file, o.chat ? " in the chat template" : "",
                             std::min_element(prompts.begin(), prompts.end(), [](auto& a, auto& b) { return a.size() < b.size(); })->size(),
                             longest, o.output_len, o.rounds, o.adaptive ? "adaptive up to" : "fixed", "")
              << "| batch | method | k | plain tok/s | spec tok/s | speedup | cpu s/token plain | spec | cpu ratio | "
                 "acceptance | per position | tokens/verif | draft ms/step | target ms/step | plain ms/step | = plain |\n"
              << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  }
  nlohmann::json rows = nlohmann::json::array();
  bool all_identical = true;
  int serial = 0;
  for (int batch : o.batches) {
    std::vector<ConfigSums> sums;
    for (const std::string& m : o.methods)
      for (int k : o.spec_tokens) {
        ConfigSums s;
        s.method = m;
        s.k = k;
        sums.push_back(s);
      }
    PlainSums plain_sums;
    // Warm-up: one plain run (page cache, first-touch of the KV cache, the draft's weights once).
    if (auto w = run_once(core, prompts, 0, batch, std::min(o.output_len, 8), fmt::format("warm{}", serial++)); !w.ok())
      return fail(w.status().to_string());
    for (int round = 0; round < o.rounds; ++round) {
      // Run order of this round: plain, then each configuration; reversed on odd rounds.
      std::vector<int> order(sums.size() + 1);
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i) - 1;  // -1: plain
      if (round % 2) std::reverse(order.begin(), order.end());
      // This round's prompts: the next `batch` of the file (rounds rotate through it).
      const size_t first = static_cast<size_t>(round) * static_cast<size_t>(batch);
      RunResult plain;
      std::vector<RunResult> spec(sums.size());
      std::vector<double> draft_s(sums.size(), 0);
      for (int c : order) {
        const std::string tag = fmt::format("b{}-{}-{}", batch, c < 0 ? "plain" : sums[c].method, serial++);
        if (c < 0) {
          auto r = run_once(core, prompts, first, batch, o.output_len, tag);
          if (!r.ok()) return fail(r.status().to_string());
          plain = std::move(*r);
          continue;
        }
        SpeculativeConfig sc = base;
        sc.method = sums[c].method;
        sc.num_speculative_tokens = sums[c].k;
        std::unique_ptr<Proposer>& inner = sums[c].method == "ngram" ? ngram : draft;
        auto timed = std::make_unique<TimedProposer>(std::move(inner));
        TimedProposer* tp = timed.get();
        core.set_speculation(sc, std::move(timed));
        auto r = run_once(core, prompts, first, batch, o.output_len, tag);
        std::unique_ptr<Proposer> back = core.release_proposer();  // tp
        inner = tp->release();
        draft_s[c] = tp->seconds();
        back.reset();
        if (!r.ok()) return fail(r.status().to_string());
        spec[c] = std::move(*r);
      }
      plain_sums.seconds += plain.seconds;
      plain_sums.decode_seconds += plain.decode_seconds;
      plain_sums.cpu += plain.cpu;
      plain_sums.tokens += plain.tokens;
      plain_sums.steps += plain.steps;
      for (size_t c = 0; c < sums.size(); ++c) {
        ConfigSums& s = sums[c];
        const RunResult& r = spec[c];
        s.seconds += r.seconds;
        s.decode_seconds += r.decode_seconds;
        s.cpu += r.cpu;
        s.draft_seconds += draft_s[c];
        s.tokens += r.tokens;
        s.steps += r.steps;
        s.drafts += r.after.spec_num_drafts - r.before.spec_num_drafts;
        s.draft_tokens += r.after.spec_num_draft_tokens - r.before.spec_num_draft_tokens;
        s.accepted += r.after.spec_num_accepted_tokens - r.before.spec_num_accepted_tokens;
        s.rejections += r.after.spec_num_rejections - r.before.spec_num_rejections;
        s.per_pos.resize(static_cast<size_t>(s.k), 0);
        for (size_t j = 0; j < s.per_pos.size() && j < r.after.spec_accepted_per_position.size(); ++j)
          s.per_pos[j] += r.after.spec_accepted_per_position[j] -
                          (j < r.before.spec_accepted_per_position.size() ? r.before.spec_accepted_per_position[j] : 0);
        for (int i = 0; i < batch; ++i) s.identical += r.outputs[i] == plain.outputs[i];
        s.requests += batch;
      }
    }
    const double rounds_batch = static_cast<double>(o.rounds) * batch;
    const double plain_decode_tokens = static_cast<double>(plain_sums.tokens) - rounds_batch;
    const double plain_rate = plain_decode_tokens / plain_sums.decode_seconds;
    const double plain_cpt = plain_sums.cpu / static_cast<double>(plain_sums.tokens);
    const double plain_ms_step = 1e3 * plain_sums.seconds / static_cast<double>(plain_sums.steps);
    for (const ConfigSums& s : sums) {
      all_identical = all_identical && s.identical == s.requests;
      const double rate = (static_cast<double>(s.tokens) - rounds_batch) / s.decode_seconds;
      const double cpt = s.cpu / static_cast<double>(s.tokens);
      std::string pos;
      nlohmann::json pos_json = nlohmann::json::array();
      for (int64_t v : s.per_pos) {
        const double f = s.drafts > 0 ? static_cast<double>(v) / static_cast<double>(s.drafts) : 0.0;
        pos += fmt::format("{}{:.2f}", pos.empty() ? "" : " ", f);
        pos_json.push_back(f);
      }
      const double acceptance = s.draft_tokens > 0 ? static_cast<double>(s.accepted) / static_cast<double>(s.draft_tokens) : 0.0;
      const double per_verif = s.drafts > 0 ? 1.0 + static_cast<double>(s.accepted) / static_cast<double>(s.drafts) : 1.0;
      const double draft_ms = 1e3 * s.draft_seconds / static_cast<double>(s.steps);
      const double target_ms = 1e3 * (s.seconds - s.draft_seconds) / static_cast<double>(s.steps);
      nlohmann::json row = {{"batch", batch},
                            {"method", s.method},
                            {"k", s.k},
                            {"adaptive", o.adaptive},
                            {"rounds", o.rounds},
                            {"plain_decode_tokens_per_s", plain_rate},
                            {"spec_decode_tokens_per_s", rate},
                            {"speedup", rate / plain_rate},
                            {"plain_cpu_s_per_token", plain_cpt},
                            {"spec_cpu_s_per_token", cpt},
                            {"cpu_ratio", plain_cpt / cpt},
                            {"acceptance", acceptance},
                            {"acceptance_per_position", pos_json},
                            {"tokens_per_verification", per_verif},
                            {"spec_num_drafts", s.drafts},
                            {"spec_num_draft_tokens", s.draft_tokens},
                            {"spec_num_accepted_tokens", s.accepted},
                            {"plain_steps", plain_sums.steps},
                            {"spec_steps", s.steps},
                            {"draft_ms_per_step", draft_ms},
                            {"target_ms_per_step", target_ms},
                            {"plain_ms_per_step", plain_ms_step},
                            {"plain_tokens", plain_sums.tokens},
                            {"spec_tokens", s.tokens},
                            {"identical_requests", s.identical},
                            {"requests", s.requests}};
      rows.push_back(row);
      if (!o.json)
        std::cout << fmt::format("| {} | {} | {} | {:.2f} | {:.2f} | {:.2f}x | {:.4g} | {:.4g} | {:.2f}x | {:.3f} | {} | {:.2f} | "
                                 "{:.1f} | {:.1f} | {:.1f} | {}/{} |\n",
                                 batch, s.method, s.k, plain_rate, rate, rate / plain_rate, plain_cpt, cpt, plain_cpt / cpt,
                                 acceptance, pos, per_verif, draft_ms, target_ms, plain_ms_step, s.identical, s.requests)
                  << std::flush;
    }
  }
  if (o.json)
    std::cout << nlohmann::json{{"model", o.model},
                                {"draft_model", o.draft_model},
                                {"device", core.executor().describe()},
                                {"prompt_file", o.prompt_file},
                                {"chat", o.chat},
                                {"output_len", o.output_len},
                                {"all_identical", all_identical},
                                {"runs", rows}}
                     .dump(2)
              << "\n";
  if (!all_identical) {
    std::cerr << "pagoda bench spec: some speculative outputs differ from plain greedy decoding (the '= plain' column)\n";
    return 3;
  }
  return 0;
}

}  // namespace pagoda::cli
