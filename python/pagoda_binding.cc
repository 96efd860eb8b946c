// pagoda._pagoda: the Python binding (pybind11) of the offline API, src/offline/llm.h. Thin by
// design: it converts Python values to the C++ structs and back, releases the GIL while the engine
// works, and turns Status errors into Python exceptions. Everything else is the C++ API's.
//
//   LLM(model, **engine options)            Llm::create (the GIL released while loading)
//   LLM.generate(prompts, params)           Llm::generate: the whole batch submitted at once
//   LLM.stream / stream_chat                GenerationRun::next_delta, as a Python iterator
//   LLM.chat(messages, params)              Llm::chat_prompt + generate
//   SamplingParams, RequestOutput, CompletionOutput, Logprob   vLLM's names and fields
//
// Errors: ValueError (bad parameter, prompt too long, no chat template), FileNotFoundError (no
// model file), RuntimeError (others); Ctrl-C cancels the requests in flight and raises
// KeyboardInterrupt (signals are checked every 50-100 ms while waiting).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/log.h"
#include "offline/llm.h"

namespace py = pybind11;
using namespace pagoda;
using namespace pagoda::offline;

namespace {

[[noreturn]] void raise_status(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, s.message().c_str());
      throw py::error_already_set();
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnimplemented:
      throw py::value_error(s.message());
    default:
      throw std::runtime_error(s.to_string());
  }
}

template <class T>
T value_or_raise(Result<T> r) {
  if (!r.ok()) raise_status(r.status());
  return std::move(*r);
}

// Python's pending signal (Ctrl-C) while the GIL is released: true when a handler raised.
bool python_interrupted() {
  py::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;
}

nlohmann::ordered_json to_json(const py::handle& obj) {
  if (obj.is_none()) return nullptr;
  const std::string text = py::module_::import("json").attr("dumps")(obj).cast<std::string>();
  return nlohmann::ordered_json::parse(text);
}

// str | {"prompt": str} | {"prompt_token_ids": [int]} | [int] (inside a list) -> Prompt.
Prompt prompt_of(const py::handle& p, bool inside_list) {
  if (py::isinstance<py::str>(p)) return Prompt::of_text(p.cast<std::string>());
  if (py::isinstance<py::dict>(p)) {
    const py::dict d = p.cast<py::dict>();
    for (const auto& kv : d) {
      const std::string key = kv.first.cast<std::string>();
      if (key != "prompt" && key != "prompt_token_ids")
        throw py::value_error("prompt dict key '" + key + "' is not supported (use 'prompt' or 'prompt_token_ids')");
    }
    if (d.contains("prompt_token_ids")) return Prompt::of_ids(d["prompt_token_ids"].cast<std::vector<int32_t>>());
    if (d.contains("prompt")) return Prompt::of_text(d["prompt"].cast<std::string>());
    throw py::value_error("a prompt dict needs 'prompt' (text) or 'prompt_token_ids' (a list of ints)");
  }
  if (inside_list && (py::isinstance<py::list>(p) || py::isinstance<py::tuple>(p)))
    return Prompt::of_ids(p.cast<std::vector<int32_t>>());
  throw py::type_error("a prompt is a str, a list of token ids, or a dict with 'prompt' / 'prompt_token_ids'");
}

std::vector<Prompt> prompts_of(const py::object& prompts) {
  if (!py::isinstance<py::list>(prompts) && !py::isinstance<py::tuple>(prompts)) return {prompt_of(prompts, false)};
  std::vector<Prompt> out;
  for (const auto& p : prompts) {
    if (py::isinstance<py::int_>(p))
      throw py::type_error("prompts is a list of token ids: pass [[ids...]] or {'prompt_token_ids': [ids...]}");
    out.push_back(prompt_of(p, true));
  }
  if (out.empty()) throw py::value_error("prompts is empty");
  return out;
}

std::vector<GenerationParams> params_of(const py::object& params) {
  if (params.is_none()) return {GenerationParams{}};
  if (py::isinstance<GenerationParams>(params)) return {params.cast<GenerationParams>()};
  return params.cast<std::vector<GenerationParams>>();
}

