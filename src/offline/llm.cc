#include "offline/llm.h"

#include <fmt/format.h>

#include "common/log.h"
#include "engine/device_choice.h"
#include "model/model_loader.h"

namespace pagoda::offline {
namespace {

// Appends one engine output (a delta of one sample) to `s`.
void append_output(Sample& s, const RequestOutput& out, bool with_logprobs) {
  s.text += out.text;
  for (const TokenOutput& t : out.tokens) {
    s.token_ids.push_back(t.token);
    if (with_logprobs) {
      s.logprobs.push_back(t);
      s.cumulative_logprob += t.logprob;
    }
  }
  if (out.finished) {
    s.finish_reason = out.finish_reason;
    s.stop_reason = out.stop_reason;
    s.error = out.error;
  }
}

}  // namespace

GenerationRun::GenerationRun(const Engine& engine, std::unique_ptr<BatchRun> batch, std::vector<Completion> heads,
                             std::vector<int32_t> n, std::vector<bool> logprobs, std::vector<bool> prompt_logprobs)
    : engine_(engine),
      batch_(std::move(batch)),
      heads_(std::move(heads)),
      n_(n),
      unfinished_(std::move(n)),
      logprobs_(std::move(logprobs)),
      prompt_logprobs_pending_(std::move(prompt_logprobs)) {}

bool GenerationRun::carries_prompt_logprobs(size_t i, const RequestOutput& out) const {
  // The engine sends them with the first generated token of one of the request's samples; a
  // one-token prompt has nothing to score.
  return prompt_logprobs_pending_[i] && !out.tokens.empty() &&
         (!out.prompt_logprobs.empty() || heads_[i].prompt_token_ids.size() <= 1);
}

std::vector<std::vector<PromptLogprob>> GenerationRun::prompt_logprobs_of(size_t i, const RequestOutput& out) const {
  const std::vector<int32_t>& ids = heads_[i].prompt_token_ids;
  std::vector<std::vector<PromptLogprob>> lists(ids.size());
  for (size_t p = 1; p < ids.size() && p - 1 < out.prompt_logprobs.size(); ++p) {
    const RowLogprobs& r = out.prompt_logprobs[p - 1];
    std::vector<PromptLogprob>& list = lists[p];
    list.push_back({ids[p], r.logprob, r.rank, engine_.token_piece(ids[p])});
    for (size_t k = 0; k < r.top.size(); ++k) {
      if (r.top[k].token == ids[p]) continue;
      size_t better = 0;  // the top is sorted by logprob: ties share the better rank
      while (better < k && r.top[better].logprob > r.top[k].logprob) ++better;
      list.push_back({r.top[k].token, r.top[k].logprob, static_cast<int32_t>(better) + 1,
                      engine_.token_piece(r.top[k].token)});
    }
  }
  return lists;
}

std::optional<Completion> GenerationRun::next_delta(std::chrono::milliseconds timeout) {
  auto o = batch_->next_for(timeout);
  if (!o) return std::nullopt;
  const size_t i = o->request_index;
  const RequestOutput& out = o->output;
  if (out.finished) --unfinished_[i];
  Completion c = heads_[i];
  c.finished = unfinished_[i] == 0;
  c.num_cached_tokens = out.num_cached_tokens;
  if (carries_prompt_logprobs(i, out)) {
    c.prompt_logprobs = prompt_logprobs_of(i, out);
    prompt_logprobs_pending_[i] = false;
  }
  c.arrival_time = out.arrival_time;
  c.first_token_time = out.first_token_time;
  c.last_token_time = out.time;
  Sample s;
  s.index = out.index;
  append_output(s, out, logprobs_[i]);
  c.outputs.push_back(std::move(s));
  return c;
}

Result<std::vector<Completion>> GenerationRun::collect(const std::function<bool()>& interrupted) {
  std::vector<Completion> result = heads_;
  for (size_t i = 0; i < result.size(); ++i) {
    result[i].outputs.resize(static_cast<size_t>(n_[i]));
    for (int32_t k = 0; k < n_[i]; ++k) result[i].outputs[static_cast<size_t>(k)].index = k;
  }
  // Polled every 50 ms whether outputs arrive or not: a busy batch delivers a delta every step,
  // so a check only on timeouts would wait for the batch's end.
  constexpr auto kPoll = std::chrono::milliseconds(50);
  auto last_poll = std::chrono::steady_clock::now();
  while (!batch_->done()) {
    auto o = batch_->next_for(kPoll);
    const auto now = std::chrono::steady_clock::now();
    if (!o || now - last_poll >= kPoll) {
      last_poll = now;
      if (interrupted && interrupted()) {
        batch_->cancel();
        return make_status(StatusCode::kCancelled, "generation interrupted");
      }
      if (!o) continue;
    }
    const size_t i = o->request_index;
    const RequestOutput& out = o->output;
    Completion& c = result[i];
    Sample& s = c.outputs.at(static_cast<size_t>(out.index));
    append_output(s, out, logprobs_[i]);
    if (out.finished) {
      if (out.finish_reason == "error")
        return make_status(StatusCode::kInternal, "request {}: {}", batch_->request_id(i), out.error);
      if (--unfinished_[i] == 0) c.finished = true;
    }
    c.num_cached_tokens = out.num_cached_tokens;
    if (carries_prompt_logprobs(i, out)) {
      c.prompt_logprobs = prompt_logprobs_of(i, out);
      prompt_logprobs_pending_[i] = false;
    }
    c.arrival_time = out.arrival_time;
    c.first_token_time = out.first_token_time;
    c.last_token_time = out.time;
  }
  return result;
}

Result<std::unique_ptr<Llm>> Llm::create(EngineConfig config) {
  if (config.max_model_len < 0) return invalid_argument("max_model_len must be positive, got {}", config.max_model_len);
  if (config.max_model_len > 0) {
    // As `pagoda serve --max-model-len`: no RoPE-scaling option extends the trained context.
    if (auto mc = load_model_config(config.model); mc.ok() && mc->max_position_embeddings > 0 &&
                                                   config.max_model_len > mc->max_position_embeddings)
      return invalid_argument("max_model_len {} exceeds the model's context length {} (max_position_embeddings of {})",
                              config.max_model_len, mc->max_position_embeddings, config.model);
  }
  if (config.device == "auto") {
    std::string why;
    PAGODA_ASSIGN_OR_RETURN(const DeviceSpec d, choose_engine_device(config.device, config.model, &why));
    config.device = d.to_string();
    log_info("pagoda.LLM", "device auto: {} ({})", config.device, why);
  }
  PAGODA_ASSIGN_OR_RETURN(auto engine, Engine::create(config));
  return std::unique_ptr<Llm>(new Llm(std::move(engine)));
}

Result<std::unique_ptr<GenerationRun>> Llm::start(const std::vector<Prompt>& prompts,
                                                  const std::vector<GenerationParams>& params) {
  if (params.size() != 1 && params.size() != prompts.size())
    return invalid_argument("{} sampling parameters for {} prompts: give one for all, or one per prompt", params.size(),
                            prompts.size());
  std::vector<GenerateRequest> requests;
  std::vector<Completion> heads;
  std::vector<int32_t> n;
  std::vector<bool> logprobs, prompt_logprobs;
  requests.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Prompt& p = prompts[i];
    const GenerationParams& gp = params.size() == 1 ? params[0] : params[i];
    GenerateRequest g;
    g.request_id = fmt::format("{}", next_request_id_++);
    // Tokenized here (the engine would do the same) so that the outputs carry the prompt's ids.
    g.prompt_ids = p.token_ids.empty() ? engine_->tokenize(p.text, p.add_special_tokens, p.parse_special_tokens)
                                       : p.token_ids;
    g.add_special_tokens = false;
    g.sampling = gp.sampling;
    g.stop = gp.stop;
    g.n = gp.n;
    g.skip_special_tokens = gp.skip_special_tokens;
    Completion head;
    head.request_id = g.request_id;
    head.prompt = p.token_ids.empty() ? p.text : std::string();
    head.prompt_token_ids = g.prompt_ids;
    heads.push_back(head);
    n.push_back(gp.n);
    logprobs.push_back(gp.sampling.logprobs >= 0);
    prompt_logprobs.push_back(gp.sampling.prompt_logprobs >= 0);
    requests.push_back(std::move(g));
  }
  PAGODA_ASSIGN_OR_RETURN(auto batch, BatchRun::submit(*engine_, std::move(requests)));
  return std::unique_ptr<GenerationRun>(
      new GenerationRun(*engine_, std::move(batch), std::move(heads), std::move(n), std::move(logprobs),
                        std::move(prompt_logprobs)));
}

Result<std::vector<Completion>> Llm::generate(const std::vector<Prompt>& prompts,
                                              const std::vector<GenerationParams>& params,
                                              const std::function<bool()>& interrupted) {
  PAGODA_ASSIGN_OR_RETURN(auto run, start(prompts, params));
  return run->collect(interrupted);
}

Result<Prompt> Llm::chat_prompt(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::ordered_json& tools,
                                const nlohmann::ordered_json& template_kwargs) const {
  if (!messages.is_array() || messages.empty())
    return invalid_argument("messages must be a non-empty list of {{\"role\": ..., \"content\": ...}} objects");
  PAGODA_ASSIGN_OR_RETURN(std::string text,
                          engine_->apply_chat_template(messages, add_generation_prompt, tools, template_kwargs));
  Prompt p;
  p.text = std::move(text);
  p.add_special_tokens = false;
  p.parse_special_tokens = true;
  return p;
}

}  // namespace pagoda::offline
