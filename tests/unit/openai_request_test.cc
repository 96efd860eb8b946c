// Request parser / validator of the OpenAI API (src/api/openai_request.h).
#include <gtest/gtest.h>

#include "api/openai_request.h"

namespace pagoda::api {
namespace {

std::optional<ApiError> chat(const std::string& body, ChatRequest* out = nullptr) {
  ChatRequest tmp;
  return parse_chat_request(body, out ? out : &tmp);
}
std::optional<ApiError> completion(const std::string& body, CompletionRequest* out = nullptr) {
  CompletionRequest tmp;
  return parse_completion_request(body, out ? out : &tmp);
}

TEST(OpenAiRequest, ChatFullParse) {
  ChatRequest r;
  auto e = chat(R"({"model":"m","messages":[{"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
      "max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":-1,"min_p":0.1,"seed":-3,
      "stop":"x","n":2,"logprobs":true,"top_logprobs":3,"stream":true,"stream_options":{"include_usage":true},
      "presence_penalty":1,"frequency_penalty":-1,"repetition_penalty":1.1,"ignore_eos":true,"min_tokens":2,
      "priority":4,"user":"u","some_future_field":{"x":[1,2]}})", &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.options.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.options.temperature, 0.5f);
  EXPECT_EQ(r.options.top_k, 0);
  EXPECT_EQ(*r.options.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(r.options.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.options.n, 2);
  EXPECT_EQ(r.options.logprobs, 3);
  EXPECT_TRUE(r.options.stream);
  EXPECT_TRUE(r.options.include_usage);
  EXPECT_TRUE(r.options.ignore_eos);
  EXPECT_EQ(r.options.min_tokens, 2);
  EXPECT_EQ(r.options.priority, 4);
  EXPECT_TRUE(r.add_generation_prompt);
}

TEST(OpenAiRequest, NullMeansAbsent) {
  ChatRequest r;
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"hi"}],"temperature":null,"stop":null,"max_tokens":null})", &r));
  EXPECT_FLOAT_EQ(r.options.temperature, 1.0f);
  EXPECT_EQ(r.options.max_tokens, -1);
  EXPECT_EQ(r.options.logprobs, -1);
}

TEST(OpenAiRequest, ChatErrorsNameTheParameter) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"messages":"hi"})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({})", "messages"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-1})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":"10"})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1e300})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":99999999999999999999})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":3})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_p":0})", "top_p"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":0})", "n"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":1.5})", "n"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":[1,2]})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})", "stream_options"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"1":5}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"model":5})", "model"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5,"min_tokens":6})", "min_tokens"},
  };
  for (const auto& c : cases) {
    auto e = chat(c.body);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->status, 400) << c.body;
    EXPECT_EQ(e->param, c.param) << c.body << " -> " << e->message;
    EXPECT_EQ(e->type, "invalid_request_error");
  }
}

TEST(OpenAiRequest, MalformedBodies) {
  for (std::string body : {std::string("{"), std::string("[1,2]"), std::string("null"), std::string("\"x\""),
                           std::string("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}"),
                           std::string(100000, '['), std::string("{\"a\":") + std::string(70, '[') + std::string(70, ']') + "}",
                           std::string("")}) {
    auto e = chat(body);
    ASSERT_TRUE(e) << body.substr(0, 40);
    EXPECT_EQ(e->status, 400);
  }
  // Braces inside strings do not count towards the depth limit.
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":")" + std::string(200, '[') + R"("}]})"));
}

TEST(OpenAiRequest, CompletionPromptForms) {
  CompletionRequest r;
  ASSERT_FALSE(completion(R"({"prompt":"hello","max_tokens":3,"echo":true,"logprobs":null})", &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_ids);
  EXPECT_TRUE(r.echo);
  r = {};
  ASSERT_FALSE(completion(R"({"prompt":["a","b","c"]})", &r));
  EXPECT_EQ(r.prompts.size(), 3u);
  r = {};
  ASSERT_FALSE(completion(R"({"prompt":[1,2,3],"logprobs":2})", &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_ids);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.options.logprobs, 2);
  r = {};
  ASSERT_FALSE(completion(R"({"prompt":[[1,2],[3]]})", &r));
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].ids, std::vector<int32_t>{3});
}

TEST(OpenAiRequest, CompletionErrors) {
  for (const char* body : {R"({})", R"({"prompt":5})", R"({"prompt":[]})", R"({"prompt":[1,-2]})", R"({"prompt":[1,"a"]})",
                           R"({"prompt":[[1],[]]})", R"({"prompt":[1, 3000000000]})", R"({"prompt":"x","logprobs":true})",
                           R"({"prompt":"x","logprobs":21})", R"({"prompt":"x","echo":true,"logprobs":1})",
                           R"({"prompt":"x","best_of":3})", R"({"prompt":"x","suffix":"y"})"}) {
    auto e = completion(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400) << body;
  }
}

TEST(OpenAiRequest, TokenizeAndDetokenize) {
  TokenizeRequest t;
  ASSERT_FALSE(parse_tokenize_request(R"({"prompt":"hi"})", &t));
  EXPECT_FALSE(t.is_chat);
  EXPECT_TRUE(t.add_special_tokens);
  TokenizeRequest c;
  ASSERT_FALSE(parse_tokenize_request(R"({"messages":[{"role":"user","content":"x"}]})", &c));
  EXPECT_TRUE(c.is_chat);
  EXPECT_FALSE(c.add_special_tokens);
  DetokenizeRequest d;
  ASSERT_FALSE(parse_detokenize_request(R"({"tokens":[1,2]})", &d));
  EXPECT_EQ(d.tokens.size(), 2u);
  EXPECT_TRUE(parse_detokenize_request(R"({"tokens":"12"})", &d));
}

TEST(OpenAiRequest, ErrorBodyShape) {
  ApiError e = bad_request("bad", "max_tokens");
  auto j = e.to_json();
  EXPECT_EQ(j["error"]["message"], "bad");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_TRUE(j["error"]["code"].is_null());
}

}  // namespace
}  // namespace pagoda::api
