// The server's own view of an HTTP exchange, independent of the socket code: a parsed request,
// a complete response, or an asynchronous body producer (SSE streams and responses that wait for
// the engine).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pagoda::server {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // target without the query string
  std::string query;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote;                          // peer address
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after sending
};

// A response produced over time. The connection calls attach() once (on its strand), then poll()
// on its strand whenever wake() was called, until poll() reports done; abort() if the client goes
// away first. wake may be called from any thread, any number of times.
class AsyncBody {
 public:
  virtual ~AsyncBody() = default;
  // true: SSE (headers now, then chunks); false: one response when done.
  virtual bool streaming() const = 0;
  virtual void attach(std::function<void()> wake) = 0;
  struct Poll {
    std::string data;  // streaming: bytes to send now; otherwise the whole body once done
    bool done = false;
    int status = 200;  // non-streaming only
  };
  virtual Poll poll() = 0;
  virtual void abort() = 0;
};

struct HandlerResult {
  HttpResponse response;             // used when body and deferred are null
  std::shared_ptr<AsyncBody> body;
  // Headers added to the head of an asynchronous body's response (CORS and the like).
  std::vector<std::pair<std::string, std::string>> body_headers;
  // Work too heavy for an I/O thread (JSON parsing, chat templating, tokenizing): the server runs
  // it on its bounded work pool and then handles its result like this one (it must not itself
  // return a deferred result). A full pool is a 503.
  std::function<HandlerResult()> deferred;
};

const char* http_status_text(int status);
// "HTTP/1.1 <status> <text>\r\n" + headers + Content-Length (or chunked) + "\r\n".
std::string format_response_head(int status, const std::string& content_type,
                                 const std::vector<std::pair<std::string, std::string>>& headers, bool chunked,
                                 size_t content_length, bool close);
// One chunk of the chunked transfer coding; empty data: the last chunk "0\r\n\r\n".
void append_chunk(const std::string& data, std::string* out);

}  // namespace pagoda::server
