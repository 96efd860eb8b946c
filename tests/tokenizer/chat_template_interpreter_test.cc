// Unit tests of the chat-template interpreter beyond the transformers references
// (chat_template_test.cc): error positions, limits and hostile input, the loaders.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "loader/gguf.h"
#include "template/chat_template.h"
#include "template/value.h"

namespace pagoda {
namespace {

const nlohmann::ordered_json kMessages = nlohmann::ordered_json::parse(
    R"([{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}])");

Result<std::string> render(const std::string& src, ChatTemplateOptions opts = {}) {
  auto t = ChatTemplate::parse(src);
  if (!t.ok()) return t.status();
  return t->render(kMessages, opts);
}

TEST(chat_template_errors, SyntaxErrorsNameLineAndColumn) {
  auto t = ChatTemplate::parse("line one\n{% if x %}\n  {{ 'a' + }}\n{% endif %}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("at 3:12:"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("unexpected 'end of print statement'"), std::string::npos);

  t = ChatTemplate::parse("{% for m in messages %}\nno end");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("'endfor'"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("opened at 1:1"), std::string::npos) << t.status().message();

  t = ChatTemplate::parse("ok\n  {{ x | no_such_filter }}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("at 2:10: no filter named 'no_such_filter'"), std::string::npos)
      << t.status().message();

  t = ChatTemplate::parse("é {{ 'unterminated }}");  // columns count code points
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("at 1:6:"), std::string::npos) << t.status().message();

  for (const char* bad : {"{% endif %}", "{{ (1, 2 }}", "{# open", "{% raw %}x", "{{ 1 +* 2 }}", "{% set %}",
                          "{% macro m(a=1, b) %}{% endmacro %}", "{{ a.b. }}", "{% for in x %}{% endfor %}",
                          "{% if %}{% endif %}", "{{ x is }}", "{{ 'a' 'b }}", "{{ 99999999999999999999999 }}"}) {
    auto r = ChatTemplate::parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(" at "), std::string::npos) << r.status().message();
    }
  }
}

TEST(chat_template_errors, RaiseExceptionKeepsMessageAndPosition) {
  auto r = render("{% if messages[0].role == 'system' %}\n  {{- raise_exception('System role not supported') }}\n{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "chat template raised an exception at 2:7: System role not supported");
}

TEST(chat_template_errors, RuntimeErrorsNameThePosition) {
  auto r = render("{{ messages[0].content }}\n{{ messages[0].nope.deeper }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at 2:20: 'dict object' has no attribute 'nope'"), std::string::npos)
      << r.status().message();
  r = render("{{ 'a' + 1 }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("can only concatenate str (not \"int\") to str"), std::string::npos);
  r = render("{{ undefined_function() }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'undefined_function' is undefined"), std::string::npos);
}

TEST(chat_template_errors, BadMessagesAreErrorsNotCrashes) {
  auto t = ChatTemplate::parse("{{ messages[0].content }}");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(nlohmann::ordered_json::array(), {}).ok());  // transformers refuses empty chats
  EXPECT_FALSE(t->render(nlohmann::ordered_json::parse(R"({"role": "user"})"), {}).ok());
  EXPECT_FALSE(t->render(nlohmann::ordered_json::parse(R"(["not a dict"])"), {}).ok());
  ChatTemplateOptions o;
  o.extra_context = nlohmann::ordered_json::array();
  EXPECT_FALSE(t->render(kMessages, o).ok());
  // Deeply nested input is refused, not recursed into without bound.
  std::string deep = "[{\"role\": \"user\", \"content\": ";
  for (int i = 0; i < 1000; ++i) deep += "[";
  for (int i = 0; i < 1000; ++i) deep += "]";
  deep += "}]";
  auto r = t->render(nlohmann::ordered_json::parse(deep), {});
  EXPECT_FALSE(r.ok());
}

