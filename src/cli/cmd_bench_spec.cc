// `pagoda bench spec`: speculative decoding's speedup as a function of acceptance, with a proposer
// whose acceptance is set by construction (runtime/replay_proposer.h), against plain decoding in
// the same process.
//
// Per batch size B: B requests of random prompts (--input-len tokens, greedy, ignore EOS,
// --output-len tokens) run once to record their greedy continuations (this is also the warm-up):
// by default through verification steps (`--record verify`: every step verifies k drafts that a
// proposer makes up, so each recorded token comes from a row of a (1 + k)-row verification, the
// shape the speculative runs compute it in; on a GPU outside --batch-invariant a plain decode step
// can round a near-tie the other way, and the replay would lose its record there), or plainly
// (`--record plain`). Then per acceptance a, --repeats times: a plain run and a speculative run of the same
// prompts, the replay proposer drafting the record with each draft wrong with probability 1 - a.
// Drafting is free (n-gram class) unless --spec-model names a draft model: then that model runs its
// k passes per step as a real draft-model proposer would, and its drafts are discarded for the
// replay's (its time included, its acceptance not). Every row reports both runs' output tok/s, the
// speedup (plain seconds / speculative seconds, summed over repeats), the measured per-token
// acceptance (accepted / (accepted + rejections)) next to the constructed one, vLLM's acceptance
// (accepted / drafted), tokens per verification, and whether every request's tokens equal the
// plain record (requests whose target output left the record get no more drafts: "diverged").
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/bench_spec_prompts.h"
#include "cli/command.h"
#include "cli/options.h"
#include "common/cpu_features.h"
#include "engine/engine_core.h"
#include "model/model_loader.h"
#include "engine/device_spec.h"
#include "runtime/replay_proposer.h"

namespace pagoda::cli {
namespace {

// The record pass of `--record verify`: k made-up drafts per request per step (the last token's
// successors in id order); whatever is accepted is the target's own greedy choice anyway.
class MadeUpDraftsProposer final : public Proposer {
 public:
  explicit MadeUpDraftsProposer(int64_t vocab) : vocab_(vocab) {}
  std::string name() const override { return "made-up"; }
  void propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) override {
    drafts.assign(reqs.size(), {});
    for (size_t i = 0; i < reqs.size(); ++i)
      for (int32_t j = 0; j < reqs[i].max_drafts; ++j)
        drafts[i].push_back(static_cast<int32_t>((reqs[i].tokens.back() + 1 + j) % vocab_));
  }

 private:
  int64_t vocab_;
};

struct SpecBenchOptions {
  std::string model;
  LoadFormat load_format = LoadFormat::kAuto;  // the target's (a draft model loads as it is)
  std::string device = "auto";
  std::string dtype = "auto";
  bool cuda_graphs = true;
  bool batch_invariant = false;
  int threads = 0;
  std::vector<double> acceptance = {0.5, 0.7, 0.8, 0.9};
  std::vector<int> batches = {1, 64};
  int input_len = 128;
  int output_len = 256;
  int repeats = 1;
  int max_num_batched_tokens = 8192;
  double memory_utilization = 0.9;
  uint64_t seed = 1;
  std::string draft_model;
  std::vector<int> spec_tokens = {4};  // the replay takes one k; a real proposer a list
  int disable_batch_size = -1;
  bool no_adaptive = false;
  bool host_verify = false;
  std::string record = "verify";
  std::string record_file;  // the records of every batch: read if it exists, else written
  std::string isa;          // CPU: cap of the kernel ISA level (scalar, avx2, avx512, avx512-vnni, amx)
  bool json = false;
  // A real proposer on text prompts instead of the replay (cli/bench_spec_prompts.h).
  std::vector<std::string> methods;
  std::string prompt_file;
  bool chat = false;
  bool adaptive = false;
  int rounds = 3;
  int ngram_min = 1, ngram_max = 4;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct RunResult {
  double seconds = 0;
  int64_t steps = 0;
  std::vector<std::vector<int32_t>> outputs;  // per request
  CoreStats before, after;
};

std::vector<int32_t> prompt_of(uint64_t seed, int batch, int i, int len, int64_t vocab) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(batch) * 7919u + static_cast<uint64_t>(i));
  std::vector<int32_t> p(len);
  for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return p;
}

std::string request_id(const std::string& tag, int i) { return fmt::format("{}-{}", tag, i); }

