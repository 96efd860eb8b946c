#include "server/http_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <optional>

#include "server/http_request_rules.h"
#include "server/work_pool.h"

namespace pagoda::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

std::chrono::steady_clock::duration secs(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// One client connection. Everything runs on the connection's strand (the stream's executor).
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const HttpServerOptions& options, HttpHandler& handler, WorkPool& pool,
             std::shared_ptr<std::atomic<int64_t>> count, bool reject)
      : stream_(std::move(socket)), options_(options), handler_(handler), pool_(pool), count_(std::move(count)),
        reject_(reject) {
    ++*count_;
    beast::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string();
  }
  ~Connection() {
    abort_body();
    --*count_;
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->reject_) {
        return self->send_response(
            self->handler_.protocol_error(503, "too many open connections (the server's limit is " +
                                                   std::to_string(self->options_.max_connections) + "); retry later"),
            true);
      }
      self->read_request();
    });
  }

 private:
  void read_request() {
    if (closed_) return;
    // RFC 9112 2.2: empty lines before a request line are ignored (a stray CRLF after a body).
    {
      auto data = buffer_.data();
      const char* p = static_cast<const char*>(data.data());
      size_t skip = 0;
      while (skip < data.size() && (p[skip] == '\r' || p[skip] == '\n')) ++skip;
      buffer_.consume(skip);
    }
    if (buffer_.size() == 0) {
      // Wait for the first byte of a request ourselves: Beast's parser takes a leading CRLF for a
      // malformed request line.
      stream_.expires_after(secs(options_.idle_timeout_s));
      stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
        if (ec) return self->on_read_error(ec);
        self->buffer_.commit(n);
        self->read_request();
      });
      return;
    }
    head_ = false;
    parser_.emplace();
    parser_->body_limit(options_.body_limit);
    parser_->header_limit(static_cast<uint32_t>(options_.header_limit));
    stream_.expires_after(secs(options_.idle_timeout_s));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    auto& req = parser_->get();
    const auto te = req[http::field::transfer_encoding];
    if (auto v = check_request_framing(std::string_view(te.data(), te.size())))
      return send_response(handler_.protocol_error(v->status, v->message), true);
    if (parser_->is_done()) return dispatch_request();
    auto expect = req[http::field::expect];
    if (beast::iequals(expect, "100-continue")) {
      out_ = "HTTP/1.1 100 Continue\r\n\r\n";
      stream_.expires_after(secs(options_.write_timeout_s));
      net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(secs(options_.idle_timeout_s));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->on_read_error(ec);
      self->dispatch_request();
    });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::body_limit) return send_response(handler_.protocol_error(413, "the request body is larger than the limit of " + std::to_string(options_.body_limit) + " bytes"), true);
    if (ec == http::error::header_limit) return send_response(handler_.protocol_error(431, "the request headers are too large"), true);
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted || ec == http::error::partial_message)
      return close();
    // Anything else is a malformed request.
    send_response(handler_.protocol_error(400, std::string("malformed HTTP request: ") + ec.message()), true);
  }

  void dispatch_request() {
    auto& req = parser_->get();
    HttpRequest r = to_http_request(req, remote_);
    keep_alive_ = req.keep_alive();
    head_ = r.method == "HEAD";
    parser_.reset();
    HandlerResult res = run_handler([&] { return handler_.handle(r); });
    if (res.deferred) return defer(std::move(res.deferred));
    on_handled(std::move(res));
  }

  template <class Fn>
  HandlerResult run_handler(Fn&& fn) {
    HandlerResult res;
    try {
      res = fn();
    } catch (const std::exception& e) {
      res = HandlerResult();
      res.response = handler_.protocol_error(500, std::string("internal error: ") + e.what());
    }
    return res;
  }

  // Runs `work` on the pool; its result comes back to this connection's strand. No read is
  // pending meanwhile (the work is bounded; the body that follows watches the socket).
  void defer(std::function<HandlerResult()> work) {
    stream_.expires_never();
    auto self = shared_from_this();
    auto ex = stream_.get_executor();
    const bool queued = pool_.try_submit([self, ex, work = std::move(work)]() mutable {
      auto res = std::make_shared<HandlerResult>(self->run_handler(work));
      work = nullptr;
      net::post(ex, [self, res] {
        if (res->deferred) {
          res->deferred = nullptr;
          res->response = self->handler_.protocol_error(500, "internal error: a deferred handler deferred again");
          res->body.reset();
        }
        self->on_handled(std::move(*res));
      });
    });
    if (!queued)
      send_response(handler_.protocol_error(503, "the server is busy (too many requests being parsed); retry later"),
                    true);
  }

  void on_handled(HandlerResult res) {
    if (closed_) {
      if (res.body) res.body->abort();
      return;
    }
    if (!res.body) return send_response(res.response, res.response.close);
    body_headers_ = std::move(res.body_headers);
    start_body(std::move(res.body));
  }

  void send_response(const HttpResponse& res, bool close_after) {
    close_after_ = close_after || !keep_alive_;
    out_ = format_response_head(res.status, res.content_type, res.headers, false, res.body.size(), close_after_);
    if (!head_) out_ += res.body;
    stream_.expires_after(secs(options_.write_timeout_s));
    net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      if (self->close_after_) return self->lingering_close();
      self->read_request();
    });
  }

  // Closing with unread request bytes in the socket makes the kernel send a reset, which can
  // destroy the response we just sent before the client reads it: half-close, then discard what
  // the client still sends for up to a second, then close.
  void lingering_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(1));
    discard_ = std::make_shared<std::array<char, 8192>>();
    drain_discard(0);
  }
  void drain_discard(size_t total) {
    stream_.async_read_some(net::buffer(*discard_), [self = shared_from_this(), total](beast::error_code ec, size_t n) {
      if (ec || total + n > (4u << 20)) return self->close();
      self->drain_discard(total + n);
    });
  }

  // ---- asynchronous bodies ----

  void start_body(std::shared_ptr<AsyncBody> body) {
    body_ = std::move(body);
    // Pending operations keep a connection alive; while a body is produced there may be none (the
    // watch read stops once the client has pipelined enough bytes), so the body holds it until it
    // ends (finish_body / close).
    hold_ = shared_from_this();
    body_done_ = false;
    pending_out_.clear();
    if (body_->streaming()) {
      auto headers = body_headers_;
      headers.insert(headers.begin(), {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
      pending_out_ = format_response_head(200, "text/event-stream; charset=utf-8", headers, true, 0, !keep_alive_);
    }
    std::weak_ptr<Connection> weak = weak_from_this();
    auto ex = stream_.get_executor();
    body_->attach([weak, ex] {
      net::post(ex, [weak] {
        if (auto self = weak.lock()) self->pump();
      });
    });
    start_watch();
    pump();
  }

  void pump() {
    if (!body_ || writing_ || closed_) return;
    std::string out = std::move(pending_out_);
    pending_out_.clear();
    if (!body_done_) {
      AsyncBody::Poll p = body_->poll();
      if (body_->streaming()) {
        if (!p.data.empty()) append_chunk(p.data, &out);
        if (p.done) {
          append_chunk({}, &out);
          body_done_ = true;
        }
      } else if (p.done) {
        out += format_response_head(p.status, "application/json", body_headers_, false, p.data.size(), !keep_alive_);
        out += p.data;
        body_done_ = true;
      }
    }
    if (out.empty()) return;
    writing_ = true;
    out_ = std::move(out);
    stream_.expires_after(secs(options_.write_timeout_s));
    net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) {
        self->abort_body();
        return self->close();
      }
      if (self->body_done_) return self->finish_body();
      self->pump();
    });
  }

  void finish_body() {
    body_.reset();
    auto keep = std::move(hold_);  // released when this returns (a read below holds it again)
    if (!keep_alive_) return close();
    if (watching_) {
      // The pending watch read would swallow the next request's wait: cancel it, then read.
      resume_after_watch_ = true;
      beast::error_code ec;
      stream_.socket().cancel(ec);
      return;
    }
    read_request();
  }

  // A read kept pending while the body is produced: EOF or an error means the client left.
  void start_watch() {
    watching_ = true;
    stream_.expires_never();
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->on_watch(ec, n);
    });
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) {
      // Bytes while the response is produced (a pipelined request, a stray CRLF): keep them for the
      // parser and keep watching for EOF, up to a bound (beyond it the client's next request waits
      // in the socket; a write to a client that left fails and aborts the body).
      buffer_.commit(n);
      if (resume_after_watch_) {
        resume_after_watch_ = false;
        return read_request();
      }
      if (body_ && !body_done_ && buffer_.size() < kMaxPipelined) start_watch();
      return;
    }
    if (ec == net::error::operation_aborted && resume_after_watch_) {
      resume_after_watch_ = false;
      return read_request();
    }
    abort_body();
    close();
  }

  void abort_body() {
    if (body_ && !body_done_) {
      body_done_ = true;
      body_->abort();
    }
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    abort_body();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    body_.reset();
    net::post(stream_.get_executor(), [keep = std::move(hold_)] {});  // released after this handler
  }

  static constexpr size_t kMaxPipelined = 64 << 10;

  beast::tcp_stream stream_;
  const HttpServerOptions& options_;
  HttpHandler& handler_;
  WorkPool& pool_;
  std::shared_ptr<std::atomic<int64_t>> count_;
  bool reject_ = false, head_ = false;
  std::vector<std::pair<std::string, std::string>> body_headers_;
  std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string out_, pending_out_;
  std::shared_ptr<std::array<char, 8192>> discard_;
  bool keep_alive_ = true, close_after_ = false, closed_ = false;
  std::shared_ptr<AsyncBody> body_;
  std::shared_ptr<Connection> hold_;  // self while a body is produced (see start_body)
  bool body_done_ = false, writing_ = false, watching_ = false, resume_after_watch_ = false;
};

}  // namespace

