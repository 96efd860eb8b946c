#include "server/startup_handler.h"

#include <nlohmann/json.hpp>

namespace pagoda::server {

void StartupHandler::set_failed(std::string error) {
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = std::move(error);
}

HandlerResult StartupHandler::handle(HttpRequest& request) {
  if (HttpHandler* inner = inner_.load(std::memory_order_acquire)) return inner->handle(request);
  std::string failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed = failed_;
  }
  HandlerResult r;
  r.response.status = 503;
  r.response.headers.emplace_back("Retry-After", "1");
  if (request.path == "/health") {
    nlohmann::ordered_json j{{"status", failed.empty() ? "loading" : "failed"}};
    if (!failed.empty()) j["error"] = failed;
    r.response.body = j.dump();
  } else {
    const std::string message = failed.empty() ? "the model is loading; retry shortly" : "the engine failed to start: " + failed;
    r.response.body = nlohmann::ordered_json{{"error",
                                              {{"message", message},
                                               {"type", "service_unavailable"},
                                               {"param", nullptr},
                                               {"code", failed.empty() ? "loading" : "failed"}}}}
                          .dump();
  }
  return r;
}

HttpResponse StartupHandler::protocol_error(int status, const std::string& message) {
  if (HttpHandler* inner = inner_.load(std::memory_order_acquire)) return inner->protocol_error(status, message);
  HttpResponse r;
  r.status = status;
  r.close = true;
  r.body = nlohmann::ordered_json{{"error", {{"message", message}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", nullptr}}}}
               .dump();
  return r;
}

}  // namespace pagoda::server
