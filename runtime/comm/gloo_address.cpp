// gloo_listen_address(): which address of this host a Gloo endpoint listens on (process_group.h).
// Gloo binds that address and publishes it to the peers through the store, so it must be one they
// can reach: never 0.0.0.0, and loopback only when the whole job is on this host.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "comm/process_group.h"

namespace ds {
namespace {

// The local address of the route to `host` (UDP connect sends nothing); empty on failure.
std::string route_source(const std::string& host) {
  addrinfo hints{}, *list = nullptr;
  hints.ai_socktype = SOCK_DGRAM;
  if (::getaddrinfo(host.c_str(), "9", &hints, &list) != 0) return "";
  std::string out;
  for (addrinfo* ai = list; ai && out.empty(); ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    char text[NI_MAXHOST];
    if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0)
      out = text;
    if (fd >= 0) ::close(fd);
  }
  ::freeaddrinfo(list);
  return out;
}

bool is_loopback(const std::string& addr) { return addr.rfind("127.", 0) == 0 || addr == "::1"; }

// The first non-loopback address the hostname resolves to; empty if none.
std::string hostname_address() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  addrinfo hints{}, *list = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(name, nullptr, &hints, &list) != 0) return "";
  std::string out;
  for (addrinfo* ai = list; ai && out.empty(); ai = ai->ai_next) {
    char text[NI_MAXHOST];
    if (::getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0 &&
        !is_loopback(text))
      out = text;
  }
  ::freeaddrinfo(list);
  return out;
}

}  // namespace

std::string gloo_listen_address() {
  if (const char* a = std::getenv("DS_GLOO_IFACE_ADDR"); a && *a) return a;
  if (const char* m = std::getenv("MASTER_ADDR"); m && *m) {
    // A loopback route means the master is this host; that is enough unless the job spans hosts
    // (CROSS_SIZE > 1: then MASTER_ADDR resolved to a loopback alias, e.g. Debian's 127.0.1.1).
    const std::string via = route_source(m);
    const char* nodes = std::getenv("CROSS_SIZE");
    const bool multi_node = nodes && std::atoi(nodes) > 1;
    if (!via.empty() && !(multi_node && is_loopback(via))) return via;
  }
  const std::string own = hostname_address();
  return own.empty() ? "127.0.0.1" : own;
}

}  // namespace ds
