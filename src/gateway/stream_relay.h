// Relays a worker's chunked event stream (an SSE response, Transfer-Encoding: chunked) to the
// client as the worker framed it: the bytes are written as read, up to the last complete chunk
// (ChunkScanner), with no decoding, re-encoding or per-token allocation; the response head goes
// out in the same write as the first chunk. One read and one write per batch of chunks, on the
// raw sockets: the idle timeouts are one watchdog timer per stream (armed when the stream starts,
// re-armed only when it fires), not a timer per read and per write.
//
// Thread-safety: runs on the executor that owns both sockets (in the gateway, the io_context of
// one I/O thread, which only that thread runs); they must stay open and untouched by anything
// else until it returns.
#pragma once

#include <utility>  // std::exchange, which Boost 1.74's awaitable.hpp uses without including it

#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace pagoda::gateway {

struct RelayResult {
  enum Outcome {
    kComplete,       // the last chunk was relayed: the body ended
    kClientGone,     // a write to the client failed or timed out
    kUpstreamCut,    // the worker's connection ended or failed before the last chunk
    kUpstreamTimeout,  // no byte from the worker for stream_idle_timeout_s
    kProtocol,       // the worker's chunk framing is invalid (or a chunk exceeds the limit)
  };
  Outcome outcome = kComplete;
  bool sent_any = false;       // the head (and at least one chunk or the end) reached the client
  double first_read_at = 0;    // when the bytes of the first relayed write were read (now_s clock)
  double first_write_at = 0;   // when that write completed
  bool reusable = false;       // kComplete with nothing after the body: the worker connection may be reused
  bool released = false;       // release_upstream took the worker connection (before the last write)
  std::string detail;          // the error's message
};

// `buffered`: body bytes already read with the response head (consumed). `head`: the client's
// response head (chunked), sent with the first chunk. Chunks up to max_chunk bytes are held until
// complete; a larger one is kProtocol. now_s: the steady clock in seconds.
// release_upstream (may be empty): called once the worker's body has ended with nothing after it,
// before the write that carries its last chunk to the client; it may take the upstream socket (to
// keep the connection for the next request) and returns whether it did. Releasing it before that
// write means a client that sends its next request as soon as the stream ends finds the connection
// kept.
boost::asio::awaitable<RelayResult> relay_chunked_stream(boost::asio::ip::tcp::socket& upstream,
                                                         boost::asio::ip::tcp::socket& client,
                                                         boost::beast::flat_buffer& buffered, std::string head,
                                                         double stream_idle_timeout_s, double client_timeout_s,
                                                         size_t read_bytes, size_t max_chunk,
                                                         std::function<bool()> release_upstream = {});

}  // namespace pagoda::gateway
