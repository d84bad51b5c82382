// A light static /metrics server for scrape benchmarks at pool sizes that full simulators would
// not fit on this machine: one thread, one epoll loop, HTTP/1.1 keep-alive, any number of
// endpoints behind one port (GET /e/<i>/metrics answers endpoint i).
//
// The pages are the simulator's own vLLM (or SGLang, TensorRT-LLM) exposition, rendered once at
// start for --pages distinct load states; endpoint i's n-th scrape gets page (i + n) % pages, so
// every scrape reads different numbers and a scraper cannot skip the parse. With --gzip (the
// default) an `Accept-Encoding: gzip` request is answered compressed, as prometheus_client does.
//
//   epp_metrics_farm --endpoints 1000 [--engine vllm] [--pages 64] [--port 0] [--no-gzip]
//                    [--page FILE]   (serve this captured page instead, for every endpoint)
//
// GET /stats?interval_ms=N answers the time between consecutive scrapes of the same endpoint
// (p50, p99, max, and the share within 1.1 and 1.5 intervals) since the start or GET /stats/reset.
// Prints "port <n>" on stdout once listening; on SIGTERM/SIGINT prints the request count on
// stderr and exits 0.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "epp/tools/sim.h"
#include "http/gzip_stream.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

struct Page {
  std::string plain, gzip;
};

std::vector<Page> RenderPages(const std::string& engine, int count) {
  epp::SimParams params;
  params.engine = engine;
  std::mt19937_64 rng(7);
  std::vector<Page> pages;
  for (int k = 0; k < count; ++k) {
    epp::SimSnapshot s;
    s.waiting = static_cast<int>(rng() % 40);
    s.running = static_cast<int>(rng() % 200);
    s.kv_blocks_used = static_cast<int64_t>(rng() % static_cast<uint64_t>(params.kv_blocks));
    s.kv_usage = static_cast<double>(s.kv_blocks_used) / static_cast<double>(params.kv_blocks);
    s.requests_finished = rng() % 100000;
    s.prompt_tokens_total = rng() % 100000000;
    s.generation_tokens_total = rng() % 10000000;
    Page p;
    p.plain = epp::RenderSimMetrics(params, s, 1.7e9 + k);
    p.gzip = epp::internal::GzipCompress(p.plain);
    pages.push_back(std::move(p));
  }
  return pages;
}

int64_t NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// JSON: how many gaps, their p50 / p99 / max in ms, and the share within 1.1 and 1.5 intervals.
std::string GapStats(std::vector<int64_t> gaps, unsigned interval_ms) {
  if (gaps.empty()) return "{\"gaps\": 0}";
  std::sort(gaps.begin(), gaps.end());
  auto q = [&](double p) { return gaps[std::min(gaps.size() - 1, static_cast<size_t>(p * gaps.size()))] / 1000.0; };
  auto within = [&](double f) {
    const auto limit = static_cast<int64_t>(f * interval_ms * 1000);
    return static_cast<double>(std::upper_bound(gaps.begin(), gaps.end(), limit) - gaps.begin()) / gaps.size();
  };
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"gaps\": %zu, \"gap_p50_ms\": %.2f, \"gap_p99_ms\": %.2f, \"gap_max_ms\": %.2f, "
                "\"within_1_1\": %.4f, \"within_1_5\": %.4f}",
                gaps.size(), q(0.5), q(0.99), gaps.back() / 1000.0, within(1.1), within(1.5));
  return buf;
}

struct Conn {
  std::string in, out;
  size_t out_off = 0;
};