// A single conversation ([{role, content}, ...]) or a batch of them ([[...], [...]]).
std::vector<nlohmann::ordered_json> conversations_of(const py::object& messages) {
  if (!py::isinstance<py::list>(messages) && !py::isinstance<py::tuple>(messages))
    throw py::type_error("messages is a list of {'role': ..., 'content': ...} dicts (or a list of such lists)");
  const py::sequence seq = messages.cast<py::sequence>();
  if (seq.size() > 0 && (py::isinstance<py::list>(seq[0]) || py::isinstance<py::tuple>(seq[0]))) {
    std::vector<nlohmann::ordered_json> out;
    for (const auto& c : seq) out.push_back(to_json(c));
    return out;
  }
  return {to_json(messages)};
}

GenerationParams make_sampling_params(int32_t n, float temperature, float top_p, int32_t top_k, float min_p,
                                      float presence_penalty, float frequency_penalty, float repetition_penalty,
                                      std::optional<uint64_t> seed, const py::object& stop,
                                      std::vector<int32_t> stop_token_ids, bool ignore_eos,
                                      std::optional<int32_t> max_tokens, int32_t min_tokens,
                                      std::optional<int32_t> logprobs, std::optional<int32_t> prompt_logprobs,
                                      bool include_stop_str_in_output, bool skip_special_tokens) {
  GenerationParams p;
  p.n = n;
  p.sampling.temperature = temperature;
  p.sampling.top_p = top_p;
  p.sampling.top_k = top_k < 0 ? 0 : top_k;  // vLLM: -1 (or 0) disables
  p.sampling.min_p = min_p;
  p.sampling.presence_penalty = presence_penalty;
  p.sampling.frequency_penalty = frequency_penalty;
  p.sampling.repetition_penalty = repetition_penalty;
  p.sampling.seed = seed;
  p.sampling.logprobs = logprobs ? *logprobs : -1;
  if (logprobs && *logprobs < 0) throw py::value_error("logprobs must be >= 0 (or None)");
  p.sampling.prompt_logprobs = prompt_logprobs ? *prompt_logprobs : -1;
  if (prompt_logprobs && *prompt_logprobs < 0) throw py::value_error("prompt_logprobs must be >= 0 (or None)");
  if (py::isinstance<py::str>(stop)) p.stop.stop = {stop.cast<std::string>()};
  else if (!stop.is_none()) p.stop.stop = stop.cast<std::vector<std::string>>();
  p.stop.stop_token_ids = std::move(stop_token_ids);
  p.stop.ignore_eos = ignore_eos;
  p.stop.max_tokens = max_tokens ? *max_tokens : -1;
  if (max_tokens && *max_tokens < 1) throw py::value_error("max_tokens must be at least 1 (None: up to the model length)");
  p.stop.min_tokens = min_tokens;
  p.stop.include_stop_str_in_output = include_stop_str_in_output;
  p.skip_special_tokens = skip_special_tokens;
  if (n < 1 || n > 128) throw py::value_error("n must be in [1, 128]");
  if (min_tokens < 0 || (max_tokens && min_tokens > *max_tokens)) throw py::value_error("min_tokens must be in [0, max_tokens]");
  if (Status s = p.sampling.validate(); !s.ok()) raise_status(s);
  return p;
}

py::object none_if_empty(const std::string& s) { return s.empty() ? py::object(py::none()) : py::object(py::str(s)); }

