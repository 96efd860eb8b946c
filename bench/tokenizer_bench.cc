// Tokenizer throughput on one core: ~1 MiB of mixed-language text (English prose, C++ and Python
// code, Chinese, Japanese, Korean, Russian, Greek, Arabic, Hindi, emoji, numbers, whitespace runs),
// generated deterministically here (nothing large is committed).
//
//   build/bench/pagoda_kernel_bench --benchmark_filter=Tokenizer
//
// BM_TokenizerEncode/<vocab>        the whole text in one encode() call (MB/s, tokens/s)
// BM_TokenizerEncodeLines/<vocab>   the same text as ~110-byte prompts, one call each (no word cache)
// BM_TokenizerDecode/<vocab>        decode() of the ids of the whole text
// BM_TokenizerStream/<vocab>        StreamingDetokenizer, one push() per id
// Vocabularies: GPT-2 and Llama (SentencePiece) GGUFs and Llama 2's tokenizer.model from ../shared,
// SmolLM2's GGUF from models/ (if fetched), and the Llama 3 / Qwen2 regex tokenizer.json files of
// testdata/tokenizer (GPT-2's first 4000 merges: a smaller vocabulary than the real models).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string repo_dir() {
  std::string here = __FILE__;  // .../<repo>/bench/tokenizer_bench.cc
  for (int up = 0; up < 2; ++up) here = here.substr(0, here.find_last_of('/'));
  return here;
}

const std::map<std::string, std::string>& vocab_paths() {
  static const std::map<std::string, std::string> paths = {
      {"gpt2", repo_dir() + "/../shared/tokenizers/vocab-vectors/ggml-vocab-gpt-2.gguf"},
      {"llama_spm_gguf", repo_dir() + "/../shared/tokenizers/vocab-vectors/ggml-vocab-llama-spm.gguf"},
      {"llama2_model", repo_dir() + "/../shared/tokenizers/llama2/tokenizer.model"},
      {"smollm2", repo_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"},
      {"llama3_regex_4k", repo_dir() + "/testdata/tokenizer/llama3-style"},
      {"qwen2_regex_4k", repo_dir() + "/testdata/tokenizer/qwen2-style"},
  };
  return paths;
}

std::shared_ptr<const pagoda::Tokenizer> get(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const pagoda::Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  auto r = pagoda::Tokenizer::load(vocab_paths().at(name));
  std::shared_ptr<const pagoda::Tokenizer> tok = r.ok() ? *r : nullptr;
  cache[name] = tok;
  return tok;
}

// Deterministic mixed text: sentences drawn from per-script word lists, code blocks, numbers and
// emoji, ~1 MiB. Uses only mt19937's raw output, so it is the same on every platform.
const std::string& mixed_text() {
  static const std::string text = [] {
    const std::vector<std::vector<std::string>> words = {
        {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "model", "token", "inference", "engine",
         "memory", "bandwidth", "they're", "don't", "we'll", "I've", "it's", "attention", "layer", "weights",
         "Pagoda", "HTTP", "request", "server", "latency", "throughput", "cache", "block", "prefix", "batch"},
        {"模型", "推理", "引擎", "内存", "带宽", "我们", "今天", "天气", "很好", "中文", "文本", "处理", "速度"},
        {"東京", "日本語", "ひらがな", "カタカナ", "テキスト", "です", "ます", "こんにちは", "ありがとう"},
        {"한국어", "텍스트", "안녕하세요", "모델", "추론", "속도", "메모리"},
        {"модель", "вывод", "память", "скорость", "привет", "мир", "быстро", "текст", "токен"},
        {"γλώσσα", "μοντέλο", "ταχύτητα", "μνήμη", "κείμενο"},
        {"النموذج", "الذاكرة", "السرعة", "مرحبا", "نص"},
        {"मॉडल", "गति", "स्मृति", "नमस्ते", "पाठ"},
    };
    const std::vector<std::string> code = {
        "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
        "def tokenize(text: str) -> list[int]:\n    return [vocab[w] for w in text.split()]\n",
        "    if (status.ok()) return value;  // fast path\n",
        "std::vector<int32_t> ids = tok->encode(prompt, {.add_special = true});\n",
        "<div class=\"row\"><span id=\"x42\">&nbsp;</span></div>\n",
        "SELECT id, name FROM users WHERE created_at > '2024-01-01' ORDER BY id;\n",
    };
    const std::vector<std::string> emoji = {"🦙", "🚀", "😀", "👍🏽", "❤️", "👨‍👩‍👧", "✅", "🎉"};
    std::mt19937 rng(42);
    std::string s;
    while (s.size() < (1u << 20)) {
      const uint32_t kind = rng() % 10;
      if (kind < 2) {
        s += code[rng() % code.size()];
        continue;
      }
      const auto& list = words[kind < 5 ? 0 : 1 + rng() % (words.size() - 1)];
      const bool spaced = &list == &words[0] || &list == &words[4] || &list == &words[5] || &list == &words[6] ||
                          &list == &words[7] || &list == &words[3];
      const int n = 4 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) {
        if (i > 0 && spaced) s += ' ';
        std::string w = list[rng() % list.size()];
        if (i == 0 && spaced && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 32);
        s += w;
        const uint32_t extra = rng() % 20;
        if (extra == 0 || extra == 1) s += ' ';
        if (extra == 0) s += std::to_string(rng() % 100000);
        if (extra == 1) s += emoji[rng() % emoji.size()];
        if (extra == 2) s += ",";
      }
      s += rng() % 3 == 0 ? ".\n" : (rng() % 2 ? ". " : "!  ");
      if (rng() % 15 == 0) s += "\n\n    ";
    }
    return s;
  }();
  return text;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = std::min(text.size(), pos + 110);
    while (end < text.size() && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) ++end;  // whole characters
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

void BM_TokenizerEncode(benchmark::State& state, const std::string& name) {
  auto tok = get(name);
  if (!tok) return state.SkipWithError(("cannot load " + vocab_paths().at(name)).c_str());
  const std::string& text = mixed_text();
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tok->encode(text, {.add_special = false});
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["bytes/token"] = static_cast<double>(text.size()) / static_cast<double>(tokens);
}

void BM_TokenizerEncodeLines(benchmark::State& state, const std::string& name) {
  auto tok = get(name);
  if (!tok) return state.SkipWithError(("cannot load " + vocab_paths().at(name)).c_str());
  static const std::vector<std::string> prompts = lines(mixed_text());
  size_t tokens = 0;
  std::vector<int32_t> ids;
  for (auto _ : state) {
    tokens = 0;
    for (const std::string& p : prompts) {
      ids.clear();
      tok->encode_append(p, {.add_special = false}, &ids);
      tokens += ids.size();
    }
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * mixed_text().size()));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens * state.iterations()), benchmark::Counter::kIsRate);
}

