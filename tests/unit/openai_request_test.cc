// Request parser / validator of the OpenAI API (src/api/openai_request.h).
#include <gtest/gtest.h>

#include <algorithm>

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
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"1":500}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"1":-100.5}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"a":1}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"-1":1}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"99999999999":1}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"1":"big"}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":[1]})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":3,"best_of":2})", "best_of"},
      {R"({"messages":[{"role":"user","content":"x"}],"best_of":2,"stream":true})", "best_of"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"continuous_usage_stats":true}})",
       "stream_options"},
      {R"({"messages":[{"role":"user","content":"x"}],"truncate_prompt_tokens":0})", "truncate_prompt_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"truncate_prompt_tokens":-2})", "truncate_prompt_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"add_special_tokens":1})", "add_special_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"documents":"d"})", "documents"},
      {R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":1})", "reasoning_effort"},
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

// OpenAI's legacy echo + logprobs asks for the prompt's logprobs; vLLM's prompt_logprobs on both
// endpoints (null: not given).
TEST(OpenAiRequest, PromptLogprobs) {
  CompletionRequest r;
  ASSERT_FALSE(completion(R"({"prompt":"x","echo":true,"logprobs":3})", &r));
  EXPECT_TRUE(r.echo_logprobs);
  EXPECT_EQ(r.options.logprobs, 3);
  EXPECT_EQ(r.options.prompt_logprobs, -1);
  r = {};
  ASSERT_FALSE(completion(R"({"prompt":"x","echo":true})", &r));
  EXPECT_FALSE(r.echo_logprobs);
  r = {};
  ASSERT_FALSE(completion(R"({"prompt":"x","prompt_logprobs":0})", &r));
  EXPECT_EQ(r.options.prompt_logprobs, 0);
  EXPECT_FALSE(r.echo_logprobs);
  r = {};
  ASSERT_FALSE(completion(R"({"prompt":"x","prompt_logprobs":null})", &r));
  EXPECT_EQ(r.options.prompt_logprobs, -1);
  ChatRequest c;
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"x"}],"prompt_logprobs":20})", &c));
  EXPECT_EQ(c.options.prompt_logprobs, 20);
  auto e = chat(R"({"messages":[{"role":"user","content":"x"}],"prompt_logprobs":21})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt_logprobs");
}

TEST(OpenAiRequest, CompletionErrors) {
  for (const char* body : {R"({})", R"({"prompt":5})", R"({"prompt":[]})", R"({"prompt":[1,-2]})", R"({"prompt":[1,"a"]})",
                           R"({"prompt":[[1],[]]})", R"({"prompt":[1, 3000000000]})", R"({"prompt":"x","logprobs":true})",
                           R"({"prompt":"x","logprobs":21})", R"({"prompt":"x","prompt_logprobs":21})",
                           R"({"prompt":"x","prompt_logprobs":-1})", R"({"prompt":"x","prompt_logprobs":true})",
                           R"({"prompt":"x","best_of":1,"n":2})", R"({"prompt":"x","suffix":5})",
                           R"({"prompt":"x","best_of":3,"stream":true})"}) {
    auto e = completion(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400) << body;
  }
}

