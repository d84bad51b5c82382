// The EPP under test as a child process (--launch): started with /bin/sh -c in a process group of
// its own, so that a wrapper script and everything it starts are stopped together; SIGTERM first
// (the EPP's graceful shutdown), SIGKILL after 10 s; PR_SET_PDEATHSIG so that a suite killed
// mid-run does not leave the EPP behind holding its ports. Its stdout and stderr go to a log whose
// tail the report shows when a check fails. And FreePort, for the ports the command line names.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "conformance/conformance_impl.h"

namespace epp::internal::conformance {

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

}  // namespace epp::internal::conformance