void BM_TokenizerDecode(benchmark::State& state, const std::string& name) {
  auto tok = get(name);
  if (!tok) return state.SkipWithError(("cannot load " + vocab_paths().at(name)).c_str());
  const auto ids = tok->encode(mixed_text(), {.add_special = false});
  for (auto _ : state) {
    std::string text = tok->decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * mixed_text().size()));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(ids.size() * state.iterations()), benchmark::Counter::kIsRate);
}

void BM_TokenizerStream(benchmark::State& state, const std::string& name) {
  auto tok = get(name);
  if (!tok) return state.SkipWithError(("cannot load " + vocab_paths().at(name)).c_str());
  const auto ids = tok->encode(mixed_text(), {.add_special = false});
  for (auto _ : state) {
    pagoda::StreamingDetokenizer s(tok);
    size_t n = 0;
    for (int32_t id : ids) n += s.push(id).size();
    n += s.flush().size();
    benchmark::DoNotOptimize(n);
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(ids.size() * state.iterations()), benchmark::Counter::kIsRate);
}

const bool kRegistered = [] {
  for (const auto& [name, path] : vocab_paths()) {
    benchmark::RegisterBenchmark(("BM_TokenizerEncode/" + name).c_str(), BM_TokenizerEncode, name)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_TokenizerEncodeLines/" + name).c_str(), BM_TokenizerEncodeLines, name)->Unit(benchmark::kMillisecond);
  }
  for (const char* name : {"gpt2", "llama_spm_gguf"}) {
    benchmark::RegisterBenchmark((std::string("BM_TokenizerDecode/") + name).c_str(), BM_TokenizerDecode, std::string(name))->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_TokenizerStream/") + name).c_str(), BM_TokenizerStream, std::string(name))->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
