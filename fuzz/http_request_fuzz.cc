// libFuzzer target: the HTTP request path of `pagoda serve` without the socket: bytes -> Beast's
// request parser (the server's header and body limits) -> the server's request rules
// (server/http_request_rules.h: transfer codings, JSON content type, Authorization) ->
// HttpRequest -> the OpenAI body parser of the route the path names (api/openai_request.h).
// Several pipelined requests in one input are parsed in turn, as a keep-alive connection does.
// Findings are crashes, sanitizer reports and failed checks.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "api/openai_request.h"
#include "server/http_request_rules.h"

namespace {
namespace http = boost::beast::http;

void check(bool ok) {
  if (!ok) std::abort();
}

void route(const pagoda::server::HttpRequest& r) {
  if (r.method != "POST") return;
  if (pagoda::server::check_request_content_type(r.method, r.header("content-type"))) return;
  if (r.path == "/v1/chat/completions") {
    pagoda::api::ChatRequest c;
    if (auto e = pagoda::api::parse_chat_request(r.body, &c)) check(e->status == 400);
    else check(!c.messages.empty() && !pagoda::api::check_stop_strings(c.options.stop));
  } else if (r.path == "/v1/completions") {
    pagoda::api::CompletionRequest c;
    if (auto e = pagoda::api::parse_completion_request(r.body, &c)) check(e->status == 400);
    else check(!c.prompts.empty() && !pagoda::api::check_stop_strings(c.options.stop));
  } else if (r.path == "/tokenize") {
    pagoda::api::TokenizeRequest t;
    (void)pagoda::api::parse_tokenize_request(r.body, &t);
  } else if (r.path == "/detokenize") {
    pagoda::api::DetokenizeRequest d;
    (void)pagoda::api::parse_detokenize_request(r.body, &d);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  for (int request = 0; request < 8 && !in.empty(); ++request) {
    // Empty lines before a request line are skipped, as the connection does.
    while (!in.empty() && (in.front() == '\r' || in.front() == '\n')) in.remove_prefix(1);
    if (in.empty()) break;
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 << 10);
    parser.body_limit(1 << 20);
    // As the connection does: the header alone first (async_read_header), its framing checked,
    // then the body; Beast must not parse a body whose Transfer-Encoding the server refuses.
    parser.eager(false);
    boost::beast::error_code ec;
    size_t used = 0;
    bool header_checked = false;
    while (!parser.is_done()) {
      const size_t n = parser.put(boost::asio::buffer(in.data() + used, in.size() - used), ec);
      used += n;
      if (ec == http::error::need_more) {
        ec = {};
        if (n == 0 || used >= in.size()) {  // the input ends inside this request
          parser.put_eof(ec);
          if (ec || !parser.is_done()) return 0;
          break;
        }
        continue;
      }
      if (ec) return 0;
      if (parser.is_header_done() && !header_checked) {
        header_checked = true;
        const auto te = parser.get()[http::field::transfer_encoding];
        if (auto v = pagoda::server::check_request_framing(std::string_view(te.data(), te.size()))) {
          check(v->status == 501 && !v->message.empty());
          return 0;  // the connection answers and closes
        }
        parser.eager(true);
      }
      if (n == 0 && !parser.is_done()) return 0;  // no progress without an error: stop
    }
    check(used <= in.size());
    in.remove_prefix(used);
    pagoda::server::HttpRequest r = pagoda::server::to_http_request(parser.get(), "127.0.0.1");
    check(!r.method.empty());
    for (const auto& [name, value] : r.headers)
      for (char c : name) check(!(c >= 'A' && c <= 'Z'));
    const std::string token = pagoda::server::bearer_token(r.header("authorization"));
    check(token.size() <= r.header("authorization").size());
    if (!token.empty()) check(token.front() != ' ' && token.back() != ' ');
    (void)pagoda::server::peer_host(r.header("authorization"));
    route(r);
    if (!parser.keep_alive()) break;
  }
  return 0;
}
