// `pagoda chat-template --model PATH --messages FILE.json [--add-generation-prompt]
//                       [--tools FILE.json] [--context FILE.json]`
// Prints the model's chat template rendered for the messages, exactly (no trailing newline).
// PATH is a .gguf file or a Hugging Face model directory. FILE.json holds a list of messages, or
// an object {"messages": [...], "tools": [...]}. --context adds template variables (a JSON object,
// e.g. {"date_string": "26 Jul 2024"}). Errors go to stderr with exit status 1.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "template/chat_template.h"

namespace pagoda::cli {
namespace {

struct ChatTemplateArgs {
  std::string model;
  std::string messages;
  std::string tools;
  std::string context;
  bool add_generation_prompt = false;
};

Result<nlohmann::ordered_json> read_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot open {}", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::ordered_json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("{} is not valid JSON", path);
  return j;
}

Status run(const ChatTemplateArgs& a) {
  PAGODA_ASSIGN_OR_RETURN(auto input, read_json_file(a.messages));
  ChatTemplateOptions opts;
  opts.add_generation_prompt = a.add_generation_prompt;
  nlohmann::ordered_json messages = input;
  if (input.is_object()) {
    if (!input.contains("messages")) return invalid_argument("{}: expected a list of messages or {{\"messages\": [...]}}", a.messages);
    messages = input["messages"];
    if (input.contains("tools")) opts.tools = input["tools"];
  }
  if (!a.tools.empty()) {
    PAGODA_ASSIGN_OR_RETURN(opts.tools, read_json_file(a.tools));
  }
  if (!a.context.empty()) {
    PAGODA_ASSIGN_OR_RETURN(opts.extra_context, read_json_file(a.context));
    if (!opts.extra_context.is_object()) return invalid_argument("{}: context must be a JSON object", a.context);
  }
  PAGODA_ASSIGN_OR_RETURN(ChatTemplate tmpl, load_chat_template(a.model, !opts.tools.is_null()));
  PAGODA_ASSIGN_OR_RETURN(std::string out, tmpl.render(messages, opts));
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
    return io_error("writing to stdout failed");
  return Status();
}

const CommandRegistration kRegistration(
    "chat-template", "Render a model's chat template for a list of messages (as transformers' apply_chat_template)",
    [](CLI::App* sub) -> std::function<int()> {
      auto args = std::make_shared<ChatTemplateArgs>();
      sub->add_option("--model", args->model, "A .gguf file or a Hugging Face model directory")->required();
      sub->add_option("--messages", args->messages, "JSON file: a list of messages, or {\"messages\": [...], \"tools\": [...]}")
          ->required();
      sub->add_flag("--add-generation-prompt", args->add_generation_prompt, "Append the assistant turn header");
      sub->add_option("--tools", args->tools, "JSON file: a list of tool schemas");
      sub->add_option("--context", args->context, "JSON file: an object of extra template variables");
      return [args]() {
        Status s = run(*args);
        if (s.ok()) return 0;
        std::fprintf(stderr, "pagoda chat-template: %s\n", s.to_string().c_str());
        return 1;
      };
    });

}  // namespace
}  // namespace pagoda::cli