Result<RunResult> run_once(EngineCore& core, const SpecBenchOptions& o, int batch, const std::string& tag) {
  const int64_t vocab = core.model_config().vocab_size;
  RunResult r;
  r.outputs.resize(batch);
  std::unordered_map<std::string, int> index;
  for (int i = 0; i < batch; ++i) {
    auto q = std::make_unique<Request>();
    q->id = request_id(tag, i);
    q->prompt = prompt_of(o.seed, batch, i, o.input_len, vocab);
    q->sampling.temperature = 0;
    q->stop.max_tokens = o.output_len;
    q->stop.ignore_eos = true;
    index[q->id] = i;
    PAGODA_RETURN_IF_ERROR(core.add_request(std::move(q)));
  }
  r.before = core.stats();
  const auto t0 = std::chrono::steady_clock::now();
  while (core.has_unfinished()) {
    for (const CoreOutput& out : core.step()) {
      if (!out.error.empty()) return make_status(StatusCode::kInternal, "request {} failed: {}", out.id, out.error);
      auto it = index.find(out.id);
      if (out.has_token && it != index.end()) r.outputs[it->second].push_back(out.sample.token);
    }
    ++r.steps;
  }
  r.seconds = seconds_since(t0);
  r.after = core.stats();
  return r;
}

