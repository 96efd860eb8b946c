// `pagoda perplexity`: perplexity of a model over a text, and with a base model's saved
// log-probabilities the KL divergence and top-1 agreement at the same positions (the quality of a
// quantized file against its 16-bit or f32-dequantized original). llama.cpp's llama-perplexity
// conventions: the text is tokenized once, cut into chunks of --ctx tokens (the first token of each
// replaced by BOS when the model adds one), every chunk runs alone from an empty cache, and the
// predictions of the second half of each chunk are scored (ctx / 2 .. ctx - 2 predicting the next
// token), so every scored token has at least ctx / 2 tokens of context.
//
// --save-logits FILE (the base run) writes, little-endian:
//   "PGKLBAS1" | u32 vocab | u32 ctx | u32 chunks | u32 first | i32 tokens[chunks * ctx]
//   | f16 log-probabilities [chunks][ctx - 1 - first][vocab]
// --kl-base FILE (the run being judged) reads it, requires the same vocabulary, ctx and tokens, and
// reports KL(base || model): mean with its standard error, median, p99, max, and top-1 agreement.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "common/half.h"
#include "model/model_loader.h"
#include "runtime/cuda_executor.h"
#include "engine/device_spec.h"
#include "runtime/forward_batch.h"
#include "runtime/logprob_stats.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

constexpr char kMagic[8] = {'P', 'G', 'K', 'L', 'B', 'A', 'S', '1'};

struct PerplexityOptions {
  std::string model;
  std::string file;
  int64_t ctx = 512;
  int64_t chunks = 0;  // 0: every whole chunk of the text
  std::string device = "auto";
  WeightQuantization quantization = WeightQuantization::kNone;
  // dummy: random weights (a perplexity near the vocabulary size; for timing); the text is still
  // tokenized by the model directory's tokenizer.
  LoadFormat load_format = LoadFormat::kAuto;
  std::string dtype = "auto";
  bool cuda_graphs = true;
  int threads = 0;
  std::string kv_dtype = "f32";
  std::string save_logits;
  std::string kl_base;
  bool json = false;
};

struct BaseHeader {
  uint32_t vocab = 0, ctx = 0, chunks = 0, first = 0;
};

// The saved base run: header and tokens read and checked; positions are read in order.
class BaseReader {
 public:
  Status open(const std::string& path) {
    f_.open(path, std::ios::binary);
    if (!f_) return make_status(StatusCode::kIoError, "--kl-base: cannot open {}", path);
    char magic[8];
    f_.read(magic, 8);
    uint32_t h[4];
    f_.read(reinterpret_cast<char*>(h), sizeof h);
    if (!f_ || std::memcmp(magic, kMagic, 8) != 0)
      return data_loss("--kl-base: {} is not a `pagoda perplexity --save-logits` file", path);
    hdr_ = {h[0], h[1], h[2], h[3]};
    if (hdr_.vocab == 0 || hdr_.ctx < 4 || hdr_.chunks == 0 || hdr_.first >= hdr_.ctx - 1)
      return data_loss("--kl-base: {} has an invalid header (vocab {}, ctx {}, chunks {}, first {})", path, hdr_.vocab,
                       hdr_.ctx, hdr_.chunks, hdr_.first);
    const uint64_t n_tokens = uint64_t{hdr_.chunks} * hdr_.ctx;
    const uint64_t expect = 8 + sizeof h + n_tokens * 4 + uint64_t{hdr_.chunks} * (hdr_.ctx - 1 - hdr_.first) * hdr_.vocab * 2;
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec || size != expect)
      return data_loss("--kl-base: {} is {} bytes, its header says {} (truncated or not this format)", path,
                       ec ? 0 : size, expect);
    tokens_.resize(static_cast<size_t>(n_tokens));
    f_.read(reinterpret_cast<char*>(tokens_.data()), static_cast<std::streamsize>(n_tokens * 4));
    if (!f_) return data_loss("--kl-base: reading {} failed", path);
    return {};
  }
  const BaseHeader& header() const { return hdr_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  void next(std::vector<float>& out) {
    half_.resize(hdr_.vocab);
    f_.read(reinterpret_cast<char*>(half_.data()), static_cast<std::streamsize>(half_.size() * 2));
    PAGODA_CHECK(static_cast<bool>(f_), "--kl-base: read past the checked size");
    out.resize(hdr_.vocab);
    for (size_t v = 0; v < half_.size(); ++v) out[v] = fp16_to_f32(half_[v]);
  }

 private:
  std::ifstream f_;
  BaseHeader hdr_;
  std::vector<int32_t> tokens_;
  std::vector<uint16_t> half_;
};

