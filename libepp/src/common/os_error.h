// The operating system's reason behind a failure, for error messages that say why and not only
// what ("cannot read pool.yaml: No such file or directory", "cannot listen on 0.0.0.0:9090:
// Address already in use"). Header-only: used by libepp and by eppctl.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace epp::internal {

// strerror of `err` (errno by default), read at once (errno is overwritten by the next call).
inline std::string OsReason(int err = errno) { return err == 0 ? std::string("unknown reason") : std::strerror(err); }

// Why a TCP server cannot bind host:port now, found by trying it the way servers do
// (SO_REUSEADDR): "Address already in use", "Cannot assign requested address", "Permission
// denied", or the resolver's error for a host that does not resolve. Empty when the bind works
// (the failure was elsewhere). Brackets around an IPv6 literal are allowed.
// The addresses a TCP server listening on host:port binds (brackets around an IPv6 literal
// dropped, empty = 0.0.0.0, passive, numeric port) into *out (freeaddrinfo it). Empty on success,
// else "cannot resolve 'HOST': <resolver error>".
inline std::string ResolveListenAddresses(std::string host, int port, addrinfo** out) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, out); rc != 0)
    return std::string("cannot resolve '") + host + "': " + ::gai_strerror(rc);
  return "";
}

inline std::string BindFailureReason(std::string host, int port) {
  addrinfo* res = nullptr;
  if (std::string unresolved = ResolveListenAddresses(std::move(host), port, &res); !unresolved.empty())
    return unresolved;
  std::string reason;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      reason = OsReason();
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const bool ok = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!ok) reason = OsReason();
    ::close(fd);
    if (ok) {
      reason.clear();
      break;
    }
  }
  ::freeaddrinfo(res);
  return reason;
}

// ": <reason>" for a bind failure on host:port, or "" when none is found.
inline std::string BindFailureSuffix(const std::string& host, int port) {
  const std::string why = port > 0 ? BindFailureReason(host, port) : std::string();
  return why.empty() ? std::string() : ": " + why;
}

}  // namespace epp::internal