int run_spec_bench(const SpecBenchOptions& o) {
  if (o.spec_tokens.size() != 1) {
    std::cerr << "pagoda bench spec: the replay proposer takes one --spec-tokens value (a list needs --spec-method)\n";
    return 2;
  }
  const int k = o.spec_tokens.front();
  if (!o.isa.empty()) {
    IsaLevel level;
    if (!parse_isa_level(o.isa, &level)) {
      std::cerr << "pagoda bench spec: unknown --isa '" << o.isa << "' (scalar, avx2, avx512, avx512-vnni, amx)\n";
      return 2;
    }
    set_isa_level_cap(level);
  }
  // --record-file: records made by another run (e.g. under another --isa: a change of kernels
  // between the record and the measured runs) are replayed instead of recording here.
  nlohmann::json records_in, records_out = nlohmann::json::object();
  if (!o.record_file.empty() && std::filesystem::exists(o.record_file)) {
    std::ifstream f(o.record_file);
    records_in = nlohmann::json::parse(f, nullptr, false);
    if (records_in.is_discarded() || !records_in.is_object() || records_in.value("input_len", -1) != o.input_len ||
        records_in.value("output_len", -1) != o.output_len || records_in.value("seed", uint64_t{0}) != o.seed) {
      std::cerr << "pagoda bench spec: " << o.record_file
                << " is not a record of this --input-len, --output-len and --seed\n";
      return 2;
    }
  }
  auto dev = parse_device(o.device);
  if (!dev.ok()) {
    std::cerr << "pagoda bench spec: " << dev.status().to_string() << "\n";
    return 2;
  }
  const bool cuda = dev->type == Device::kCuda;
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  ModelLoadOptions lo;
  lo.max_model_len = o.input_len + o.output_len + k + 1;
  lo.cpu_kernels = !cuda;
  lo.load_format = o.load_format;
  auto loaded = load_model(o.model, lo);
  if (!loaded.ok()) {
    std::cerr << "pagoda bench spec: " << loaded.status().to_string() << "\n";
    return 1;
  }
  const int64_t vocab = loaded->config.vocab_size;
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
  cfg.scheduler.max_num_batched_tokens = std::max(o.max_num_batched_tokens, o.input_len + 1);
  if (cuda) cfg.memory_utilization = o.memory_utilization;
  // CUDA graphs captured before the timed runs: the decode buckets at start-up, and each
  // verification shape's buckets at the first verification of its rows (in the record pass, the
  // warm-up), not lazily at the first use of a bucket inside a timed run.
  cfg.tuning.graph_capture = "start";
  // The speculative settings the runner follows (adaptive draft length, the batch-size
  // off-switch); the method names the replay. A draft model is loaded by the core (its memory
  // share planned with the target's) and handed to the replay proposer.
  SpeculativeConfig sc;
  sc.num_speculative_tokens = k;
  sc.adaptive = !o.no_adaptive;
  sc.device_verify = !o.host_verify;
  if (o.disable_batch_size >= 0) sc.disable_by_batch_size = o.disable_batch_size;
  if (!o.draft_model.empty()) {
    cfg.speculative = sc;
    cfg.speculative.method = "draft";
    cfg.speculative.model = o.draft_model;
  }
  ThreadPool pool(cuda ? 1 : o.threads);
  auto core_r = EngineCore::create(cfg, std::move(*loaded), pool);
  if (!core_r.ok()) {
    std::cerr << "pagoda bench spec: " << core_r.status().to_string() << "\n";
    return 1;
  }
  EngineCore& core = **core_r;
  std::unique_ptr<Proposer> inner = core.release_proposer();  // the draft model's proposer, if any
  sc.method = "replay";
  const std::string drafting = inner ? "draft model " + o.draft_model + " (its drafts replaced)" : "free (n-gram class)";
  if (!o.json)
    std::cout << core.executor().describe() << "\n" << core.memory_plan().to_string() << "\n"
              << fmt::format("replay proposer: k={} {}, record {}, {} verification, drafting {}; {} in / {} out tokens per "
                             "request\n",
                             k, sc.adaptive ? "adaptive" : "fixed", o.record,
                             sc.device_verify && core.executor().samples_on_device() ? "device" : "host",
                             drafting, o.input_len, o.output_len)
              << "| batch | accept | plain tok/s | spec tok/s | speedup | measured accept | vLLM accept | tokens/verif | "
                 "steps plain/spec | spec = record | plain = record | diverged |\n"
              << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  int serial = 0;
  bool all_identical = true;
  for (int batch : o.batches) {
    if (o.record == "verify") {
      SpeculativeConfig rc = sc;
      rc.method = "made-up";
      rc.adaptive = false;  // k drafts every step, whatever is accepted
      core.set_speculation(rc, std::make_unique<MadeUpDraftsProposer>(vocab));
    }
    auto rec = run_once(core, o, batch, fmt::format("b{}-record", batch));
    core.release_proposer();
    if (!rec.ok()) {
      std::cerr << "pagoda bench spec: " << rec.status().to_string() << "\n";
      return 1;
    }
    const std::string key = fmt::format("b{}", batch);
    if (!records_in.is_null()) {
      if (!records_in.contains(key) || records_in[key].size() != static_cast<size_t>(batch)) {
        std::cerr << "pagoda bench spec: " << o.record_file << " has no record of batch " << batch << "\n";
        return 2;
      }
      int same = 0;
      for (int i = 0; i < batch; ++i) {
        std::vector<int32_t> theirs;
        try {
          theirs = records_in[key][i].get<std::vector<int32_t>>();
        } catch (const nlohmann::json::exception&) {
          std::cerr << "pagoda bench spec: " << o.record_file << ": the record of batch " << batch << " is not token ids\n";
          return 2;
        }
        same += theirs == rec->outputs[i];
        rec->outputs[i] = std::move(theirs);
      }
      if (!o.json)
        std::cout << fmt::format("batch {}: record of {} replayed; this run's own record equals it for {}/{} requests\n", batch,
                                 o.record_file, same, batch);
    }
    records_out[key] = rec->outputs;
    for (double a : o.acceptance) {
      double plain_s = 0, spec_s = 0;
      int64_t plain_steps = 0, spec_steps = 0, accepted = 0, rejections = 0, drafts = 0, draft_tokens = 0, diverged = 0;
      int identical = 0, plain_identical = 0;
      for (int rep = 0; rep < o.repeats; ++rep) {
        auto plain = run_once(core, o, batch, fmt::format("b{}-plain-{}", batch, serial));
        if (!plain.ok()) {
          std::cerr << "pagoda bench spec: " << plain.status().to_string() << "\n";
          return 1;
        }
        const std::string tag = fmt::format("b{}-spec-{}", batch, serial++);
        std::unordered_map<std::string, std::vector<int32_t>> records;
        for (int i = 0; i < batch; ++i) {
          std::vector<int32_t> t = prompt_of(o.seed, batch, i, o.input_len, vocab);
          t.insert(t.end(), rec->outputs[i].begin(), rec->outputs[i].end());
          records.emplace(request_id(tag, i), std::move(t));
        }
        auto replay = std::make_unique<ReplayProposer>(std::move(records), a, vocab, o.seed + serial, std::move(inner));
        ReplayProposer* rp = replay.get();
        core.set_speculation(sc, std::move(replay));
        auto spec = run_once(core, o, batch, tag);
        diverged += rp->num_diverged();
        std::unique_ptr<Proposer> back = core.release_proposer();
        inner = rp->release_inner();
        if (!spec.ok()) {
          std::cerr << "pagoda bench spec: " << spec.status().to_string() << "\n";
          return 1;
        }
        plain_s += plain->seconds;
        spec_s += spec->seconds;
        plain_steps += plain->steps;
        spec_steps += spec->steps;
        accepted += spec->after.spec_num_accepted_tokens - spec->before.spec_num_accepted_tokens;
        rejections += spec->after.spec_num_rejections - spec->before.spec_num_rejections;
        drafts += spec->after.spec_num_drafts - spec->before.spec_num_drafts;
        draft_tokens += spec->after.spec_num_draft_tokens - spec->before.spec_num_draft_tokens;
        for (int i = 0; i < batch; ++i) {
          identical += spec->outputs[i] == rec->outputs[i];
          plain_identical += plain->outputs[i] == rec->outputs[i];
        }
      }
      const int n = batch * o.repeats;
      all_identical = all_identical && identical == n && plain_identical == n;
      const double out_tokens = static_cast<double>(batch) * o.output_len * o.repeats;
      const double measured = accepted + rejections > 0 ? static_cast<double>(accepted) / (accepted + rejections) : 0.0;
      const double vllm = draft_tokens > 0 ? static_cast<double>(accepted) / draft_tokens : 0.0;
      const double per_verif = drafts > 0 ? 1.0 + static_cast<double>(accepted) / drafts : 1.0;
      nlohmann::json row = {{"batch", batch},
                            {"acceptance", a},
                            {"spec_tokens", k},
                            {"adaptive", sc.adaptive},
                            {"device_verify", sc.device_verify},
                            {"drafting", inner ? "draft_model" : "free"},
                            {"repeats", o.repeats},
                            {"plain_s", plain_s},
                            {"spec_s", spec_s},
                            {"plain_tokens_per_s", out_tokens / plain_s},
                            {"spec_tokens_per_s", out_tokens / spec_s},
                            {"speedup", plain_s / spec_s},
                            {"measured_acceptance", measured},
                            {"vllm_acceptance", vllm},
                            {"tokens_per_verification", per_verif},
                            {"spec_num_drafts", drafts},
                            {"spec_num_draft_tokens", draft_tokens},
                            {"spec_num_accepted_tokens", accepted},
                            {"spec_num_rejections", rejections},
                            {"plain_steps", plain_steps},
                            {"spec_steps", spec_steps},
                            {"identical_requests", identical},
                            {"plain_identical_requests", plain_identical},
                            {"requests", n},
                            {"diverged_requests", diverged}};
      rows.push_back(row);
      if (!o.json)
        std::cout << fmt::format("| {} | {:.2f} | {:.1f} | {:.1f} | {:.2f}x | {:.3f} | {:.3f} | {:.2f} | {}/{} | {}/{} | {}/{} | {} |\n",
                                 batch, a, out_tokens / plain_s, out_tokens / spec_s, plain_s / spec_s, measured, vllm,
                                 per_verif, plain_steps, spec_steps, identical, n, plain_identical, n, diverged)
                  << std::flush;
    }
  }
  if (!o.record_file.empty() && records_in.is_null()) {
    records_out["input_len"] = o.input_len;
    records_out["output_len"] = o.output_len;
    records_out["seed"] = o.seed;
    std::ofstream(o.record_file) << records_out.dump() << "\n";
  }
  std::cerr << core.executor().profile_report();  // CUDA: host time per step, decode and verification graphs
  if (o.json)
    std::cout << nlohmann::json{{"model", o.model},
                                {"device", core.executor().describe()},
                                {"drafting", drafting},
                                {"record", o.record},
                                {"input_len", o.input_len},
                                {"output_len", o.output_len},
                                {"all_identical", all_identical},
                                {"runs", rows}}
                     .dump(2)
              << "\n";
  else if (!all_identical)
    std::cout << "note: some outputs differ from the record (a speculative or a plain run): see the '= record' columns\n";
  return 0;
}

