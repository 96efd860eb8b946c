// Asynchronous HTTP/1.1 server on Boost.Asio/Beast: one acceptor, a small pool of io_context
// threads, one strand per connection, no thread per connection.
//
// Per connection: keep-alive; header and body limits (431 / 413 and close); "Expect:
// 100-continue"; an idle/slow-client timeout on reading a request and on each write; HEAD on any
// GET route (the GET response's head, no body); Transfer-Encoding other than plain "chunked" is
// 501. While a response is produced asynchronously (AsyncBody: SSE or waiting for the engine) the
// connection keeps a read pending on the socket, so a client that disconnects is noticed at once
// (EOF or reset) and the body is aborted; a failed or timed-out write aborts it too. Bytes the
// client sends meanwhile (HTTP/1.1 pipelining, a stray CRLF) are kept, up to the header limit, and
// parsed after the response: pipelined requests are answered in order.
//
// Handler results marked `deferred` run on a bounded work pool (worker_threads, max_pending), not
// on the I/O threads; a full pool is answered 503 at once. With max_connections > 0, a connection
// beyond it is answered 503 and closed at once (instead of waiting in the kernel's backlog when the
// process runs out of file descriptors).
//
// Thread-safety: start()/stop() from one controlling thread; the handler is called on io threads,
// concurrently for different connections.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/http_message.h"

namespace pagoda::server {

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual HandlerResult handle(HttpRequest& request) = 0;
  // A response for a request that could not be parsed (400, 413, 431); the connection closes after it.
  virtual HttpResponse protocol_error(int status, const std::string& message) = 0;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port (see HttpServer::port())
  int threads = 2;                       // io_context threads
  size_t body_limit = 8 << 20;           // bytes
  size_t header_limit = 16 << 10;        // bytes, request line + headers
  double idle_timeout_s = 30;            // waiting for (the rest of) a request
  double write_timeout_s = 30;           // one write to a slow client
  // >= 0: a socket already bound to host:port (server/listen_socket.h), which listen() takes over
  // (and closes with the server) instead of binding one itself.
  int bound_fd = -1;
  int worker_threads = 2;                // the work pool for deferred handler work
  size_t max_pending = 4096;             // deferred tasks that may wait for a worker
  int64_t max_connections = 0;           // open connections; 0: no limit
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler& handler);
  ~HttpServer();
  // Binds and listens; kIoError naming the address when it is taken or invalid.
  Status listen();
  int port() const { return port_; }
  // Starts accepting and the io threads (returns at once).
  void start();
  // Stops the io threads and closes every connection (in-flight bodies are aborted).
  void stop();
  int64_t num_connections() const { return connections_->load(); }

 private:
  struct Impl;
  HttpServerOptions options_;
  HttpHandler& handler_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::thread> threads_;
  std::shared_ptr<std::function<void()>> accept_loop_;
  std::shared_ptr<std::atomic<int64_t>> connections_ = std::make_shared<std::atomic<int64_t>>(0);
  int port_ = 0;
};

}  // namespace pagoda::server
