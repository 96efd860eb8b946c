// The gateway's HTTP front end and its upstream client, on Boost.Asio/Beast with C++20
// coroutines: one io_context per I/O thread (`threads`), run by that thread alone; accepted client
// connections are dealt to them in turn, one coroutine per connection (keep-alive), and the
// request to a worker runs on the same thread. Routes:
//   POST /v1/completions, /v1/chat/completions   proxied to a worker (docs/gateway.md)
//   GET  /v1/models[/ID]                         the models the available workers serve
//   GET  /health                                 200 while a worker is available and not draining
//   GET  /metrics                                the gateway's Prometheus metrics
// Streams (text/event-stream) are forwarded chunk by chunk as they arrive; other responses are
// read whole (the worker sends them at once) and then sent. A request is retried on another worker
// only while nothing of its response has been sent to the client.
//
// Thread-safety: start()/drain()/stop() from one controlling thread.
#pragma once

#include <memory>

#include "common/status.h"
#include "gateway/config.h"

namespace pagoda::gateway {

class GatewayServer {
 public:
  explicit GatewayServer(GatewayConfig config);
  ~GatewayServer();
  // Binds and listens (kIoError naming the address when it cannot).
  Status listen();
  int port() const;
  // Starts the io threads, the health checks and DNS refreshes (returns at once).
  void start();
  // Graceful drain: stops accepting, answers new requests 503, /health 503; returns when no request
  // is in flight or after timeout_s (the rest are cut). Returns the requests still in flight then.
  int64_t drain(double timeout_s);
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::gateway