// Bytes as a str, invalid UTF-8 (a token holding part of a character) replaced.
py::str utf8_replaced(const std::string& bytes) {
  PyObject* o = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// RequestOutput.prompt_logprobs as vLLM gives it: None when not asked (and in streamed deltas
// after the first); else one entry per prompt token, None for token 0, then {token_id: Logprob}
// with the prompt token and the row's top N (dict order: the prompt token first).
py::object prompt_logprobs_py(const Completion& c) {
  if (!c.prompt_logprobs) return py::none();
  py::list out;
  for (size_t i = 0; i < c.prompt_logprobs->size(); ++i) {
    if (i == 0) {
      out.append(py::none());
      continue;
    }
    py::dict d;
    for (const PromptLogprob& l : (*c.prompt_logprobs)[i]) d[py::int_(l.token)] = l;
    out.append(std::move(d));
  }
  return out;
}

// The iterator of LLM.stream / LLM.stream_chat: RequestOutput deltas until every request finished.
class Stream {
 public:
  explicit Stream(std::unique_ptr<GenerationRun> run) : run_(std::move(run)) {}
  Completion next() {
    for (;;) {
      std::optional<Completion> c;
      {
        py::gil_scoped_release nogil;
        c = run_->next_delta(std::chrono::milliseconds(100));
      }
      if (c) {
        if (c->outputs[0].finish_reason == "error")
          throw std::runtime_error("request " + c->request_id + ": " + c->outputs[0].error);
        return std::move(*c);
      }
      if (run_->done()) throw py::stop_iteration();
      if (PyErr_CheckSignals() != 0) {
        run_->cancel();
        throw py::error_already_set();
      }
    }
  }
  void cancel() { run_->cancel(); }
  std::vector<std::string> request_ids() const {
    std::vector<std::string> ids;
    for (size_t i = 0; i < run_->size(); ++i) ids.push_back(run_->request_id(i));
    return ids;
  }

 private:
  std::unique_ptr<GenerationRun> run_;
};

std::vector<Completion> generate(Llm& llm, const std::vector<Prompt>& prompts, const std::vector<GenerationParams>& params) {
  Result<std::vector<Completion>> r = [&] {
    py::gil_scoped_release nogil;
    return llm.generate(prompts, params, python_interrupted);
  }();
  if (!r.ok() && r.status().code() == StatusCode::kCancelled && PyErr_Occurred()) throw py::error_already_set();
  return value_or_raise(std::move(r));
}

std::unique_ptr<Stream> start_stream(Llm& llm, const std::vector<Prompt>& prompts, const std::vector<GenerationParams>& params) {
  Result<std::unique_ptr<GenerationRun>> run = [&] {
    py::gil_scoped_release nogil;
    return llm.start(prompts, params);
  }();
  return std::make_unique<Stream>(value_or_raise(std::move(run)));  // exceptions are raised with the GIL held
}

std::vector<Prompt> chat_prompts(const Llm& llm, const py::object& messages, bool add_generation_prompt,
                                 const py::object& tools, const py::object& chat_template_kwargs) {
  const nlohmann::ordered_json t = to_json(tools), kw = to_json(chat_template_kwargs);
  std::vector<Prompt> prompts;
  for (const auto& conv : conversations_of(messages))
    prompts.push_back(value_or_raise(llm.chat_prompt(conv, add_generation_prompt, t, kw)));
  return prompts;
}

std::unique_ptr<Llm> make_llm(const std::string& model, const std::optional<std::string>& tokenizer,
                              std::optional<int64_t> max_model_len, std::optional<int32_t> max_num_seqs,
                              std::optional<int32_t> max_num_batched_tokens, std::optional<int32_t> block_size,
                              const std::string& kv_cache_dtype, std::optional<int64_t> kv_cache_memory,
                              std::optional<double> gpu_memory_utilization, std::optional<int64_t> swap_space,
                              bool enable_prefix_caching, const std::string& device, const std::string& dtype,
                              std::optional<int> threads, bool enforce_eager, std::optional<double> cpu_offload_gb,
                              std::optional<int64_t> n_gpu_layers, const std::optional<std::string>& quantization,
                              const std::string& load_format) {
  EngineConfig c;
  c.model = model;
  if (tokenizer) c.tokenizer = *tokenizer;
  if (max_model_len) c.max_model_len = *max_model_len;
  if (max_num_seqs) c.scheduler.max_num_seqs = *max_num_seqs;
  if (max_num_batched_tokens) c.scheduler.max_num_batched_tokens = *max_num_batched_tokens;
  if (block_size) c.block_size = *block_size;
  const auto kv = dtype_from_name(kv_cache_dtype == "auto" ? "f16" : kv_cache_dtype);
  if (!kv) throw py::value_error("unknown kv_cache_dtype '" + kv_cache_dtype + "' (auto, f16, bf16, f32, fp8)");
  c.kv_dtype = *kv;
  if (kv_cache_memory) c.kv_cache_memory = *kv_cache_memory;
  if (gpu_memory_utilization) c.memory_utilization = *gpu_memory_utilization;
  if (swap_space) c.kv_tiers.host_bytes = *swap_space;  // the host KV tier, also swap preemption's space
  c.enable_prefix_caching = enable_prefix_caching;
  c.device = device;
  c.dtype = dtype;
  if (threads) c.threads = *threads;
  c.cuda_graphs = !enforce_eager;
  // vLLM's cpu_offload_gb (GiB of weights streamed from host memory; None: the planner's auto, 0:
  // never) and llama.cpp's n_gpu_layers (None: every layer on the GPU).
  if (cpu_offload_gb) {
    if (!(*cpu_offload_gb >= 0)) throw py::value_error("cpu_offload_gb must be >= 0 (GiB; 0: never offload)");
    c.cpu_offload_bytes = static_cast<int64_t>(*cpu_offload_gb * 1073741824.0);
  }
  if (n_gpu_layers) {
    if (*n_gpu_layers < -1) throw py::value_error("n_gpu_layers must be >= -1 (-1: every layer on the GPU)");
    c.n_gpu_layers = *n_gpu_layers;
  }
  // vLLM's quantization (on-line, of a 16-bit checkpoint's linears) and load_format ("dummy": random
  // weights of a config.json's shape).
  const auto q = parse_weight_quantization(quantization.value_or("none"));
  if (!q.ok()) throw py::value_error("quantization: " + q.status().message());
  c.quantization = *q;
  const auto lf = parse_load_format(load_format);
  if (!lf.ok()) throw py::value_error("load_format: " + lf.status().message());
  c.load_format = *lf;
  // Ranges as `pagoda serve` checks them.
  if (c.max_model_len < 0) throw py::value_error("max_model_len must be positive");
  if (c.scheduler.max_num_seqs < 1) throw py::value_error("max_num_seqs must be at least 1");
  if (max_num_batched_tokens && *max_num_batched_tokens < 1) throw py::value_error("max_num_batched_tokens must be at least 1");
  if (c.block_size < 1 || c.block_size > 4096) throw py::value_error("block_size must be in [1, 4096]");
  if (c.kv_cache_memory < 0 || c.kv_tiers.host_bytes < 0) throw py::value_error("kv_cache_memory and swap_space are byte counts >= 0");
  if (c.memory_utilization < 0 || c.memory_utilization > 1) throw py::value_error("gpu_memory_utilization must be in [0, 1]");
  if (c.threads < 0 || c.threads > 4096) throw py::value_error("threads must be in [0, 4096] (0: one per core)");
  Result<std::unique_ptr<Llm>> llm = [&] {
    py::gil_scoped_release nogil;
    return Llm::create(std::move(c));
  }();
  return value_or_raise(std::move(llm));
}

}  // namespace

