#include "gateway/stream_relay.h"

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "gateway/chunk_scanner.h"

namespace pagoda::gateway {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The idle deadlines of one relay. The timer is armed for the earliest pending deadline; a
// deadline moved later (every read and write moves one) does not re-arm it, so it fires about
// once per timeout period, not per token, and then re-arms for what is pending. Past a deadline it
// cancels that socket's pending operation.
struct Watchdog {
  Watchdog(net::any_io_executor ex, tcp::socket& up, tcp::socket& client) : timer(ex), up(&up), client(&client) {}
  net::steady_timer timer;
  tcp::socket* up;
  tcp::socket* client;
  double read_deadline = 0, write_deadline = 0;  // 0: no operation pending
  bool read_timed_out = false, write_timed_out = false, stopped = false;
  double armed_for = 0;  // the deadline the timer waits for (0: not armed)
  uint64_t generation = 0;  // of the latest arming: an earlier wait that completes is stale

  double earliest() const {
    double e = 0;
    for (double d : {read_deadline, write_deadline})
      if (d > 0 && (e == 0 || d < e)) e = d;
    return e;
  }
  static void arm(const std::shared_ptr<Watchdog>& w) {
    const double e = w->earliest();
    if (e == 0 || (w->armed_for > 0 && w->armed_for <= e)) return;  // nothing pending, or it fires first
    w->armed_for = e;
    const uint64_t g = ++w->generation;
    w->timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(std::max(0.0, e - now_s()))));
    w->timer.async_wait([w, g](const boost::system::error_code&) {
      if (g != w->generation || w->stopped) return;
      w->armed_for = 0;
      const double now = now_s();
      boost::system::error_code ignored;
      if (w->read_deadline > 0 && now >= w->read_deadline) {
        w->read_timed_out = true;
        w->read_deadline = 0;
        w->up->cancel(ignored);
      }
      if (w->write_deadline > 0 && now >= w->write_deadline) {
        w->write_timed_out = true;
        w->write_deadline = 0;
        w->client->cancel(ignored);
      }
      arm(w);
    });
  }
};

}  // namespace

net::awaitable<RelayResult> relay_chunked_stream(tcp::socket& upstream, tcp::socket& client,
                                                 boost::beast::flat_buffer& buffered, std::string head,
                                                 double stream_idle_timeout_s, double client_timeout_s,
                                                 size_t read_bytes, size_t max_chunk,
                                                 std::function<bool()> release_upstream) {
  RelayResult r;
  auto wd = std::make_shared<Watchdog>(co_await net::this_coro::executor, upstream, client);
  struct Stop {  // the watchdog never touches the sockets after the relay returns
    std::shared_ptr<Watchdog> w;
    ~Stop() {
      w->stopped = true;
      boost::system::error_code ignored;
      w->timer.cancel(ignored);
    }
  } stop{wd};
  auto deadline_moved = [&] { Watchdog::arm(wd); };

  // buf[0, have): bytes read and not yet written; the scanner has seen all of them; `base` is the
  // body offset of buf[0].
  std::vector<char> buf(read_bytes);
  size_t have = net::buffer_copy(net::buffer(buf), buffered.data());
  buffered.consume(have);
  uint64_t base = 0;
  ChunkScanner scan;
  if (!scan.feed(std::string_view(buf.data(), have))) {
    r.outcome = RelayResult::kProtocol;
    r.detail = "invalid chunked framing from the worker";
    co_return r;
  }
  double read_at = now_s();
  for (;;) {
    const size_t complete = static_cast<size_t>(scan.boundary() - base);
    if (complete > 0) {
      // The body ends with this write and nothing follows it: the worker connection is free now.
      if (release_upstream && !r.released && scan.done() && complete == have && buffered.size() == 0) {
        r.reusable = true;
        r.released = release_upstream();
      }
      const std::array<net::const_buffer, 2> frame{net::buffer(head), net::buffer(buf.data(), complete)};
      wd->write_deadline = now_s() + client_timeout_s;
      deadline_moved();
      boost::system::error_code ec;
      co_await net::async_write(client, frame, net::redirect_error(net::use_awaitable, ec));
      wd->write_deadline = 0;
      if (ec) {
        r.outcome = RelayResult::kClientGone;
        r.detail = wd->write_timed_out ? "client write timed out" : "client: " + ec.message();
        co_return r;
      }
      if (!r.sent_any) {
        r.first_read_at = read_at;
        r.first_write_at = now_s();
        r.sent_any = true;
      }
      head.clear();
      std::memmove(buf.data(), buf.data() + complete, have - complete);
      have -= complete;
      base += complete;
    }
    if (scan.done()) {
      r.outcome = RelayResult::kComplete;
      r.reusable = r.released || (have == 0 && buffered.size() == 0);
      co_return r;
    }
    if (have == buf.size()) {  // one chunk fills the buffer: hold more of it, up to max_chunk
      if (buf.size() >= max_chunk) {
        r.outcome = RelayResult::kProtocol;
        r.detail = "a chunk from the worker exceeds " + std::to_string(max_chunk) + " bytes";
        co_return r;
      }
      buf.resize(std::min(max_chunk, buf.size() * 2));
    }
    wd->read_deadline = now_s() + stream_idle_timeout_s;
    deadline_moved();
    boost::system::error_code ec;
    const size_t n = co_await upstream.async_read_some(net::buffer(buf.data() + have, buf.size() - have),
                                                       net::redirect_error(net::use_awaitable, ec));
    wd->read_deadline = 0;
    read_at = now_s();
    if (ec) {
      r.outcome = wd->read_timed_out ? RelayResult::kUpstreamTimeout : RelayResult::kUpstreamCut;
      r.detail = wd->read_timed_out ? "no data from the worker in time" : "body: " + ec.message();
      co_return r;
    }
    if (!scan.feed(std::string_view(buf.data() + have, n))) {
      r.outcome = RelayResult::kProtocol;
      r.detail = "invalid chunked framing from the worker";
      co_return r;
    }
    have += n;
  }
}

}  // namespace pagoda::gateway