Result<std::unique_ptr<ModelExecutor>> make_executor(const PerplexityOptions& o, const DeviceSpec& dev, const Model& model,
                                                     const KvCacheSpec& spec, ThreadPool& pool) {
  if (dev.type != Device::kCuda) {
    if (spec.dtype == DType::kF8E4M3) return invalid_argument("--kv-dtype f8_e4m3 needs --device cuda");
    return make_cpu_executor(model, spec, pool);
  }
  CudaExecutorOptions co;
  co.device = dev.index;
  co.dtype = o.dtype;
  co.max_num_tokens = o.ctx;
  co.max_num_seqs = 1;
  co.max_model_len = o.ctx;
  co.cuda_graphs = o.cuda_graphs;
  return make_cuda_executor(model, spec, co);
}

int fail(const std::string& msg, int code = 1) {
  std::cerr << "pagoda perplexity: " << msg << "\n";
  return code;
}

int run_perplexity(PerplexityOptions o) {
  if (o.ctx < 4 || o.ctx % 2 != 0) return fail("--ctx must be an even number >= 4", 2);
  if (!o.save_logits.empty() && !o.kl_base.empty()) return fail("--save-logits and --kl-base exclude each other", 2);
  std::ifstream in(o.file, std::ios::binary);
  if (!in) return fail(fmt::format("cannot read --file {}", o.file), 2);
  std::stringstream text;
  text << in.rdbuf();
  auto kv_dtype = dtype_from_name(o.kv_dtype);
  if (!kv_dtype || !kv_cache_dtype_supported(*kv_dtype)) return fail("--kv-dtype must be f32, f16, bf16 or f8_e4m3", 2);
  auto dev = parse_device(o.device);
  if (!dev.ok()) return fail(dev.status().message(), 2);

  auto tok = Tokenizer::load(o.model);
  if (!tok.ok() && o.load_format == LoadFormat::kDummy)
    return fail(fmt::format("--load-format dummy: perplexity tokenizes the text with the model directory's tokenizer: {}",
                            tok.status().to_string()));
  if (!tok.ok()) return fail(tok.status().to_string());
  std::vector<int32_t> ids = (*tok)->encode(text.str(), {.add_special = false});
  int64_t chunks = static_cast<int64_t>(ids.size()) / o.ctx;
  if (chunks == 0)
    return fail(fmt::format("{} has {} tokens, fewer than one chunk of --ctx {}", o.file, ids.size(), o.ctx), 2);
  if (o.chunks > 0) chunks = std::min(chunks, o.chunks);
  const int32_t bos = (*tok)->add_bos() ? (*tok)->bos_id() : -1;
  for (int64_t c = 0; c < chunks && bos >= 0; ++c) ids[static_cast<size_t>(c * o.ctx)] = bos;
  ids.resize(static_cast<size_t>(chunks * o.ctx));
  const int64_t first = o.ctx / 2;

  BaseReader base;
  if (!o.kl_base.empty()) {
    if (Status s = base.open(o.kl_base); !s.ok()) return fail(s.message(), 2);
    if (base.header().ctx != o.ctx || base.header().first != first)
      return fail(fmt::format("--kl-base was saved with --ctx {}, this run has --ctx {}", base.header().ctx, o.ctx), 2);
    if (base.header().chunks < chunks) chunks = base.header().chunks;
    ids.resize(static_cast<size_t>(chunks * o.ctx));
    if (!std::equal(ids.begin(), ids.end(), base.tokens().begin()))
      return fail("--kl-base was saved over other tokens (another text or tokenizer): the positions would not match", 2);
  }

  ModelLoadOptions lo;
  lo.max_model_len = o.ctx;
  lo.cpu_kernels = dev->type != Device::kCuda;
  lo.quantization = o.quantization;
  lo.load_format = o.load_format;
  auto loaded = load_model(o.model, lo);
  if (!loaded.ok()) return fail(loaded.status().to_string());
  const int64_t V = loaded->config.vocab_size;
  if (!o.kl_base.empty() && base.header().vocab != V)
    return fail(fmt::format("--kl-base has a vocabulary of {}, this model {}", base.header().vocab, V), 2);
  const int64_t bs = 16, nblocks = (o.ctx + bs - 1) / bs;
  KvCacheSpec spec;
  spec.num_blocks = nblocks + 1;
  spec.block_size = bs;
  spec.dtype = *kv_dtype;
  ThreadPool pool(dev->type == Device::kCuda ? 1 : o.threads);
  auto ex = make_executor(o, *dev, *loaded->model, spec, pool);
  if (!ex.ok()) return fail(ex.status().to_string());
  std::vector<int32_t> table;
  for (int64_t b = 0; b < nblocks; ++b) table.push_back(static_cast<int32_t>(b + 1));

  std::ofstream save;
  if (!o.save_logits.empty()) {
    save.open(o.save_logits, std::ios::binary);
    if (!save) return fail(fmt::format("cannot write --save-logits {}", o.save_logits), 2);
    const uint32_t h[4] = {static_cast<uint32_t>(V), static_cast<uint32_t>(o.ctx), static_cast<uint32_t>(chunks),
                           static_cast<uint32_t>(first)};
    save.write(kMagic, 8);
    save.write(reinterpret_cast<const char*>(h), sizeof h);
    save.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
  }

  PerplexityStats ppl;
  KlStats kl;
  std::vector<float> lp(static_cast<size_t>(V)), base_lp;
  std::vector<uint16_t> half(static_cast<size_t>(V));
  Progress progress("perplexity", fmt::format("{} chunks of {}", chunks, o.ctx), "tokens");
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int32_t> chunk(ids.begin() + c * o.ctx, ids.begin() + (c + 1) * o.ctx);
    ForwardBatch batch;
    batch.add_sequence(chunk, static_cast<int32_t>(o.ctx), table, bs, true, /*want_all_logits=*/true);
    const Tensor& logits = (*ex)->forward(batch);
    for (int64_t i = first; i < o.ctx - 1; ++i) {
      log_softmax({logits.data_as<float>() + i * V, static_cast<size_t>(V)}, lp);
      ppl.nll.add(-static_cast<double>(lp[static_cast<size_t>(chunk[static_cast<size_t>(i + 1)])]));
      if (save.is_open()) {
        for (int64_t v = 0; v < V; ++v) half[static_cast<size_t>(v)] = f32_to_fp16(lp[static_cast<size_t>(v)]);
        save.write(reinterpret_cast<const char*>(half.data()), static_cast<std::streamsize>(half.size() * 2));
      }
      if (!o.kl_base.empty()) {
        base.next(base_lp);
        kl.add(base_lp, lp);
      }
    }
    progress.update((c + 1) * o.ctx, chunks * o.ctx);
  }
  progress.finish();
  if (save.is_open() && !save.flush()) return fail(fmt::format("writing --save-logits {} failed", o.save_logits));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  nlohmann::json out = {{"model", o.model},
                        {"file", o.file},
                        {"device", (*ex)->device_name()},
                        {"ctx", o.ctx},
                        {"chunks", chunks},
                        {"scored_tokens", ppl.nll.count()},
                        {"text_tokens", ids.size()},
                        {"nll", ppl.nll.mean()},
                        {"perplexity", ppl.perplexity()},
                        {"perplexity_stderr", ppl.perplexity_stderr()},
                        {"seconds", secs},
                        {"tokens_per_s", static_cast<double>(chunks * o.ctx) / secs}};
  if (!o.kl_base.empty())
    out["kl"] = {{"base", o.kl_base},      {"mean", kl.kl.mean()},          {"stderr", kl.kl.stderr_of_mean()},
                 {"median", kl.kl_quantile(0.5)}, {"p99", kl.kl_quantile(0.99)}, {"max", kl.kl_quantile(1.0)},
                 {"top1_agreement", kl.top1_agreement()}};
  if (o.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%lld chunks of %lld tokens (%lld scored, the second half of each) on %s, %.1f tok/s\n",
              static_cast<long long>(chunks), static_cast<long long>(o.ctx), static_cast<long long>(ppl.nll.count()),
              (*ex)->device_name().c_str(), out["tokens_per_s"].get<double>());
  std::printf("PPL = %.4f +/- %.4f\n", ppl.perplexity(), ppl.perplexity_stderr());
  if (!o.kl_base.empty())
    std::printf("KL(base || model) mean %.6f +/- %.6f, median %.6f, p99 %.6f, max %.6f; top-1 agreement %.2f %%\n",
                kl.kl.mean(), kl.kl.stderr_of_mean(), kl.kl_quantile(0.5), kl.kl_quantile(0.99), kl.kl_quantile(1.0),
                100.0 * kl.top1_agreement());
  return 0;
}