TEST(OpenAiRequest, LogitBiasBestOfAndVllmExtras) {
  CompletionRequest r;
  auto e = completion(R"({"prompt":"x","logit_bias":{"5":-100,"17":2.5,"0":100},"n":2,"best_of":4,"suffix":"end",
      "truncate_prompt_tokens":7,"add_special_tokens":false,"return_tokens_as_token_ids":true})", &r);
  ASSERT_FALSE(e) << e->message;
  auto bias = r.options.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{0, 100.0f}, {5, -100.0f}, {17, 2.5f}}));
  EXPECT_EQ(r.options.n, 2);
  EXPECT_EQ(r.options.best_of, 4);
  EXPECT_EQ(r.suffix, "end");
  EXPECT_EQ(r.options.truncate_prompt_tokens, 7);
  ASSERT_TRUE(r.options.add_special_tokens.has_value());
  EXPECT_FALSE(*r.options.add_special_tokens);
  EXPECT_TRUE(r.options.return_tokens_as_token_ids);
  // best_of defaults to n; an empty logit_bias is no bias.
  r = {};
  ASSERT_FALSE(completion(R"({"prompt":"x","n":3,"logit_bias":{}})", &r));
  EXPECT_EQ(r.options.best_of, 3);
  EXPECT_TRUE(r.options.logit_bias.empty());
  EXPECT_FALSE(r.options.add_special_tokens.has_value());
  // continuous usage needs include_usage; both given: both set.
  ChatRequest c;
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"x"}],"stream":true,
      "stream_options":{"include_usage":true,"continuous_usage_stats":true},"documents":[{"title":"t"}],
      "reasoning_effort":"low","chat_template_kwargs":{"enable_thinking":false}})", &c));
  EXPECT_TRUE(c.options.include_usage);
  EXPECT_TRUE(c.options.continuous_usage);
  EXPECT_EQ(c.chat_template_kwargs["documents"][0]["title"], "t");
  EXPECT_EQ(c.chat_template_kwargs["reasoning_effort"], "low");
  EXPECT_EQ(c.chat_template_kwargs["enable_thinking"], false);
}

TEST(OpenAiRequest, KnownFieldsNotHonouredAre400s) {
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  // Given a real value: a 400 naming the field (chat and completions alike where both have it).
  for (const char* field : {R"("use_beam_search":true)", R"("length_penalty":0.5)",
                            R"("allowed_token_ids":[1,2])", R"("bad_words":["x"])", R"("spaces_between_special_tokens":false)",
                            R"("logits_processors":["a.b"])", R"("vllm_xargs":{"k":1})", R"("return_token_ids":true)",
                            R"("kv_transfer_params":{"a":1})", R"("mm_processor_kwargs":{"a":1})",
                            R"("prompt_embeds":"AAAA")"}) {
    const std::string name = std::string(field).substr(1, std::string(field).find('"', 1) - 1);
    for (bool is_chat : {true, false}) {
      const std::string body = is_chat ? "{" + msgs + "," + field + "}" : std::string(R"({"prompt":"x",)") + field + "}";
      auto e = is_chat ? chat(body) : completion(body);
      ASSERT_TRUE(e) << body;
      EXPECT_EQ(e->status, 400);
      EXPECT_EQ(e->param, name) << body;
      EXPECT_EQ(e->code, "unsupported_parameter");
      EXPECT_NE(e->message.find("not supported"), std::string::npos) << e->message;
    }
  }
  for (const char* field : {R"("echo":true)", R"("chat_template":"{{x}}")", R"("functions":[{"name":"f"}])",
                            R"("function_call":"auto")", R"("audio":{"voice":"x"})", R"("modalities":["text","audio"])",
                            R"("web_search_options":{"a":1})", R"("verbosity":"low")"}) {
    auto e = chat("{" + msgs + "," + field + "}");
    ASSERT_TRUE(e) << field;
    EXPECT_EQ(e->code, "unsupported_parameter") << field;
  }
  // Their defaults (and fields that do not change the output) are accepted.
  ASSERT_FALSE(chat("{" + msgs + R"(,"use_beam_search":false,"length_penalty":1.0,"spaces_between_special_tokens":true,
      "modalities":["text"],"allowed_token_ids":null,"bad_words":[],"vllm_xargs":{},"echo":false,"functions":[],
      "store":true,"metadata":{"a":"b"},"service_tier":"auto","prediction":{"type":"content","content":"x"},
      "cache_salt":"s","request_id":"r","prompt_cache_key":"k","safety_identifier":"s"})"));
  ASSERT_FALSE(completion(R"({"prompt":"x","echo":true,"prompt_logprobs":null,"length_penalty":1})"));
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