const BenchSubcommandRegistration kBenchSpec(
    "spec", "Speculative decoding speedup vs plain decoding as a function of a constructed acceptance", [](CLI::App* app) {
      auto o = std::make_shared<SpecBenchOptions>();
      app->add_option("model,--model,-m", o->model, "GGUF file or Hugging Face model directory (the target)")->required();
      add_device_options(app, o->device, o->dtype, o->cuda_graphs);
      add_load_format_option(app, o->load_format);
      app->add_flag("--batch-invariant", o->batch_invariant, "CUDA: fixed-order kernels (slow)");
      app->add_option("-t,--threads", o->threads, "CPU threads (default: one per core)")->check(CLI::Range(0, 4096));
      app->add_option("--acceptance", o->acceptance, "Constructed per-token acceptances (default 0.5,0.7,0.8,0.9)")
          ->delimiter(',')
          ->check(CLI::Range(0.0, 1.0));
      app->add_option("-b,--batch", o->batches, "Requests decoded together (default 1,64)")->delimiter(',')->check(CLI::Range(1, 65536));
      app->add_option("--input-len", o->input_len, "Prompt tokens per request")->check(CLI::Range(1, 1048576));
      app->add_option("--output-len", o->output_len, "Generated tokens per request")->check(CLI::Range(2, 1048576));
      app->add_option("-r,--repeats", o->repeats, "Plain/speculative run pairs per point")->check(CLI::Range(1, 1000));
      app->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Tokens per step")->check(CLI::Range(1, 1073741824));
      app->add_option("--memory-utilization,--gpu-memory-utilization", o->memory_utilization, "GPU: fraction of its memory")
          ->check(CLI::Range(0.0, 1.0));
      app->add_option("--seed", o->seed, "Prompts and wrong drafts");
      app->add_option("--spec-model", o->draft_model, "A draft model that runs for its cost (its drafts discarded)");
      app->add_option("--spec-tokens", o->spec_tokens,
                      "Most drafts per request per step (default 4; with --spec-method a list: 2,3,4,5)")
          ->delimiter(',')
          ->check(CLI::Range(1, 16));
      app->add_option("--spec-disable-batch-size", o->disable_batch_size,
                      "No drafts in steps with more decoding requests than this (0: never off; default 32)")
          ->check(CLI::NonNegativeNumber);
      app->add_flag("--spec-no-adaptive", o->no_adaptive, "Fixed draft length");
      app->add_flag("--spec-host-verify", o->host_verify,
                    "Verify on the host (logits copied back) also where the device could pick the greedy tokens");
      app->add_option("--record", o->record,
                      "How the greedy record is made: verify (through (1 + k)-row verification steps) or plain")
          ->check(CLI::IsMember({"verify", "plain"}));
      app->add_option("--record-file", o->record_file,
                      "Replay the records in this file (made by a run with other kernels, e.g. --isa) if it exists, "
                      "else write this run's records there");
      app->add_option("--isa", o->isa, "CPU: cap the kernel ISA level: scalar, avx2, avx512, avx512-vnni, amx");
      app->add_flag("--json", o->json, "Print JSON");
      app->add_option("--spec-method", o->methods,
                      "A real proposer instead of the replay: ngram and/or one of draft, eagle3 (--spec-model) and mtp, on --prompt-file")
          ->delimiter(',')
          ->check(CLI::IsMember({"ngram", "draft", "eagle3", "mtp"}));
      app->add_option("--prompt-file", o->prompt_file, "With --spec-method: text prompts separated by lines '---' (cycled)");
      app->add_flag("--chat", o->chat, "With --spec-method: each prompt a user message in the target's chat template");
      app->add_flag("--spec-adaptive", o->adaptive, "With --spec-method: adaptive draft length up to k (default: fixed k)");
      app->add_option("--rounds", o->rounds, "With --spec-method: alternating rounds (plain + each configuration)")
          ->check(CLI::Range(1, 1000));
      app->add_option("--spec-ngram-min", o->ngram_min, "Prompt lookup: shortest n-gram")->check(CLI::Range(1, 16));
      app->add_option("--spec-ngram-max", o->ngram_max, "Prompt lookup: longest n-gram")->check(CLI::Range(1, 16));
      return [o] {
        if (!resolve_device_option(o->device, "bench spec", o->model)) return 2;
        if (!o->methods.empty()) {
          SpecPromptBenchOptions p;
          p.model = o->model;
          p.load_format = o->load_format;
          p.device = o->device;
          p.dtype = o->dtype;
          p.cuda_graphs = o->cuda_graphs;
          p.batch_invariant = o->batch_invariant;
          p.threads = o->threads;
          p.methods = o->methods;
          p.draft_model = o->draft_model;
          p.spec_tokens = o->spec_tokens;
          p.adaptive = o->adaptive;
          p.ngram_min = o->ngram_min;
          p.ngram_max = o->ngram_max;
          p.batches = o->batches;
          p.prompt_file = o->prompt_file;
          p.chat = o->chat;
          p.output_len = o->output_len;
          p.rounds = o->rounds;
          p.memory_utilization = o->memory_utilization;
          p.json = o->json;
          return run_spec_prompt_bench(p);
        }
        return run_spec_bench(*o);
      };
    });

}  // namespace
}  // namespace pagoda::cli
