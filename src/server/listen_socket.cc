#include "server/listen_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pagoda::server {

BoundSocket& BoundSocket::operator=(BoundSocket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    port_ = other.port_;
    other.fd_ = -1;
  }
  return *this;
}

BoundSocket::~BoundSocket() {
  if (fd_ >= 0) ::close(fd_);
}

Result<BoundSocket> BoundSocket::bind(const std::string& host, int port) {
  if (port < 0 || port > 65535) return invalid_argument("port {} is outside 0..65535", port);
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    return invalid_argument("bad --host '{}': not a numeric IPv4 or IPv6 address", host);
  }
  BoundSocket s;
  s.fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s.fd_ < 0) return make_status(StatusCode::kIoError, "socket(): {}", std::strerror(errno));
  const int one = 1;
  ::setsockopt(s.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0)
    return make_status(StatusCode::kIoError, "cannot listen on {}:{}: {}", host, port, std::strerror(errno));
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  ::getsockname(s.fd_, reinterpret_cast<sockaddr*>(&bound), &blen);
  s.port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                              : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  return s;
}

}  // namespace pagoda::server
