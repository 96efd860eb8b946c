// The gRPC front end (proto/pagoda.proto, service pagoda.v1.Pagoda) on the same engine and
// ServingContext as HTTP: same API keys (metadata `authorization: Bearer <key>`), rate limits,
// queue bound, draining and metrics. Uses gRPC's synchronous server (its own thread pool):
// Generate waits on the engine stream in short slices and checks for client cancellation
// between them, cancelling the engine request when the call is cancelled.
//
// Status mapping: kInvalidArgument -> INVALID_ARGUMENT, kOutOfRange -> OUT_OF_RANGE,
// 401 -> UNAUTHENTICATED, 429 -> RESOURCE_EXHAUSTED, draining -> UNAVAILABLE.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "server/serving_context.h"

namespace pagoda::server {

class GrpcServer {
 public:
  explicit GrpcServer(ServingContext& ctx);
  ~GrpcServer();
  // Binds host:port and starts serving; kIoError if the port cannot be bound.
  Status start(const std::string& host, int port);
  int port() const { return port_; }
  // Stops accepting calls, waits up to `deadline_s` for running ones, then cancels them.
  void shutdown(double deadline_s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace pagoda::server
