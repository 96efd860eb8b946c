// libFuzzer target: OpenAI request bodies -> validated requests (src/api/openai_request.h).
// Every body must either parse into a request or produce a 4xx ApiError; the parsed values must
// satisfy the validator's own ranges. Any crash, sanitizer report or failed check is a finding.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "api/openai_request.h"
#include "api/sse.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
void check_options(const pagoda::api::GenerationOptions& o) {
  check(o.n >= 1 && o.n <= pagoda::api::kMaxN);
  check(o.max_tokens == -1 || o.max_tokens >= 1);
  check(o.temperature >= 0 && o.temperature <= 2);
  check(o.top_p > 0 && o.top_p <= 1);
  check(o.logprobs >= -1 && o.logprobs <= pagoda::api::kMaxLogprobs);
  check(o.top_k >= 0);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the endpoint; the rest is the body.
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      pagoda::api::ChatRequest r;
      if (auto e = pagoda::api::parse_chat_request(body, &r)) {
        check(e->status == 400);
        (void)e->body();
      } else {
        check(!r.messages.empty());
        check_options(r.options);
      }
      break;
    }
    case 1: {
      pagoda::api::CompletionRequest r;
      if (auto e = pagoda::api::parse_completion_request(body, &r)) {
        check(e->status == 400);
        (void)e->body();
      } else {
        check(!r.prompts.empty());
        for (const auto& p : r.prompts) check(!p.is_ids || !p.ids.empty());
        check_options(r.options);
      }
      break;
    }
    case 2: {
      pagoda::api::TokenizeRequest r;
      (void)pagoda::api::parse_tokenize_request(body, &r);
      pagoda::api::DetokenizeRequest d;
      (void)pagoda::api::parse_detokenize_request(body, &d);
      break;
    }
    default: {
      const std::string ev = pagoda::api::sse_event(body);
      check(ev.size() >= body.size() + 8 && ev.ends_with("\n\n"));
      break;
    }
  }
  return 0;
}
