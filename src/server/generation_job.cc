#include "server/generation_job.h"

#include "api/sse.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>

namespace pagoda::server {

using ojson = nlohmann::ordered_json;

std::string dump_json(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }
std::string dump_json(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

namespace {
// A token piece as JSON text plus its raw bytes (OpenAI's `bytes`).
ojson bytes_of(const std::string& piece) {
  ojson b = ojson::array();
  for (unsigned char c : piece) b.push_back(static_cast<int>(c));
  return b;
}
// The piece as a valid-UTF-8 string (round trip through the replacing dumper).
std::string printable(const std::string& piece) {
  return ojson::parse(dump_json(ojson(piece))).get<std::string>();
}
}  // namespace

GenerationJob::GenerationJob(ServingContext& ctx, JobSpec spec, std::vector<std::shared_ptr<RequestStream>> streams,
                             std::vector<std::string> engine_ids, std::unique_ptr<ServingContext::Ticket> ticket)
    : ctx_(ctx),
      spec_(std::move(spec)),
      streams_(std::move(streams)),
      engine_ids_(std::move(engine_ids)),
      ticket_(std::move(ticket)),
      choices_(streams_.size() * spec_.best_of),
      prompt_tokens_(streams_.size(), 0),
      cached_tokens_(streams_.size(), 0) {
  for (const auto& id : engine_ids_) ctx_.track(id);
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    if (spec_.tool_format)
      c.tools = std::make_unique<api::ToolCallParser>(*spec_.tool_format, spec_.parallel_tool_calls,
                                                      "call_" + spec_.id.substr(spec_.id.find('-') + 1) + "_" + std::to_string(i) + "_");
    if (!spec_.chat && spec_.logprobs >= 0)
      c.logprobs = ojson{{"tokens", ojson::array()}, {"token_logprobs", ojson::array()},
                         {"top_logprobs", ojson::array()}, {"text_offset", ojson::array()}};
    else if (spec_.chat && spec_.logprobs >= 0)
      c.logprobs = ojson{{"content", ojson::array()}};
  }
  for (size_t p = 0; p < spec_.echo_texts.size() && p < streams_.size(); ++p)
    for (int32_t s = 0; s < spec_.best_of; ++s) choices_[p * spec_.best_of + s].text_offset = spec_.echo_texts[p].size();
}

GenerationJob::~GenerationJob() {
  for (auto& s : streams_) s->set_notify(nullptr);
  if (!complete_) {
    for (const auto& id : engine_ids_) ctx_.engine().cancel(id);
    finish_all();
  }
  for (const auto& id : engine_ids_) ctx_.untrack(id);
  if (ctx_.options().access_log) {
    AccessLogEntry e = spec_.access;
    const ojson u = usage_json();
    e.status = 200;
    e.prompt_tokens = u["prompt_tokens"].get<int64_t>();
    e.completion_tokens = u["completion_tokens"].get<int64_t>();
    e.latency_s = ServingContext::now() - spec_.start;
    e.stream = spec_.stream;
    e.aborted = aborted_;
    write_access_log(e);
  }
}

void GenerationJob::attach(std::function<void()> wake) {
  for (auto& s : streams_) s->set_notify(wake);
}

void GenerationJob::abort() {
  if (aborted_ || complete_) return;
  aborted_ = true;
  for (auto& s : streams_) s->set_notify(nullptr);
  for (const auto& id : engine_ids_) ctx_.engine().cancel(id);
  finish_all();
}

// Records metrics for sequences that never reported their end (aborted by the client) and hands
// the token count to the ticket. Idempotent.
void GenerationJob::finish_all() {
  if (complete_) return;
  complete_ = true;
  int64_t used = 0;
  for (size_t p = 0; p < prompt_tokens_.size(); ++p) used += prompt_tokens_[p];
  for (auto& c : choices_) {
    used += c.num_output_tokens;
    if (!c.finished) {
      c.finished = true;
      c.timings.finish_reason = "abort";
      // The engine's end time is not known here: the last output seen stands in for it.
      c.timings.finished = c.timings.token_times.empty() ? c.timings.arrival : c.timings.token_times.back();
      ctx_.metrics().record_sequence(c.timings);
    }
  }
  if (ticket_) ticket_->set_used_tokens(used);
  ticket_.reset();
}

ojson GenerationJob::chunk_head() const {
  ojson j;
  j["id"] = spec_.id;
  j["object"] = spec_.chat ? "chat.completion.chunk" : "text_completion";
  j["created"] = spec_.created;
  j["model"] = spec_.model;
  return j;
}

ojson GenerationJob::logprobs_json(const RequestOutput& out, Choice& c) const {
  Engine& e = ctx_.engine();
  if (spec_.chat) {
    ojson content = ojson::array();
    for (const auto& t : out.tokens) {
      const std::string piece = e.token_piece(t.token);
      ojson entry{{"token", token_label(t.token, piece)}, {"logprob", t.logprob}, {"bytes", bytes_of(piece)}};
      ojson top = ojson::array();
      for (size_t k = 0; k < t.top.size() && static_cast<int32_t>(k) < spec_.logprobs; ++k) {
        const std::string tp = e.token_piece(t.top[k].token);
        top.push_back(ojson{{"token", token_label(t.top[k].token, tp)}, {"logprob", t.top[k].logprob}, {"bytes", bytes_of(tp)}});
      }
      entry["top_logprobs"] = std::move(top);
      content.push_back(std::move(entry));
    }
    return ojson{{"content", std::move(content)}};
  }
  ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  for (const auto& t : out.tokens) {
    const std::string piece = printable(e.token_piece(t.token));
    const std::string label = token_label(t.token, piece);
    tokens.push_back(label);
    lps.push_back(t.logprob);
    ojson top = ojson::object();
    top[label] = t.logprob;
    for (size_t k = 0; k < t.top.size() && static_cast<int32_t>(k) < spec_.logprobs; ++k)
      top[token_label(t.top[k].token, printable(e.token_piece(t.top[k].token)))] = t.top[k].logprob;
    tops.push_back(std::move(top));
    offsets.push_back(c.text_offset);
    c.text_offset += piece.size();
  }
  return ojson{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

ojson GenerationJob::echo_logprobs_json(size_t prompt, const RequestOutput& out) const {
  Engine& e = ctx_.engine();
  ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  const std::vector<int32_t>& ids = spec_.prompt_ids[prompt];
  // Offsets into the echoed text: special tokens add nothing to it (it is decoded without them),
  // the first text token without the leading space the decoder drops; never past the text.
  const size_t echo_len = prompt < spec_.echo_texts.size() ? spec_.echo_texts[prompt].size() : 0;
  const Tokenizer& tok = e.tokenizer();
  size_t offset = 0;
  bool first_text = true;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = printable(e.token_piece(ids[i]));
    const std::string label = token_label(ids[i], piece);
    size_t advance = 0;
    if (!tok.is_special(ids[i])) {
      advance = first_text ? e.detokenize(std::span<const int32_t>(&ids[i], 1), /*skip_special=*/true).size() : piece.size();
      first_text = false;
    }
    tokens.push_back(label);
    const RowLogprobs* r = i > 0 && i - 1 < out.prompt_logprobs.size() ? &out.prompt_logprobs[i - 1] : nullptr;
    if (r == nullptr) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
    } else {
      lps.push_back(r->logprob);
      ojson top = ojson::object();
      top[label] = r->logprob;
      for (size_t k = 0; k < r->top.size() && static_cast<int32_t>(k) < spec_.logprobs; ++k)
        top[token_label(r->top[k].token, printable(e.token_piece(r->top[k].token)))] = r->top[k].logprob;
      tops.push_back(std::move(top));
    }
    offsets.push_back(std::min(offset, echo_len));
    offset += advance;
  }
  return ojson{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

ojson GenerationJob::vllm_prompt_logprobs(size_t prompt, const RequestOutput& out) const {
  Engine& e = ctx_.engine();
  const std::vector<int32_t>& ids = spec_.prompt_ids[prompt];
  ojson list = ojson::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    const RowLogprobs* r = i > 0 && i - 1 < out.prompt_logprobs.size() ? &out.prompt_logprobs[i - 1] : nullptr;
    if (r == nullptr) {
      list.push_back(nullptr);
      continue;
    }
    ojson entry = ojson::object();
    auto add = [&](int32_t id, float logprob, int32_t rank) {
      const std::string key = std::to_string(id);
      if (entry.contains(key)) return;
      entry[key] = ojson{{"logprob", logprob}, {"rank", rank}, {"decoded_token", printable(e.token_piece(id))}};
    };
    add(ids[i], r->logprob, r->rank);
    // Ranks of the top N: tied logprobs share the better rank, as token_rank counts them.
    for (size_t k = 0; k < r->top.size() && static_cast<int32_t>(k) < spec_.prompt_logprobs; ++k) {
      size_t better = 0;
      while (better < k && r->top[better].logprob > r->top[k].logprob) ++better;
      add(r->top[k].token, r->top[k].logprob, static_cast<int32_t>(better) + 1);
    }
    list.push_back(std::move(entry));
  }
  return list;
}

std::string GenerationJob::token_label(int32_t id, const std::string& piece) const {
  return spec_.tokens_as_ids ? "token_id:" + std::to_string(id) : printable(piece);
}

ojson GenerationJob::chunk_usage(size_t prompt, const Choice& c) const {
  if (!spec_.continuous_usage) return nullptr;
  const int64_t p = prompt_tokens_[prompt], done = c.num_output_tokens;
  return ojson{{"prompt_tokens", p}, {"completion_tokens", done}, {"total_tokens", p + done}};
}

std::vector<size_t> GenerationJob::returned_samples() const {
  std::vector<size_t> order;
  const size_t per = static_cast<size_t>(spec_.best_of);
  for (size_t p = 0; p < streams_.size(); ++p) {
    std::vector<size_t> mine(per);
    for (size_t s = 0; s < per; ++s) mine[s] = p * per + s;
    if (spec_.best_of > spec_.n) {
      // Highest mean token logprob first (OpenAI: "the highest log probability per token");
      // ties keep the sample order. A sample without tokens ranks last.
      auto mean = [&](size_t i) {
        const Choice& c = choices_[i];
        return c.num_output_tokens > 0 ? c.logprob_sum / c.num_output_tokens : -std::numeric_limits<double>::infinity();
      };
      std::stable_sort(mine.begin(), mine.end(), [&](size_t a, size_t b) { return mean(a) > mean(b); });
      mine.resize(static_cast<size_t>(spec_.n));
    }
    order.insert(order.end(), mine.begin(), mine.end());
  }
  return order;
}

ojson GenerationJob::usage_json() const {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t p = 0; p < prompt_tokens_.size(); ++p) {
    prompt += prompt_tokens_[p];
    cached += cached_tokens_[p];
  }
  for (const auto& c : choices_) completion += c.num_output_tokens;
  ojson u{{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  u["prompt_tokens_details"] = ojson{{"cached_tokens", cached}};
  return u;
}

void GenerationJob::handle(size_t prompt, RequestOutput& out, std::string* sse) {
  const size_t index = prompt * spec_.best_of + static_cast<size_t>(out.index);
  if (index >= choices_.size()) return;
  Choice& c = choices_[index];
  if (c.finished) return;
  if (out.num_prompt_tokens > 0) prompt_tokens_[prompt] = out.num_prompt_tokens;
  if (out.index == 0) cached_tokens_[prompt] = out.num_cached_tokens;
  c.num_output_tokens = out.num_output_tokens;
  c.timings.arrival = out.arrival_time;
  if (out.first_scheduled_time > 0) c.timings.first_scheduled = out.first_scheduled_time;
  if (out.first_token_time > 0) c.timings.first_token = out.first_token_time;
  if (!out.tokens.empty()) c.timings.token_times.push_back(out.time);
  for (const auto& t : out.tokens) c.logprob_sum += t.logprob;

  const bool is_error = out.finished && out.finish_reason == "error";
  ojson lp;
  const bool want_lp = spec_.logprobs >= 0 && !out.tokens.empty();
  if (want_lp) lp = logprobs_json(out, c);
  // Prompt logprobs come with the first generated token.
  const bool first_token = !out.tokens.empty() && !c.prompt_logprobs_done && prompt < spec_.prompt_ids.size();
  if (first_token) {
    c.prompt_logprobs_done = true;
    if (spec_.echo_logprobs && want_lp) {
      ojson head = echo_logprobs_json(prompt, out);
      for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (auto& e : lp[k]) head[k].push_back(std::move(e));
      lp = std::move(head);
    }
    if (spec_.prompt_logprobs >= 0) c.prompt_logprobs = vllm_prompt_logprobs(prompt, out);
  }

  if (spec_.stream) {
    if (spec_.chat && !c.started) {
      ojson j = chunk_head();
      j["choices"] = ojson::array({ojson{{"index", index},
                                         {"delta", ojson{{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}});
      if (spec_.include_usage) j["usage"] = chunk_usage(prompt, c);
      api::append_sse_event(dump_json(j), sse);
    }
    if (!spec_.chat && !c.started && prompt < spec_.echo_texts.size()) out.text = spec_.echo_texts[prompt] + out.text;
    c.started = true;
    if (is_error) {
      ojson err{{"error", ojson{{"message", out.error}, {"type", "internal_error"}, {"param", nullptr}, {"code", 500}}}};
      api::append_sse_event(dump_json(err), sse);
    } else if (!out.text.empty() || want_lp || out.finished) {
      ojson choice;
      choice["index"] = index;
      if (spec_.chat && c.tools) {
        api::ParsedDelta d = c.tools->push(out.text);
        if (out.finished) {
          api::ParsedDelta tail = c.tools->finish();
          d.content += tail.content;
          for (auto& t : tail.calls) d.calls.push_back(std::move(t));
        }
        tool_chunks(index, d, chunk_usage(prompt, c), sse);
        if (!out.finished && !want_lp) return;
        choice["delta"] = ojson::object();
        if (out.finished && out.finish_reason == "stop" && !c.tools->calls().empty()) out.finish_reason = "tool_calls";
      } else if (spec_.chat) {
        choice["delta"] = out.text.empty() && out.finished ? ojson::object() : ojson{{"content", out.text}};
      } else {
        choice["text"] = out.text;
      }
      choice["logprobs"] = want_lp ? lp : ojson(nullptr);
      choice["finish_reason"] = out.finished ? ojson(out.finish_reason) : ojson(nullptr);
      if (first_token && spec_.prompt_logprobs >= 0 && !spec_.chat) choice["prompt_logprobs"] = c.prompt_logprobs;
      ojson j = chunk_head();
      j["choices"] = ojson::array({std::move(choice)});
      if (first_token && spec_.prompt_logprobs >= 0 && spec_.chat) j["prompt_logprobs"] = c.prompt_logprobs;
      if (spec_.include_usage) j["usage"] = chunk_usage(prompt, c);
      api::append_sse_event(dump_json(j), sse);
    }
  } else {
    if (!c.started && !spec_.chat && prompt < spec_.echo_texts.size()) c.text = spec_.echo_texts[prompt];
    c.started = true;
    c.text += out.text;
    if (want_lp) {
      if (spec_.chat) {
        for (auto& e : lp["content"]) c.logprobs["content"].push_back(std::move(e));
      } else {
        for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
          for (auto& e : lp[k]) c.logprobs[k].push_back(std::move(e));
      }
    }
    if (is_error && error_.empty()) error_ = out.error;
  }
  if (out.finished) {
    c.finished = true;
    if (!spec_.stream && c.tools) {
      api::ParsedDelta d = c.tools->push(c.text);
      api::ParsedDelta tail = c.tools->finish();
      c.text = d.content + tail.content;
      if (out.finish_reason == "stop" && !c.tools->calls().empty()) out.finish_reason = "tool_calls";
    }
    c.finish_reason = out.finish_reason;
    c.timings.finished = out.time;
    c.timings.finish_reason = out.finish_reason.empty() ? "stop" : out.finish_reason;
    ctx_.metrics().record_sequence(c.timings);
    ++num_finished_;
  }
}

void GenerationJob::tool_chunks(size_t index, const api::ParsedDelta& d, const ojson& usage, std::string* sse) const {
  auto send = [&](ojson delta) {
    ojson j = chunk_head();
    j["choices"] = ojson::array({ojson{{"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
    if (spec_.include_usage) j["usage"] = usage;
    api::append_sse_event(dump_json(j), sse);
  };
  if (!d.content.empty()) send(ojson{{"content", d.content}});
  for (const auto& t : d.calls) {
    ojson call{{"index", t.index}};
    if (t.first) {
      call["id"] = t.id;
      call["type"] = "function";
      call["function"] = ojson{{"name", t.name}, {"arguments", t.arguments}};
    } else {
      call["function"] = ojson{{"arguments", t.arguments}};
    }
    send(ojson{{"tool_calls", ojson::array({std::move(call)})}});
  }
}

std::string GenerationJob::final_body() const {
  ojson j;
  j["id"] = spec_.id;
  j["object"] = spec_.chat ? "chat.completion" : "text_completion";
  j["created"] = spec_.created;
  j["model"] = spec_.model;
  ojson choices = ojson::array();
  const std::vector<size_t> returned = returned_samples();
  for (size_t i = 0; i < returned.size(); ++i) {
    const Choice& c = choices_[returned[i]];
    ojson ch;
    ch["index"] = i;
    if (spec_.chat) {
      ch["message"] = ojson{{"role", "assistant"}, {"content", c.text}};
      if (c.tools && !c.tools->calls().empty()) {
        ojson calls = ojson::array();
        for (const auto& t : c.tools->calls())
          calls.push_back(ojson{{"id", t.id}, {"type", "function"}, {"function", ojson{{"name", t.name}, {"arguments", t.arguments}}}});
        if (c.text.empty()) ch["message"]["content"] = nullptr;
        ch["message"]["tool_calls"] = std::move(calls);
      }
    } else {
      ch["text"] = c.text;
    }
    ch["logprobs"] = spec_.logprobs >= 0 ? c.logprobs : ojson(nullptr);
    ch["finish_reason"] = c.finish_reason;
    if (!spec_.chat && spec_.prompt_logprobs >= 0) ch["prompt_logprobs"] = c.prompt_logprobs;
    choices.push_back(std::move(ch));
  }
  j["choices"] = std::move(choices);
  j["usage"] = usage_json();
  // Chat: one prompt, so its prompt logprobs are the response's (vLLM puts them at the top level).
  if (spec_.chat && spec_.prompt_logprobs >= 0) j["prompt_logprobs"] = choices_.empty() ? ojson(nullptr) : choices_[0].prompt_logprobs;
  return dump_json(j);
}

AsyncBody::Poll GenerationJob::poll() {
  Poll p;
  if (aborted_) {
    p.done = true;
    return p;
  }
  for (size_t i = 0; i < streams_.size(); ++i)
    while (auto out = streams_[i]->try_next()) handle(i, *out, &p.data);
  if (num_finished_ < choices_.size()) return p;
  p.done = true;
  if (spec_.stream) {
    if (spec_.include_usage) {
      ojson j = chunk_head();
      j["choices"] = ojson::array();
      j["usage"] = usage_json();
      api::append_sse_event(dump_json(j), &p.data);
    }
    p.data += api::kSseDone;
  } else if (!error_.empty()) {
    api::ApiError e;
    e.status = 500;
    e.type = "internal_error";
    e.message = error_;
    p.status = 500;
    p.data = e.body();
  } else {
    p.data = final_body();
  }
  for (auto& s : streams_) s->set_notify(nullptr);
  finish_all();
  return p;
}

}  // namespace pagoda::server
