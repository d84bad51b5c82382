// The EPP under test as a child process (--launch): started with /bin/sh -c in a process group of
// its own, so that a wrapper script and everything it starts are stopped together; SIGTERM first
// (the EPP's graceful shutdown), SIGKILL after 10 s; PR_SET_PDEATHSIG so that a suite killed
// mid-run does not leave the EPP behind holding its ports. Its stdout and stderr go to a log whose
// tail the report shows when a check fails. FreePort, for the ports the command line names. And
// LentFile: the user's --endpoints-out file, lent to the run and given back at its end (also from
// a signal handler: RestoreConformanceEndpointsFile).
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "conformance/conformance_impl.h"

namespace epp::internal::conformance {
namespace {

// ---- The file as a signal handler sees it -------------------------------------------------------
// One lent file at a time (one lent while no other is) is also registered here, for
// RestoreConformanceEndpointsFile. Only plain data and lock-free atomics: the handler may run
// at any point of the run, on any thread.

struct SignalView {
  std::atomic<bool> armed{false};
  const char* path = nullptr;
  const char* before = nullptr;
  size_t before_len = 0;
  bool existed = false;
  const char* written = nullptr;
  size_t written_len = 0;
};
SignalView g_view;
std::atomic<bool> g_view_taken{false};

// Writes `data` as the content of `path`, in place (O_TRUNC: the same file, its mode and owner
// kept, a symlink followed). 1: written; 0: opened but not all written; -1: not opened (errno).
// Async-signal-safe.
int WriteInPlace(const char* path, const char* data, size_t len, int flags) {
  int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC | flags, 0644);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool closed = close(fd) == 0;
  return closed && done == len ? 1 : 0;
}

// Whether `path` holds exactly `data`. Async-signal-safe (no allocation).
bool Holds(const char* path, const char* data, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  size_t at = 0;
  bool same = true;
  while (same) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    same = at + static_cast<size_t>(n) <= len && std::memcmp(buf, data + at, static_cast<size_t>(n)) == 0;
    at += static_cast<size_t>(n);
  }
  close(fd);
  return same && at == len;
}

}  // namespace

absl::Status Launched::Start(const std::string& command, const std::string& log_path) {
  log_path_ = log_path;
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {  // only async-signal-safe calls until exec
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0) dup2(in, 0);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  pid_ = pid;
  return absl::OkStatus();
}

std::optional<std::string> Launched::Exited() {
  if (pid_ <= 0) return exited_;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) == pid_) {
    exited_ = WIFEXITED(st) ? absl::StrCat("exited with code ", WEXITSTATUS(st))
                            : absl::StrCat("killed by signal ", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    pid_ = -1;
  }
  return exited_;
}

void Launched::Stop() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGTERM);
  for (int i = 0; i < 200 && !Exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

std::string Launched::LogTail(size_t lines) const {
  std::ifstream in(log_path_);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  size_t from = all.size() > lines ? all.size() - lines : 0;
  std::string out;
  for (size_t i = from; i < all.size(); ++i) absl::StrAppend(&out, all[i], "\n");
  return out;
}

absl::StatusOr<int> FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot find a free loopback port: ", std::strerror(errno)));
  }
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// ---- LentFile ------------------------------------------------------------------------------------

absl::Status LentFile::Lend(const std::string& path, const std::string& content, const std::string& backup) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat("--endpoints-out ", path, " is not a regular file"));
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!in) return absl::InvalidArgumentError(absl::StrCat("--endpoints-out ", path, ": cannot read what it holds now"));
    before_ = ss.str();
    existed_ = true;
    std::ofstream copy(backup, std::ios::binary | std::ios::trunc);
    copy << before_;
    copy.close();
    if (!copy) return absl::InternalError(absl::StrCat("cannot keep a copy of ", path, " in ", backup));
    backup_ = backup;
  } else if (errno != ENOENT) {
    return absl::InvalidArgumentError(absl::StrCat("--endpoints-out ", path, ": ", std::strerror(errno)));
  }
  path_ = path;
  written_ = content;
  if (!g_view_taken.exchange(true)) {
    g_view.path = path_.c_str();
    g_view.before = before_.data();
    g_view.before_len = before_.size();
    g_view.existed = existed_;
    g_view.written = written_.data();
    g_view.written_len = written_.size();
    g_view.armed.store(true);
    in_view_ = true;
  }
  const int w = WriteInPlace(path_.c_str(), written_.data(), written_.size(), existed_ ? 0 : O_CREAT | O_EXCL);
  if (w == 1) {
    lent_ = true;
    return absl::OkStatus();
  }
  const std::string why = std::strerror(errno);
  if (in_view_) {
    g_view.armed.store(false);
    g_view_taken.store(false);
    in_view_ = false;
  }
  std::string msg = absl::StrCat("cannot write the endpoints file ", path, ": ", why);
  if (w == 0 && !existed_) unlink(path_.c_str());  // half written, and ours
  if (existed_) {
    // Untouched (not opened), or half written and put back: the copy is not needed.
    if (w == -1 || WriteInPlace(path_.c_str(), before_.data(), before_.size(), 0) == 1) {
      std::error_code ec;
      std::filesystem::remove(backup_, ec);
    } else {
      absl::StrAppend(&msg, "; it could not be put back either: what it held before is in ", backup_);
    }
  }
  return absl::InvalidArgumentError(msg);
}

std::string LentFile::GiveBack() {
  if (!lent_) return outcome_;
  lent_ = false;
  if (in_view_) {
    g_view.armed.store(false);
    g_view_taken.store(false);
    in_view_ = false;
  }
  struct stat st {};
  if (stat(path_.c_str(), &st) != 0) {
    outcome_ = existed_ ? absl::StrCat("gone at the end (removed by someone else, not recreated); what it held before is in ",
                                       backup_)
                        : "gone at the end (removed by someone else)";
    backup_kept_ = existed_;
    return outcome_;
  }
  if (!Holds(path_.c_str(), written_.data(), written_.size())) {
    outcome_ = "left as found: it changed during the run, not by the suite";
    if (existed_) absl::StrAppend(&outcome_, " (what it held before is in ", backup_, ")");
    backup_kept_ = existed_;
    return outcome_;
  }
  if (!existed_) {
    outcome_ = unlink(path_.c_str()) == 0 ? "removed (the suite created it)"
                                          : absl::StrCat("could not be removed: ", std::strerror(errno));
  } else if (WriteInPlace(path_.c_str(), before_.data(), before_.size(), 0) == 1) {
    outcome_ = absl::StrCat("restored to what it held before (", before_.size(), " bytes)");
    std::error_code ec;
    std::filesystem::remove(backup_, ec);
  } else {
    outcome_ = absl::StrCat("could not be restored (", std::strerror(errno), "); what it held before is in ", backup_);
    backup_kept_ = true;
  }
  return outcome_;
}

}  // namespace epp::internal::conformance

namespace epp {

void RestoreConformanceEndpointsFile() {
  using internal::conformance::g_view;
  if (!g_view.armed.exchange(false)) return;
  if (!internal::conformance::Holds(g_view.path, g_view.written, g_view.written_len)) return;
  if (g_view.existed) internal::conformance::WriteInPlace(g_view.path, g_view.before, g_view.before_len, 0);
  else unlink(g_view.path);
}

}  // namespace epp
