#include "api/tool_call_parser.h"

#include <nlohmann/json.hpp>

#include <cctype>

namespace pagoda::api {

const ToolCallFormat& hermes_format() {
  static const ToolCallFormat f{"hermes", "<tool_call>", "</tool_call>", false, false, "", "arguments"};
  return f;
}
const ToolCallFormat& llama3_json_format() {
  static const ToolCallFormat f{"llama3_json", "<|python_tag|>", "", false, true, ";", "parameters"};
  return f;
}
const ToolCallFormat& mistral_format() {
  static const ToolCallFormat f{"mistral", "[TOOL_CALLS]", "", true, false, "", "arguments"};
  return f;
}
const ToolCallFormat& json_format() {
  static const ToolCallFormat f{"json", "", "", false, true, "", "arguments"};
  return f;
}

const ToolCallFormat& tool_call_format_for_template(std::string_view src) {
  if (src.find("<tool_call>") != std::string_view::npos) return hermes_format();
  if (src.find("[TOOL_CALLS]") != std::string_view::npos) return mistral_format();
  if (src.find("<|python_tag|>") != std::string_view::npos || src.find("ipython") != std::string_view::npos)
    return llama3_json_format();
  return json_format();
}

namespace {
bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
std::string unescape(const std::string& raw) {
  auto j = nlohmann::json::parse("\"" + raw + "\"", nullptr, false);
  return j.is_string() ? j.get<std::string>() : raw;
}
bool all_space(std::string_view s) {
  for (char c : s)
    if (!is_space(c)) return false;
  return true;
}
}  // namespace

ToolCallParser::ToolCallParser(const ToolCallFormat& format, bool parallel, std::string id_prefix)
    : f_(format), parallel_(parallel), id_prefix_(std::move(id_prefix)) {}

ParsedDelta ToolCallParser::push(std::string_view text) {
  ParsedDelta out;
  buf_.append(text);
  step(&out);
  // Drop what was consumed (keeps buf_ to the held-back tail).
  buf_.erase(0, pos_);
  pos_ = 0;
  return out;
}

void ToolCallParser::emit_args(std::string_view s, ParsedDelta* out) {
  args_ += s;
  if (!started_) {
    args_pending_ += s;
    return;
  }
  if (!parallel_ && index_ > 0) return;
  if (!out->calls.empty() && out->calls.back().index == index_) {
    out->calls.back().arguments += s;
    return;
  }
  ToolCallDelta d;
  d.index = index_;
  d.arguments = std::string(s);
  out->calls.push_back(std::move(d));
}

void ToolCallParser::call_char(char c, ParsedDelta* out) {
  raw_ += c;
  call_text_ += c;
  const bool args_now = in_value_ && cur_key_ == f_.arguments_key;
  auto start_if_named = [&] {
    if (!name_done_ || started_) return;
    started_ = true;
    if (!parallel_ && index_ > 0) return;
    ToolCallDelta d;
    d.index = index_;
    d.first = true;
    d.id = id_prefix_ + std::to_string(index_);
    d.name = name_;
    out->calls.push_back(std::move(d));
    if (!args_pending_.empty()) {
      std::string p = std::move(args_pending_);
      args_pending_.clear();
      args_.resize(args_.size() - p.size());
      emit_args(p, out);
    }
  };
  if (in_string_) {
    if (escape_) escape_ = false;
    else if (c == '\\') escape_ = true;
    else if (c == '"') in_string_ = false;
    if (depth_ == 1 && in_string_) cur_string_ += c;
    if (!in_string_ && depth_ == 1) {
      if (expect_key_) {
        key_ = unescape(cur_string_);
      } else if (cur_key_ == "name" && !name_done_) {
        name_ = unescape(cur_string_);
        name_done_ = true;
        start_if_named();
      }
    }
    if (args_now) emit_args(std::string_view(&c, 1), out);
    return;
  }
  if (is_space(c)) {
    if (args_now && value_started_) emit_args(std::string_view(&c, 1), out);
    return;
  }
  switch (c) {
    case '"':
      in_string_ = true;
      if (depth_ == 1) cur_string_.clear();
      if (args_now) {
        value_started_ = true;
        emit_args(std::string_view(&c, 1), out);
      }
      return;
    case '{':
    case '[':
      ++depth_;
      if (depth_ == 1) {
        expect_key_ = true;
        in_value_ = false;
      } else if (args_now) {
        value_started_ = true;
        emit_args(std::string_view(&c, 1), out);
      }
      return;
    case '}':
    case ']':
      if (depth_ == 1) {
        depth_ = 0;
        in_value_ = false;
        end_call(out);
        return;
      }
      --depth_;
      if (args_now) {
        emit_args(std::string_view(&c, 1), out);
        if (depth_ == 1) in_value_ = false;
      }
      return;
    case ':':
      if (depth_ == 1 && expect_key_) {
        expect_key_ = false;
        in_value_ = true;
        value_started_ = false;
        cur_key_ = key_;
      } else if (args_now) {
        emit_args(std::string_view(&c, 1), out);
      }
      return;
    case ',':
      if (depth_ == 1) {
        in_value_ = false;
        expect_key_ = true;
      } else if (args_now) {
        emit_args(std::string_view(&c, 1), out);
      }
      return;
    default:
      if (args_now) {
        value_started_ = true;
        emit_args(std::string_view(&c, 1), out);
      }
      return;
  }
}

void ToolCallParser::end_call(ParsedDelta* out) {
  auto j = nlohmann::ordered_json::parse(call_text_, nullptr, false);
  const bool ok = j.is_object() && j.contains("name") && j["name"].is_string();
  if (!ok) {
    // Not a call after all: everything since the call region began is content.
    out->content += raw_;
    raw_.clear();
    mode_ = Mode::kContent;
    in_list_ = false;
  } else {
    if (!started_) {
      name_ = j["name"].get<std::string>();
      name_done_ = true;
      // start now (name came last or was escaped oddly)
      started_ = true;
      if (parallel_ || index_ == 0) {
        ToolCallDelta d;
        d.index = index_;
        d.first = true;
        d.id = id_prefix_ + std::to_string(index_);
        d.name = name_;
        out->calls.push_back(std::move(d));
        if (!args_pending_.empty()) {
          std::string p = std::move(args_pending_);
          args_.resize(args_.size() - p.size());
          emit_args(p, out);
        }
      }
    }
    std::string args = args_;
    if (args.empty()) {
      const char* keys[] = {"arguments", "parameters"};
      for (const char* k : keys)
        if (j.contains(k)) args = j[k].is_string() ? j[k].get<std::string>() : j[k].dump();
      if (args.empty()) args = "{}";
      emit_args(args, out);
    }
    if (parallel_ || index_ == 0) calls_.push_back({id_prefix_ + std::to_string(index_), name_, args});
    ++index_;
    raw_.clear();
    mode_ = in_list_ ? Mode::kBeforeCall : Mode::kAfterCall;
  }
  // Reset the per-call scanner.
  depth_ = 0;
  in_string_ = escape_ = false;
  expect_key_ = true;
  key_.clear();
  cur_key_.clear();
  cur_string_.clear();
  in_value_ = value_started_ = false;
  name_.clear();
  call_text_.clear();
  args_.clear();
  args_pending_.clear();
  name_done_ = started_ = args_done_ = false;
}

void ToolCallParser::step(ParsedDelta* out) {
  auto content = [&](std::string_view s) {
    if (s.empty()) return;
    if (!calls_.empty() && all_space(s)) return;  // whitespace between / after calls
    out->content += s;
  };
  while (pos_ < buf_.size()) {
    const std::string_view rest = std::string_view(buf_).substr(pos_);
    switch (mode_) {
      case Mode::kStart: {
        size_t k = 0;
        while (k < rest.size() && is_space(rest[k])) ++k;
        if (k == rest.size()) return;  // only whitespace so far: wait
        const std::string_view r = rest.substr(k);
        if (!f_.begin.empty()) {
          if (r.size() < f_.begin.size() && f_.begin.compare(0, r.size(), r) == 0) return;  // a prefix: wait
          if (r.substr(0, f_.begin.size()) == f_.begin) {
            raw_ = std::string(rest.substr(0, k + f_.begin.size()));
            pos_ += k + f_.begin.size();
            mode_ = Mode::kBeforeCall;
            continue;
          }
        }
        if (f_.begin_optional && (r[0] == '{' || (r[0] == '[' && f_.name == "json"))) {
          raw_ = std::string(rest.substr(0, k));
          pos_ += k;
          mode_ = Mode::kBeforeCall;
          continue;
        }
        mode_ = Mode::kContent;
        continue;
      }
      case Mode::kContent: {
        if (f_.begin.empty() || f_.begin_optional) {  // bare formats: calls only at the start
          content(rest);
          pos_ = buf_.size();
          return;
        }
        const size_t at = rest.find(f_.begin);
        if (at != std::string_view::npos) {
          content(rest.substr(0, at));
          raw_ = f_.begin;
          pos_ += at + f_.begin.size();
          mode_ = Mode::kBeforeCall;
          continue;
        }
        // Hold back a tail that could start the begin marker.
        size_t keep = 0;
        for (size_t n = std::min(rest.size(), f_.begin.size() - 1); n > 0; --n)
          if (f_.begin.compare(0, n, rest.substr(rest.size() - n)) == 0) {
            keep = n;
            break;
          }
        content(rest.substr(0, rest.size() - keep));
        pos_ += rest.size() - keep;
        return;
      }
      case Mode::kBeforeCall: {
        const char c = rest[0];
        if (is_space(c)) {
          raw_ += c;
          ++pos_;
          continue;
        }
        if (c == '[' && !in_list_ && (f_.list || f_.name == "json") && index_ == 0) {
          in_list_ = true;
          raw_ += c;
          ++pos_;
          continue;
        }
        if (in_list_ && c == ',' && index_ > 0) {
          raw_ += c;
          ++pos_;
          continue;
        }
        if (in_list_ && c == ']') {
          in_list_ = false;
          ++pos_;
          raw_.clear();
          mode_ = Mode::kAfterCall;
          continue;
        }
        if (c == '{') {
          mode_ = Mode::kCall;
          continue;
        }
        // Not a call.
        content(raw_);
        raw_.clear();
        in_list_ = false;
        mode_ = Mode::kContent;
        if (f_.begin.empty() || f_.begin_optional) {
          content(rest);
          pos_ = buf_.size();
          return;
        }
        continue;
      }
      case Mode::kCall: {
        size_t i = 0;
        while (i < rest.size() && mode_ == Mode::kCall) call_char(rest[i++], out);
        pos_ += i;
        continue;
      }
      case Mode::kAfterCall: {
        const char c = rest[0];
        if (is_space(c)) {
          ++pos_;
          continue;
        }
        if (!f_.end.empty()) {
          if (rest.size() < f_.end.size() && f_.end.compare(0, rest.size(), rest) == 0) return;
          if (rest.substr(0, f_.end.size()) == f_.end) {
            pos_ += f_.end.size();
            mode_ = Mode::kContent;
            continue;
          }
        }
        if (!f_.separator.empty()) {
          if (rest.substr(0, f_.separator.size()) == f_.separator) {
            pos_ += f_.separator.size();
            raw_.clear();
            mode_ = Mode::kBeforeCall;
            continue;
          }
        }
        if (!f_.begin.empty() && !f_.begin_optional) {
          mode_ = Mode::kContent;
          continue;
        }
        mode_ = Mode::kContent;
        content(rest);
        pos_ = buf_.size();
        return;
      }
      case Mode::kDone:
        pos_ = buf_.size();
        return;
    }
  }
}

ParsedDelta ToolCallParser::finish() {
  ParsedDelta out;
  step(&out);
  std::string rest = buf_.substr(pos_);
  buf_.clear();
  pos_ = 0;
  if (mode_ == Mode::kCall || mode_ == Mode::kBeforeCall) {
    rest = raw_ + rest;  // an unfinished call: its text is content
    raw_.clear();
  }
  if (!rest.empty() && !(!calls_.empty() && all_space(rest))) out.content += rest;
  mode_ = Mode::kDone;
  return out;
}

}  // namespace pagoda::api
