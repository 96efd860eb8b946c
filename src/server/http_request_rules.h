// Rules a parsed HTTP request must meet before it reaches a route, independent of the socket code
// (the connection applies them; the http_request fuzz target drives them on arbitrary bytes):
//   - Transfer-Encoding: only "chunked" alone (501 for "gzip, chunked" and any other coding);
//   - POST bodies must be JSON: Content-Type application/json (parameters allowed), else 415.
// And the conversion of Beast's parsed message into the server's HttpRequest.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http.hpp>

#include "server/http_message.h"

namespace pagoda::server {

struct RuleViolation {
  int status = 400;
  std::string message;
};

// On the header alone (before the body is read): transfer codings.
std::optional<RuleViolation> check_request_framing(std::string_view transfer_encoding);

// On the complete request: the media type of POST bodies. `content_type` as sent (may be empty).
std::optional<RuleViolation> check_request_content_type(std::string_view method, std::string_view content_type);

// True when `content_type` names application/json (case-insensitive, optional parameters).
bool is_json_media_type(std::string_view content_type);

// The token of "Bearer <token>" (scheme case-insensitive, RFC 7235; surrounding blanks ignored);
// empty when the value is not of that form.
std::string bearer_token(const std::string& authorization);
// "ipv4:1.2.3.4:5678" / "ipv6:[::1]:5678" (gRPC peers) -> "1.2.3.4" / "::1"; other forms as given.
std::string peer_host(const std::string& grpc_peer);

// Beast request -> HttpRequest: method, path and query split, header names lower-cased and
// repeated headers joined with ", ". Moves the body out of `req`.
HttpRequest to_http_request(boost::beast::http::request<boost::beast::http::string_body>& req, std::string remote);

}  // namespace pagoda::server
