// Chat templates against Hugging Face transformers: every expected string and error below was
// produced by transformers' apply_chat_template (tools/make_chat_template_refs.py) and is compared
// byte for byte.
//   models.json    real model templates (Llama 3/3.1/3.2/3.3, Qwen2.5/3, SmolLM2/3, Mistral v0.1,
//                  Mixtral, Mistral-Nemo, Gemma 1/2, Phi-3/3.5, Hermes-2-Pro, DeepSeek-R1-distill,
//                  Granite 3.3, Functionary 3.2, gpt-oss) x conversations x add_generation_prompt
//   features.json  one small template per interpreter feature
//   hf_dir_refs.json  the hf_dir/ fixture loaded as a model directory
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <atomic>
#include <map>
#include <thread>

#include "loader/gguf.h"
#include "template/chat_template.h"
#include "test_paths.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

std::string refs_dir() { return test::testdata_dir() + "/chat_templates"; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const Json& load_json(const std::string& name) {
  static std::map<std::string, Json> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::string text = read_file(refs_dir() + "/" + name);
    it = cache.emplace(name, text.empty() ? Json() : Json::parse(text)).first;
  }
  return it->second;
}

// The clock the references were rendered with (tools/make_chat_template_refs.py REF_NOW).
std::tm ref_now() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 10;
  tm.tm_min = 30;
  tm.tm_sec = 5;
  tm.tm_wday = 5;   // Friday
  tm.tm_yday = 207;  // 0-based day of the year
  return tm;
}

std::optional<std::string> opt_string(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  return std::nullopt;
}

// Checks one case: the rendering equals "expected", or fails when the reference failed (with the
// same message when the template called raise_exception).
void check_case(const ChatTemplate& t, const Json& c, const ChatTemplateOptions& opts) {
  auto r = t.render(c["messages"], opts);
  if (c.contains("expected")) {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, c["expected"].get<std::string>());
  } else {
    ASSERT_FALSE(r.ok()) << "rendered, but transformers raised " << c["error_type"].get<std::string>() << ": "
                         << c["error"].get<std::string>() << "\nwe rendered:\n"
                         << *r;
    if (c["error_type"] == "TemplateError") {
      EXPECT_NE(r.status().message().find("raised an exception"), std::string::npos) << r.status().to_string();
      EXPECT_NE(r.status().message().find(c["error"].get<std::string>()), std::string::npos) << r.status().to_string();
    }
  }
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  const Json& refs = load_json("models.json");
  if (refs.is_object())
    for (const auto& t : refs["templates"]) names.push_back(t["name"].get<std::string>());
  return names;
}

class ModelTemplateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelTemplateTest, MatchesTransformers) {
  const Json& refs = load_json("models.json");
  const Json* entry = nullptr;
  for (const auto& t : refs["templates"])
    if (t["name"] == GetParam()) entry = &t;
  ASSERT_NE(entry, nullptr);
  std::string source = read_file(refs_dir() + "/" + (*entry)["file"].get<std::string>());
  ASSERT_FALSE(source.empty());
  auto t = ChatTemplate::parse(source);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  int checked = 0;
  for (const auto& c : (*entry)["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    ChatTemplateOptions opts;
    opts.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    opts.bos_token = opt_string((*entry)["bos_token"]);
    opts.eos_token = opt_string((*entry)["eos_token"]);
    opts.tools = c["tools"];
    opts.extra_context = c["extra_context"];
    opts.now = ref_now();
    check_case(*t, c, opts);
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

INSTANTIATE_TEST_SUITE_P(chat_template_models, ModelTemplateTest, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n;
                           for (char ch : info.param) n += isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

TEST(chat_template_refs, AllReferenceFilesPresent) {
  EXPECT_GE(model_names().size(), 15u);
  EXPECT_TRUE(load_json("features.json").is_object());
  EXPECT_TRUE(load_json("hf_dir_refs.json").is_object());
}

TEST(chat_template_refs, FeatureTemplatesMatchTransformers) {
  const Json& refs = load_json("features.json");
  ASSERT_TRUE(refs.is_object());
  int checked = 0;
  for (const auto& c : refs["cases"]) {
    const std::string src = c["template"].get<std::string>();
    SCOPED_TRACE("feature " + std::to_string(c["id"].get<int>()) + ": " + src);
    ChatTemplateOptions opts;
    opts.bos_token = "<s>";
    opts.eos_token = "</s>";
    opts.extra_context = refs["context"];
    opts.now = ref_now();
    auto t = ChatTemplate::parse(src);
    if (!t.ok()) {
      EXPECT_TRUE(c.contains("error")) << "we failed to parse: " << t.status().to_string();
      ++checked;
      continue;
    }
    Json case_with_messages = c;
    case_with_messages["messages"] = refs["messages"];
    check_case(*t, case_with_messages, opts);
    ++checked;
  }
  EXPECT_GE(checked, 300);
}

TEST(chat_template_refs, HfDirectoryFixture) {
  const Json& refs = load_json("hf_dir_refs.json");
  ASSERT_TRUE(refs.is_object());
  for (const auto& c : refs["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto t = chat_template_from_hf_dir(refs_dir() + "/hf_dir", !c["tools"].is_null());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->bos_token(), std::optional<std::string>("<|begin_of_text|>"));
    EXPECT_EQ(t->eos_token(), std::optional<std::string>("<|eot_id|>"));
    ChatTemplateOptions opts;
    opts.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    opts.tools = c["tools"];
    opts.now = ref_now();
    check_case(*t, c, opts);
  }
}

TEST(chat_template_refs, SmolLM2GgufCarriesItsTemplate) {
  std::string path = test::smollm2_path();
  if (path.empty()) GTEST_SKIP() << "models/SmolLM2-135M-Instruct.Q4_1.gguf not fetched (scripts/fetch_models.sh)";
  auto gguf = GgufFile::open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  auto t = chat_template_from_gguf(**gguf);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->source(), read_file(refs_dir() + "/templates/smollm2-135m-instruct.jinja"));
  EXPECT_EQ(t->bos_token(), std::optional<std::string>("<|im_start|>"));
  EXPECT_EQ(t->eos_token(), std::optional<std::string>("<|im_end|>"));
  for (const auto& entry : load_json("models.json")["templates"]) {
    if (entry["name"] != "smollm2-135m-instruct") continue;
    for (const auto& c : entry["cases"]) {
      SCOPED_TRACE(c["name"].get<std::string>());
      ChatTemplateOptions opts;  // bos/eos come from the GGUF
      opts.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      opts.tools = c["tools"];
      opts.extra_context = c["extra_context"];
      check_case(*t, c, opts);
    }
  }
}

TEST(chat_template_refs, AcceptsUnorderedJson) {
  // nlohmann::json (sorted keys) works too when key order does not matter to the template.
  for (const auto& entry : load_json("models.json")["templates"]) {
    if (entry["name"] != "qwen2.5-7b-instruct") continue;
    auto t = ChatTemplate::parse(read_file(refs_dir() + "/" + entry["file"].get<std::string>()));
    ASSERT_TRUE(t.ok());
    for (const auto& c : entry["cases"]) {
      if (c["name"] != "multi_turn+gen") continue;
      ChatTemplateOptions opts;
      opts.add_generation_prompt = true;
      opts.eos_token = "<|im_end|>";
      opts.extra_context = nlohmann::json::object();
      nlohmann::json unordered = nlohmann::json::parse(c["messages"].dump());
      auto r = t->render(unordered, opts);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(*r, c["expected"].get<std::string>());
      return;
    }
  }
  FAIL() << "qwen2.5 multi_turn+gen reference not found";
}

TEST(chat_template_refs, RendersConcurrently) {
  const Json& refs = load_json("models.json");
  ASSERT_TRUE(refs.is_object());
  const Json& entry = refs["templates"][1];  // llama-3.1: tojson, namespaces, many branches
  auto t = ChatTemplate::parse(read_file(refs_dir() + "/" + entry["file"].get<std::string>()));
  ASSERT_TRUE(t.ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&]() {
      for (int rep = 0; rep < 5; ++rep) {
        for (const auto& c : entry["cases"]) {
          if (!c.contains("expected")) continue;
          ChatTemplateOptions opts;
          opts.add_generation_prompt = c["add_generation_prompt"].get<bool>();
          opts.bos_token = opt_string(entry["bos_token"]);
          opts.eos_token = opt_string(entry["eos_token"]);
          opts.tools = c["tools"];
          opts.extra_context = c["extra_context"];
          opts.now = ref_now();
          auto r = t->render(c["messages"], opts);
          if (!r.ok() || *r != c["expected"].get<std::string>()) ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace pagoda