struct HttpServer::Impl {
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  net::steady_timer retry{ioc};
  std::unique_ptr<WorkPool> pool;
};

HttpServer::HttpServer(HttpServerOptions options, HttpHandler& handler)
    : options_(std::move(options)), handler_(handler), impl_(std::make_unique<Impl>()) {
  impl_->pool = std::make_unique<WorkPool>(options_.worker_threads, options_.max_pending);
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::listen() {
  beast::error_code ec;
  auto addr = net::ip::make_address(options_.host, ec);
  if (ec) return make_status(StatusCode::kInvalidArgument, "bad --host '{}': {}", options_.host, ec.message());
  tcp::endpoint ep(addr, static_cast<unsigned short>(options_.port));
  auto& a = impl_->acceptor;
  if (options_.bound_fd >= 0) {
    a.assign(ep.protocol(), options_.bound_fd, ec);
  } else {
    a.open(ep.protocol(), ec);
    if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) a.bind(ep, ec);
  }
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return make_status(StatusCode::kIoError, "cannot listen on {}:{}: {}", options_.host, options_.port, ec.message());
  port_ = a.local_endpoint().port();
  return Status();
}

void HttpServer::start() {
  impl_->work.emplace(impl_->ioc.get_executor());
  auto accept = std::make_shared<std::function<void()>>();
  std::weak_ptr<std::function<void()>> weak_accept = accept;
  *accept = [this, weak_accept] {
    impl_->acceptor.async_accept(net::make_strand(impl_->ioc), [this, weak_accept](beast::error_code ec, tcp::socket s) {
      auto again = weak_accept.lock();
      if (!again) return;
      if (ec == net::error::operation_aborted || !impl_->acceptor.is_open()) return;
      if (ec) {
        // Out of file descriptors and the like: back off briefly instead of spinning.
        impl_->retry.expires_after(std::chrono::milliseconds(50));
        impl_->retry.async_wait([again](beast::error_code) { (*again)(); });
        return;
      }
      beast::error_code ignored;
      s.set_option(tcp::no_delay(true), ignored);
      const bool reject = options_.max_connections > 0 && connections_->load() >= options_.max_connections;
      std::make_shared<Connection>(std::move(s), options_, handler_, *impl_->pool, connections_, reject)->start();
      (*again)();
    });
  };
  accept_loop_ = accept;
  (*accept)();
  const int n = std::max(1, options_.threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { impl_->ioc.run(); });
}

void HttpServer::stop() {
  if (threads_.empty()) return;
  impl_->pool->stop();  // no handler work after this; results already posted are dropped with the io_context
  net::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  accept_loop_.reset();
}

}  // namespace pagoda::server
