// A TCP socket bound (not yet listening) to host:port, so that a server can claim its port before
// the model loads: a port in use fails at once, and clients are refused (not queued) until the
// HTTP server listens on it (HttpServerOptions::bound_fd). Owns the descriptor until released.
#pragma once

#include <string>

#include "common/status.h"

namespace pagoda::server {

class BoundSocket {
 public:
  BoundSocket() = default;
  BoundSocket(BoundSocket&& other) noexcept : fd_(other.fd_), port_(other.port_) { other.fd_ = -1; }
  BoundSocket& operator=(BoundSocket&& other) noexcept;
  BoundSocket(const BoundSocket&) = delete;
  BoundSocket& operator=(const BoundSocket&) = delete;
  ~BoundSocket();

  // host: a numeric IPv4 or IPv6 address; port 0 binds any free port (port() says which).
  // kIoError naming the address when it is taken; kInvalidArgument for a bad host or port.
  static Result<BoundSocket> bind(const std::string& host, int port);

  int fd() const { return fd_; }
  int port() const { return port_; }
  // The descriptor, no longer owned (closing it is the caller's).
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace pagoda::server