TEST(chat_template_limits, RunawayTemplatesStop) {
  ChatTemplateOptions o;
  o.limits.max_steps = 100000;
  o.limits.max_output_bytes = 1 << 20;
  // Loop steps
  auto r = render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  // Output size
  r = render("{% for i in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  // String growth
  r = render("{{ 'abc' * 100000000 }}", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  r = render("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  // List growth
  r = render("{{ [1, 2, 3] * 10000000 }}", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  // Recursion
  r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("nested deeper"), std::string::npos);
  // Nested containers built at run time
  r = render("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  // A namespace cannot be stored inside itself, directly or through a list or a bound method
  // (it would be a reference cycle).
  for (const char* cyc : {"{% set ns = namespace() %}{% set ns.me = ns %}",
                          "{% set ns = namespace() %}{% set ns.l = [1, [ns]] %}",
                          "{% set ns = namespace() %}{% set ns.f = [ns].count %}",
                          "{% set ns = namespace() %}{% set ns2 = namespace(inner=ns) %}"}) {
    r = render(cyc, o);
    EXPECT_FALSE(r.ok()) << cyc;
  }
  // Integer overflow is an error (Python would use a big integer).
  r = render("{{ 2 ** 64 }}", o);
  EXPECT_FALSE(r.ok());
}

TEST(chat_template_limits, DeepNestingInSourceIsRejected) {
  for (const std::string& open : {std::string("("), std::string("["), std::string("-"), std::string("not ")}) {
    std::string src = "{{ ";
    for (int i = 0; i < 5000; ++i) src += open;
    src += "1";
    auto t = ChatTemplate::parse(src + " }}");
    EXPECT_FALSE(t.ok()) << open;
  }
  std::string src;
  for (int i = 0; i < 2000; ++i) src += "{% if true %}";
  for (int i = 0; i < 2000; ++i) src += "{% endif %}";
  auto t = ChatTemplate::parse(src);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
}

TEST(chat_template_limits, GarbageNeverCrashes) {
  // Byte soup and truncations of a real template: parse and render must return, ok or not.
  const std::string real =
      "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' }}{%- if message.content is string "
      "%}{{ message.content | trim }}{%- else %}{{ message.content | tojson(indent=2) }}{%- endif %}"
      "{%- set ns = namespace(x=loop.index) %}{{ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt "
      "%}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  uint32_t seed = 12345;
  auto rnd = [&]() { return seed = seed * 1664525u + 1013904223u; };
  for (size_t cut = 0; cut <= real.size(); ++cut) {
    auto t = ChatTemplate::parse(real.substr(0, cut));
    if (t.ok()) (void)t->render(kMessages, {});
  }
  const std::string alphabet = "{}%#-+()[]|.,:~'\"\\ \nabcxyz01=!<>*/ifendforsetinnotis";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = real;
    int edits = 1 + rnd() % 8;
    for (int e = 0; e < edits && !s.empty(); ++e) {
      size_t pos = rnd() % s.size();
      switch (rnd() % 3) {
        case 0: s[pos] = alphabet[rnd() % alphabet.size()]; break;
        case 1: s.erase(pos, 1 + rnd() % 4); break;
        default: s.insert(pos, 1, alphabet[rnd() % alphabet.size()]);
      }
    }
    auto t = ChatTemplate::parse(s);
    if (t.ok()) (void)t->render(kMessages, {});
  }
  SUCCEED();
}

TEST(chat_template_values, PythonFloatRepr) {
  // Values observed from Python's repr() in the feature references.
  EXPECT_EQ(tmpl::py_float_repr(1.0), "1.0");
  EXPECT_EQ(tmpl::py_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(tmpl::py_float_repr(1e16), "1e+16");
  EXPECT_EQ(tmpl::py_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(tmpl::py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(tmpl::py_float_repr(0.00001), "1e-05");
  EXPECT_EQ(tmpl::py_float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(tmpl::py_float_repr(-0.0), "-0.0");
  EXPECT_EQ(tmpl::py_float_repr(123456789.123), "123456789.123");
}

// --- loaders -----------------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("pagoda_tmpl_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

TEST(chat_template_loader, HfDirectoryVariants) {
  TempDir d;
  EXPECT_EQ(chat_template_from_hf_dir(d.path()).status().code(), StatusCode::kNotFound);
  d.write("tokenizer_config.json",
          R"({"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": "</s>",
              "chat_template": [{"name": "tool_use", "template": "T{{ bos_token }}"},
                                {"name": "default", "template": "D{{ eos_token }}"}]})");
  auto t = chat_template_from_hf_dir(d.path());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(*t->render(kMessages, {}), "D</s>");
  t = chat_template_from_hf_dir(d.path(), /*has_tools=*/true);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->render(kMessages, {}), "T<s>");
  // chat_template.jinja takes precedence over tokenizer_config.json
  d.write("chat_template.jinja", "J{{ messages | length }}\n");
  t = load_chat_template(d.path());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->render(kMessages, {}), "J2");
  // Options override the loaded special tokens.
  ChatTemplateOptions o;
  o.eos_token = "<eos>";
  d.write("chat_template.jinja", "{{ eos_token }}");
  t = load_chat_template(d.path());
  EXPECT_EQ(*t->render(kMessages, o), "<eos>");

  TempDir bad;
  bad.write("tokenizer_config.json", "{not json");
  EXPECT_FALSE(chat_template_from_hf_dir(bad.path()).ok());
  TempDir nodefault;
  nodefault.write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  EXPECT_EQ(chat_template_from_hf_dir(nodefault.path()).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(load_chat_template("/nonexistent/path/model.gguf").ok());
}

// A minimal GGUF v3 with tokenizer metadata and no tensors.
std::vector<uint8_t> make_gguf(bool with_template) {
  std::vector<uint8_t> b;
  auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); };
  auto u64 = [&](uint64_t v) { for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); };
  auto str = [&](const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
  };
  for (char c : std::string("GGUF")) b.push_back(static_cast<uint8_t>(c));
  u32(3);
  u64(0);                      // tensors
  u64(with_template ? 4 : 3);  // metadata entries
  str("tokenizer.ggml.tokens");
  u32(9);  // array
  u32(8);  // of strings
  u64(3);
  str("<unk>");
  str("<BOS>");
  str("<EOS>");
  str("tokenizer.ggml.bos_token_id");
  u32(4);
  u32(1);
  str("tokenizer.ggml.eos_token_id");
  u32(4);
  u32(2);
  if (with_template) {
    str("tokenizer.chat_template");
    u32(8);
    str("{{ bos_token }}{% for m in messages %}[{{ m.role }}]{% endfor %}{{ eos_token }}");
  }
  return b;
}

TEST(chat_template_loader, GgufMetadata) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(make_gguf(true));
  auto g = GgufFile::parse(*bytes, bytes);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto t = chat_template_from_gguf(**g);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->bos_token(), std::optional<std::string>("<BOS>"));
  EXPECT_EQ(t->eos_token(), std::optional<std::string>("<EOS>"));
  EXPECT_EQ(*t->render(kMessages, {}), "<BOS>[system][user]<EOS>");

  auto bytes2 = std::make_shared<std::vector<uint8_t>>(make_gguf(false));
  auto g2 = GgufFile::parse(*bytes2, bytes2);
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(chat_template_from_gguf(**g2).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace pagoda