PYBIND11_MODULE(_pagoda, m) {
  m.doc() = "Pagoda's offline API (vLLM's LLM class): the C++ engine and scheduler of `pagoda serve`";
  m.attr("__version__") = PAGODA_VERSION;
  m.def("set_log_level", [](const std::string& level) {
    auto l = parse_log_level(level);
    if (!l) throw py::value_error("log level is debug, info, warn or error");
    set_log_level(*l);
  }, py::arg("level"), "Engine log lines on stderr at this level and above: debug, info (default), warn, error");

  py::class_<GenerationParams>(m, "SamplingParams", "How a prompt is sampled and when it stops (vLLM's SamplingParams)")
      .def(py::init(&make_sampling_params), py::kw_only(), py::arg("n") = 1, py::arg("temperature") = 1.0f,
           py::arg("top_p") = 1.0f, py::arg("top_k") = 0, py::arg("min_p") = 0.0f, py::arg("presence_penalty") = 0.0f,
           py::arg("frequency_penalty") = 0.0f, py::arg("repetition_penalty") = 1.0f, py::arg("seed") = py::none(),
           py::arg("stop") = py::none(), py::arg("stop_token_ids") = std::vector<int32_t>{},
           py::arg("ignore_eos") = false, py::arg("max_tokens") = 16, py::arg("min_tokens") = 0,
           py::arg("logprobs") = py::none(), py::arg("prompt_logprobs") = py::none(),
           py::arg("include_stop_str_in_output") = false,
           py::arg("skip_special_tokens") = true)
      .def_readonly("n", &GenerationParams::n)
      .def_property_readonly("temperature", [](const GenerationParams& p) { return p.sampling.temperature; })
      .def_property_readonly("top_p", [](const GenerationParams& p) { return p.sampling.top_p; })
      .def_property_readonly("top_k", [](const GenerationParams& p) { return p.sampling.top_k; })
      .def_property_readonly("min_p", [](const GenerationParams& p) { return p.sampling.min_p; })
      .def_property_readonly("seed", [](const GenerationParams& p) { return p.sampling.seed; })
      .def_property_readonly("stop", [](const GenerationParams& p) { return p.stop.stop; })
      .def_property_readonly("stop_token_ids", [](const GenerationParams& p) { return p.stop.stop_token_ids; })
      .def_property_readonly("ignore_eos", [](const GenerationParams& p) { return p.stop.ignore_eos; })
      .def_property_readonly("max_tokens", [](const GenerationParams& p) {
        return p.stop.max_tokens < 0 ? std::optional<int32_t>() : std::optional<int32_t>(p.stop.max_tokens);
      })
      .def_property_readonly("logprobs", [](const GenerationParams& p) {
        return p.sampling.logprobs < 0 ? std::optional<int32_t>() : std::optional<int32_t>(p.sampling.logprobs);
      })
      .def_property_readonly("prompt_logprobs", [](const GenerationParams& p) {
        return p.sampling.prompt_logprobs < 0 ? std::optional<int32_t>() : std::optional<int32_t>(p.sampling.prompt_logprobs);
      })
      .def("__repr__", [](const GenerationParams& p) {
        return fmt::format("SamplingParams(n={}, temperature={}, top_p={}, top_k={}, min_p={}, seed={}, max_tokens={}, "
                           "stop={}, ignore_eos={}, logprobs={}, prompt_logprobs={})", p.n, p.sampling.temperature, p.sampling.top_p,
                           p.sampling.top_k, p.sampling.min_p, p.sampling.seed ? std::to_string(*p.sampling.seed) : "None",
                           p.stop.max_tokens < 0 ? "None" : std::to_string(p.stop.max_tokens),
                           py::repr(py::cast(p.stop.stop)).cast<std::string>(), p.stop.ignore_eos ? "True" : "False",
                           p.sampling.logprobs < 0 ? "None" : std::to_string(p.sampling.logprobs),
                           p.sampling.prompt_logprobs < 0 ? "None" : std::to_string(p.sampling.prompt_logprobs));
      });

  py::class_<PromptLogprob>(m, "Logprob", "One token's log-probability at one prompt position (vLLM's Logprob)")
      .def_readonly("logprob", &PromptLogprob::logprob, "log-softmax of the model's row (no sampling transform)")
      .def_readonly("rank", &PromptLogprob::rank, "1 + the tokens with a greater logprob (1: the model's best)")
      .def_property_readonly("decoded_token", [](const PromptLogprob& l) { return utf8_replaced(l.text); },
                             "the token's text (invalid UTF-8 of a partial character replaced)")
      .def("__repr__", [](const PromptLogprob& l) {
        return fmt::format("Logprob(logprob={}, rank={}, decoded_token={})", l.logprob, l.rank,
                           py::repr(utf8_replaced(l.text)).cast<std::string>());
      });

  py::class_<Sample>(m, "CompletionOutput", "One sample of a request (vLLM's CompletionOutput)")
      .def_readonly("index", &Sample::index)
      .def_readonly("text", &Sample::text)
      .def_readonly("token_ids", &Sample::token_ids)
      .def_property_readonly("cumulative_logprob", [](const Sample& s) -> py::object {
        return s.logprobs.empty() ? py::object(py::none()) : py::object(py::float_(s.cumulative_logprob));
      })
      // Per generated token: {token_id: logprob} of the chosen token and the top-N.
      .def_property_readonly("logprobs", [](const Sample& s) -> py::object {
        if (s.logprobs.empty()) return py::none();
        py::list out;
        for (const TokenOutput& t : s.logprobs) {
          py::dict d;
          for (const TokenLogprob& tl : t.top) d[py::int_(tl.token)] = tl.logprob;
          d[py::int_(t.token)] = t.logprob;
          out.append(d);
        }
        return out;
      })
      .def_property_readonly("finish_reason", [](const Sample& s) { return none_if_empty(s.finish_reason); })
      .def_property_readonly("stop_reason", [](const Sample& s) { return none_if_empty(s.stop_reason); })
      .def("finished", [](const Sample& s) { return !s.finish_reason.empty(); })
      .def("__repr__", [](const Sample& s) {
        return fmt::format("CompletionOutput(index={}, text={}, token_ids=[{} ids], finish_reason={})", s.index,
                           py::repr(py::str(s.text)).cast<std::string>(), s.token_ids.size(),
                           s.finish_reason.empty() ? "None" : s.finish_reason);
      });

  py::class_<Completion>(m, "RequestOutput", "One prompt's result, or one streamed delta of it (vLLM's RequestOutput)")
      .def_readonly("request_id", &Completion::request_id)
      .def_property_readonly("prompt", [](const Completion& c) { return none_if_empty(c.prompt); })
      .def_readonly("prompt_token_ids", &Completion::prompt_token_ids)
      .def_readonly("outputs", &Completion::outputs)
      .def_readonly("finished", &Completion::finished)
      .def_readonly("num_cached_tokens", &Completion::num_cached_tokens)
      .def_property_readonly("prompt_logprobs", &prompt_logprobs_py,
                             "SamplingParams(prompt_logprobs=N): per prompt token None (the first) or {token_id: Logprob} "
                             "of the prompt token and the top N; None when not asked or in later streamed deltas")
      .def_property_readonly("text", [](const Completion& c) { return c.outputs.at(0).text; },
                             "outputs[0].text (the first sample's text)")
      .def_property_readonly("metrics", [](const Completion& c) {
        py::dict d;
        d["arrival_time"] = c.arrival_time;
        d["first_token_time"] = c.first_token_time;
        d["last_token_time"] = c.last_token_time;
        return d;
      })
      .def("__repr__", [](const Completion& c) {
        return fmt::format("RequestOutput(request_id={}, prompt_token_ids=[{} ids], outputs=[{} sample(s)], finished={})",
                           c.request_id, c.prompt_token_ids.size(), c.outputs.size(), c.finished);
      });

  py::class_<Stream>(m, "GenerationStream", "Iterator of RequestOutput deltas (outputs[0]: one sample's new text)")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &Stream::next)
      .def("cancel", &Stream::cancel, "Cancels every unfinished request (their last deltas say finish_reason 'abort')")
      .def_property_readonly("request_ids", &Stream::request_ids, "The request id of each prompt, in prompt order");

  py::class_<Llm>(m, "LLM", "An engine on one model, for offline batches (vLLM's LLM)")
      .def(py::init(&make_llm), py::arg("model"), py::kw_only(), py::arg("tokenizer") = py::none(),
           py::arg("max_model_len") = py::none(), py::arg("max_num_seqs") = py::none(),
           py::arg("max_num_batched_tokens") = py::none(), py::arg("block_size") = py::none(),
           py::arg("kv_cache_dtype") = "auto", py::arg("kv_cache_memory") = py::none(),
           py::arg("gpu_memory_utilization") = py::none(), py::arg("swap_space") = py::none(),
           py::arg("enable_prefix_caching") = true, py::arg("device") = "auto", py::arg("dtype") = "auto",
           py::arg("threads") = py::none(), py::arg("enforce_eager") = false, py::arg("cpu_offload_gb") = py::none(),
           py::arg("n_gpu_layers") = py::none(), py::arg("quantization") = py::none(), py::arg("load_format") = "auto")
      .def("generate", [](Llm& llm, const py::object& prompts, const py::object& sampling_params) {
        return generate(llm, prompts_of(prompts), params_of(sampling_params));
      }, py::arg("prompts"), py::arg("sampling_params") = py::none(),
         "Runs every prompt to completion in one batch; one RequestOutput per prompt, in order")
      .def("stream", [](Llm& llm, const py::object& prompts, const py::object& sampling_params) {
        return start_stream(llm, prompts_of(prompts), params_of(sampling_params));
      }, py::arg("prompts"), py::arg("sampling_params") = py::none(), py::keep_alive<0, 1>(),
         "Submits every prompt and returns an iterator of RequestOutput deltas")
      .def("chat", [](Llm& llm, const py::object& messages, const py::object& sampling_params,
                      bool add_generation_prompt, const py::object& chat_template_kwargs, const py::object& tools) {
        return generate(llm, chat_prompts(llm, messages, add_generation_prompt, tools, chat_template_kwargs),
                        params_of(sampling_params));
      }, py::arg("messages"), py::arg("sampling_params") = py::none(), py::kw_only(),
         py::arg("add_generation_prompt") = true, py::arg("chat_template_kwargs") = py::none(),
         py::arg("tools") = py::none(), "Generates replies to a conversation (or a list of them) with the model's chat template")
      .def("stream_chat", [](Llm& llm, const py::object& messages, const py::object& sampling_params,
                             bool add_generation_prompt, const py::object& chat_template_kwargs, const py::object& tools) {
        return start_stream(llm, chat_prompts(llm, messages, add_generation_prompt, tools, chat_template_kwargs),
                            params_of(sampling_params));
      }, py::arg("messages"), py::arg("sampling_params") = py::none(), py::kw_only(),
         py::arg("add_generation_prompt") = true, py::arg("chat_template_kwargs") = py::none(),
         py::arg("tools") = py::none(), py::keep_alive<0, 1>())
      .def("apply_chat_template", [](const Llm& llm, const py::object& messages, bool add_generation_prompt,
                                     const py::object& chat_template_kwargs, const py::object& tools) {
        return value_or_raise(llm.engine().apply_chat_template(to_json(messages), add_generation_prompt, to_json(tools),
                                                               to_json(chat_template_kwargs)));
      }, py::arg("messages"), py::kw_only(), py::arg("add_generation_prompt") = true,
         py::arg("chat_template_kwargs") = py::none(), py::arg("tools") = py::none())
      .def("tokenize", [](const Llm& llm, const std::string& text, bool add_special_tokens) {
        return llm.engine().tokenize(text, add_special_tokens);
      }, py::arg("text"), py::arg("add_special_tokens") = true)
      .def("detokenize", [](const Llm& llm, const std::vector<int32_t>& ids, bool skip_special_tokens) {
        return llm.engine().detokenize(ids, skip_special_tokens);
      }, py::arg("token_ids"), py::arg("skip_special_tokens") = false)
      .def_property_readonly("model_name", [](const Llm& llm) { return llm.engine().model_name(); })
      .def_property_readonly("max_model_len", [](const Llm& llm) { return llm.engine().max_model_len(); })
      .def_property_readonly("vocab_size", [](const Llm& llm) { return llm.engine().info().vocab_size; })
      .def_property_readonly("device", [](const Llm& llm) { return llm.engine().info().device; })
      .def("shutdown", [](Llm& llm) {
        py::gil_scoped_release nogil;
        llm.engine().shutdown();
      }, "Cancels what is in flight and stops the engine; later calls raise RuntimeError")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Llm& llm, py::args) {
        py::gil_scoped_release nogil;
        llm.engine().shutdown();
      });
}
