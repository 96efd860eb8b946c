// StartupHandler: the HTTP handler `pagoda serve` listens with from before the model loads. Until
// set_ready() it answers GET /health with 503 {"status": "loading"} and every other request with
// 503 (OpenAI error body, code "loading", Retry-After: 1), so load balancers and clients see the
// port open and a clear state instead of a refused connection; after set_ready() every request
// goes to the real handler. set_failed() (the engine could not start) turns /health into 503
// {"status": "failed", "error": ...} until the process exits.
// Thread-safety: handle() from any io thread; set_ready() / set_failed() once, from any thread
// (the inner handler must outlive the server).
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "server/http_server.h"

namespace pagoda::server {

class StartupHandler final : public HttpHandler {
 public:
  HandlerResult handle(HttpRequest& request) override;
  HttpResponse protocol_error(int status, const std::string& message) override;
  void set_ready(HttpHandler& inner) { inner_.store(&inner, std::memory_order_release); }
  void set_failed(std::string error);
  bool ready() const { return inner_.load(std::memory_order_acquire) != nullptr; }

 private:
  std::atomic<HttpHandler*> inner_{nullptr};
  std::mutex mu_;
  std::string failed_;  // guarded by mu_
};

}  // namespace pagoda::server
