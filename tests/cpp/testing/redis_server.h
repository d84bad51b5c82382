// A real redis-server (Debian's) for tests and benchmarks: started on a Unix socket in a fresh
// temporary folder (no TCP port unless asked), without persistence, and stopped by its pid.
// Available() is false when redis-server is not installed; callers skip with a message then.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "epp/runtime/redis.h"

namespace epp::testing {

inline std::string RedisServerBinary() {
  for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/sbin/redis-server"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

class RedisServerProcess {
 public:
  static bool Available() { return !RedisServerBinary().empty(); }

  // `extra`: more redis-server arguments ("--requirepass", "x", "--port", "7001", ...).
  explicit RedisServerProcess(std::vector<std::string> extra = {}) : extra_(std::move(extra)) {
    char tmpl[] = "/tmp/epp-redis-XXXXXX";
    dir_ = ::mkdtemp(tmpl) != nullptr ? std::string(tmpl) : std::string("/tmp");
    socket_ = dir_ + "/redis.sock";
    Start();
  }
  ~RedisServerProcess() {
    Kill(SIGTERM);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisServerProcess(const RedisServerProcess&) = delete;
  RedisServerProcess& operator=(const RedisServerProcess&) = delete;

  const std::string& socket_path() const { return socket_; }
  std::string url() const { return "unix://" + socket_; }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }

  // Started and answering PING (with `password` when it needs one) within 5 s.
  bool WaitReady(const std::string& password = "") const {
    RedisAddress a;
    a.transport = RedisAddress::Transport::kUnix;
    a.socket_path = socket_;
    a.password = password;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (RedisConnection::Connect(a).ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Stops it with `sig` and reaps it (SIGKILL after 3 s).
  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    for (int i = 0; i < 300; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // Starts it again with the same socket and arguments (after Kill).
  void Start() {
    std::vector<std::string> args{RedisServerBinary(), "--port", "0", "--unixsocket", socket_, "--unixsocketperm", "700",
                                  "--save", "", "--appendonly", "no", "--dir", dir_, "--logfile", dir_ + "/redis.log"};
    bool has_port = false;
    for (size_t i = 0; i < extra_.size(); ++i)
      if (extra_[i] == "--port") has_port = true;
    if (has_port) args.erase(args.begin() + 1, args.begin() + 3);
    args.insert(args.end(), extra_.begin(), extra_.end());
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Stopped with the test process even when it cannot run its destructors (a sanitizer's
      // halt_on_error, a crash): the server must not outlive the test.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      std::vector<char*> argv;
      for (std::string& s : args) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }

 private:
  std::vector<std::string> extra_;
  std::string dir_, socket_;
  pid_t pid_ = -1;
};

}  // namespace epp::testing