const CommandRegistration kPerplexity(
    "perplexity", "Perplexity over a text file; KL divergence and top-1 agreement against a saved base run",
    [](CLI::App* app) {
      auto o = std::make_shared<PerplexityOptions>();
      app->add_option("model,--model,-m", o->model, "GGUF file or Hugging Face model directory")->required();
      app->add_option("--file,-f", o->file, "Text file to score")->required();
      app->add_option("--ctx,-c", o->ctx, "Tokens per chunk (the second half of each is scored)")
          ->check(CLI::Range(int64_t{4}, int64_t{1} << 20));
      app->add_option("--chunks", o->chunks, "Chunks to score (0: every whole chunk of the text)")
          ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
      add_device_options(app, o->device, o->dtype, o->cuda_graphs);
      add_quantization_option(app, o->quantization);
      add_load_format_option(app, o->load_format);
      app->add_option("-t,--threads", o->threads, "CPU threads (default: one per core)")->check(CLI::Range(0, 4096));
      app->add_option("--kv-dtype", o->kv_dtype, "KV cache element type: f32, f16, bf16, f8_e4m3 (CUDA)");
      app->add_option("--save-logits", o->save_logits, "Write this run's log-probabilities for a later --kl-base");
      app->add_option("--kl-base", o->kl_base, "A --save-logits file of the base model: report KL divergence and top-1");
      app->add_flag("--json", o->json, "Print the figures as JSON");
      return [o] {
        if (!resolve_device_option(o->device, "perplexity", o->model)) return 2;
        return run_perplexity(*o);
      };
    });

}  // namespace
}  // namespace pagoda::cli