bool WantsGzip(std::string_view head) {
  // Header names are case-insensitive; the scrapers we measure send "Accept-Encoding: gzip".
  for (size_t pos = 0; (pos = head.find('\n', pos)) != std::string_view::npos;) {
    ++pos;
    std::string_view line = head.substr(pos, head.find('\n', pos) - pos);
    if (line.size() > 16 && strncasecmp(line.data(), "accept-encoding:", 16) == 0)
      return line.find("gzip") != std::string_view::npos;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int endpoints = 1000, pages_count = 64, port = 0;
  bool gzip = true;
  std::string engine = "vllm", page_file;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--endpoints") endpoints = std::atoi(next());
    else if (a == "--pages") pages_count = std::atoi(next());
    else if (a == "--port") port = std::atoi(next());
    else if (a == "--engine") engine = next();
    else if (a == "--no-gzip") gzip = false;
    else if (a == "--page") page_file = next();
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (endpoints < 1 || pages_count < 1) {
    std::fprintf(stderr, "--endpoints and --pages must be >= 1\n");
    return 2;
  }
  std::vector<Page> pages;
  if (page_file.empty()) {
    pages = RenderPages(engine, pages_count);
  } else {  // one captured page for every endpoint and scrape
    std::ifstream in(page_file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", page_file.c_str());
      return 2;
    }
    Page p;
    p.plain.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    p.gzip = epp::internal::GzipCompress(p.plain);
    pages.push_back(std::move(p));
  }
  std::fprintf(stderr, "page bytes %zu, gzip %zu\n", pages[0].plain.size(), pages[0].gzip.size());
  std::vector<uint64_t> served(static_cast<size_t>(endpoints), 0);
  // Time between consecutive scrapes of the same endpoint, for GET /stats.
  std::vector<int64_t> last(static_cast<size_t>(endpoints), 0);
  std::vector<int64_t> gaps;

  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(lfd, 4096) != 0) {
    std::perror("bind/listen");
    return 1;
  }
  socklen_t len = sizeof addr;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::printf("port %d\n", ntohs(addr.sin_port));
  std::fflush(stdout);

  const int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = lfd;
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  std::unordered_map<int, Conn> conns;
  uint64_t requests = 0;
  std::vector<epoll_event> events(256);
  char buf[16384];

  auto close_conn = [&](int fd) {
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    conns.erase(fd);
  };
  // Writes what is pending; true while the connection lives.
  auto flush = [&](int fd, Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n = send(fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) return false;
      c.out_off += static_cast<size_t>(n);
    }
    epoll_event e{};
    e.data.fd = fd;
    e.events = EPOLLIN | (c.out_off < c.out.size() ? EPOLLOUT : 0u);
    epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e);
    if (c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
    }
    return true;
  };

  while (!g_stop) {
    const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 200);
    for (int k = 0; k < n; ++k) {
      const int fd = events[k].data.fd;
      if (fd == lfd) {
        for (;;) {
          const int c = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK);
          if (c < 0) break;
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          epoll_event e{};
          e.events = EPOLLIN;
          e.data.fd = c;
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
          conns[c];
        }
        continue;
      }
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      Conn& c = it->second;
      bool alive = true;
      if (events[k].events & EPOLLOUT) alive = flush(fd, c);
      if (alive && (events[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        for (;;) {
          const ssize_t r = recv(fd, buf, sizeof buf, 0);
          if (r > 0) {
            c.in.append(buf, static_cast<size_t>(r));
            if (c.in.size() > (1 << 20)) alive = false;  // nobody sends such heads
            continue;
          }
          if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          alive = false;  // closed or failed
          break;
        }
        size_t end;
        while (alive && (end = c.in.find("\r\n\r\n")) != std::string::npos) {
          const std::string_view head(c.in.data(), end);
          std::string status = "200 OK";
          const Page* page = nullptr;
          unsigned long idx = 0;
          std::string stats;
          unsigned interval_ms = 0;
          if (std::sscanf(c.in.c_str(), "GET /e/%lu/metrics", &idx) == 1 && idx < served.size()) {
            page = &pages[(idx + served[idx]++) % pages.size()];
            const int64_t now = NowUs();
            if (last[idx] != 0) gaps.push_back(now - last[idx]);
            last[idx] = now;
          } else if (c.in.rfind("GET /stats/reset", 0) == 0) {
            gaps.clear();
            std::fill(last.begin(), last.end(), 0);
            stats = "{}";
          } else if (std::sscanf(c.in.c_str(), "GET /stats?interval_ms=%u", &interval_ms) == 1) {
            stats = GapStats(gaps, interval_ms);
          } else {
            status = "404 Not Found";
          }
          const bool gz = page && gzip && WantsGzip(head);
          const std::string& body = page ? (gz ? page->gzip : page->plain) : stats;
          c.out += "HTTP/1.1 " + status + "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n";
          if (gz) c.out += "Content-Encoding: gzip\r\n";
          c.out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
          c.out += body;
          c.in.erase(0, end + 4);
          ++requests;
        }
        if (alive && !c.out.empty()) alive = flush(fd, c);
      }
      if (!alive) close_conn(fd);
    }
  }
  std::fprintf(stderr, "requests %llu connections %zu\n", static_cast<unsigned long long>(requests), conns.size());
  return 0;
}
