#include "commands/top.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "epp/runtime/http.h"
#include "epp/tools/top.h"
#include "output.h"

namespace eppctl {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

struct Poll {
  std::string metrics, decisions, decisions_error, error;
};

Poll Fetch(epp::HttpClient& client, const std::string& base, int limit) {
  epp::HttpRequest m, d;
  m.url = base + "/metrics";
  d.url = base + "/debug/decisions?limit=" + std::to_string(limit);
  m.timeout = d.timeout = std::chrono::milliseconds(2000);
  std::vector<epp::HttpRequest> reqs = {m, d};
  std::vector<absl::StatusOr<epp::HttpResponse>> got = client.FetchAll(reqs);
  Poll p;
  if (!got[0].ok()) p.error = std::string(got[0].status().message());
  else if (got[0]->status != 200) p.error = m.url + ": HTTP " + std::to_string(got[0]->status);
  else p.metrics = std::move(got[0]->body);
  if (!got[1].ok()) p.decisions_error = "/debug/decisions: " + std::string(got[1].status().message());
  else if (got[1]->status == 404) p.decisions_error = "decision log off: start eppctl serve with --decision-log N";
  else if (got[1]->status != 200) p.decisions_error = "/debug/decisions: HTTP " + std::to_string(got[1]->status);
  else p.decisions = std::move(got[1]->body);
  return p;
}

std::string Explain(epp::HttpClient& client, const std::string& base, uint64_t id) {
  epp::HttpRequest r;
  r.url = base + "/debug/decisions?id=" + std::to_string(id);
  std::vector<epp::HttpRequest> reqs = {r};
  auto got = client.FetchAll(reqs);
  if (!got[0].ok()) return "cannot read decision " + std::to_string(id) + ": " + std::string(got[0].status().message());
  nlohmann::json j = nlohmann::json::parse(got[0]->body, nullptr, false);
  if (got[0]->status != 200 || j.is_discarded() || !j.contains("decision"))
    return "decision " + std::to_string(id) + ": " + got[0]->body;
  const auto& d = j["decision"];
  std::string out = "decision " + std::to_string(id);
  if (d.contains("request_id") && d["request_id"].is_string() && !d["request_id"].get<std::string>().empty())
    out += "  x-request-id " + d["request_id"].get<std::string>();
  out += "\n\n";
  if (d.contains("explain_text") && d["explain_text"].is_string()) out += d["explain_text"].get<std::string>();
  return out;
}

class RawTerminal {
 public:
  RawTerminal() {
    if (tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    std::cout << "\x1b[?1049h\x1b[?25l" << std::flush;  // alternate screen, cursor hidden
  }
  ~RawTerminal() {
    std::cout << "\x1b[?25h\x1b[?1049l" << std::flush;
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }

 private:
  termios saved_{};
  bool active_ = false;
};

// Keys read within `wait`: "q", "s", "r", "up", "down", "enter", "esc", or "" for none.
std::string ReadKey(std::chrono::milliseconds wait) {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(wait.count())) <= 0) return "";
  char buf[8];
  const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
  if (n <= 0) return "";
  const std::string k(buf, static_cast<size_t>(n));
  if (k == "\x1b[A" || k == "k") return "up";
  if (k == "\x1b[B" || k == "j") return "down";
  if (k == "\r" || k == "\n") return "enter";
  if (k == "\x1b") return "esc";
  return k.substr(0, 1);
}

}  // namespace

void SetupTopCommand(CLI::App& app, int& exit_code) {
  struct Options {
    std::string target;
    double interval_s = 1;
    bool once = false;
    int width = 132, height = 40, limit = 50;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("top", "Live view of a running EPP: endpoints, flow-control queues and the latest decisions (from its metrics port)");
  cmd->add_option("--target", o->target, "HOST:PORT of eppctl serve's metrics port (or http://HOST:PORT)")->required();
  cmd->add_option("--interval", o->interval_s, "Seconds between refreshes")->capture_default_str();
  cmd->add_flag("--once", o->once, "Poll twice one interval apart, print one frame and exit (no terminal needed)");
  cmd->add_option("--width", o->width, "Frame width with --once")->capture_default_str();
  cmd->add_option("--height", o->height, "Frame height with --once")->capture_default_str();
  cmd->add_option("--decisions", o->limit, "Decisions fetched per refresh")->capture_default_str();
  cmd->callback([o, &exit_code] {
    if (!(o->interval_s >= 0.1 && o->interval_s <= 3600) || o->width < 20 || o->height < 5 || o->limit < 1) {
      exit_code = PrintError(absl::InvalidArgumentError(
          "--interval must be in [0.1, 3600] s, --width >= 20, --height >= 5, --decisions >= 1"));
      return;
    }
    const std::string base = o->target.rfind("http", 0) == 0 ? o->target : "http://" + o->target;
    const auto interval = std::chrono::milliseconds(static_cast<int64_t>(o->interval_s * 1000));
    epp::HttpClient client;
    epp::TopModel model;
    epp::TopView view;
    view.target = o->target;
    auto now_s = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
    auto update = [&]() -> bool {
      Poll p = Fetch(client, base, o->limit);
      if (!p.error.empty()) {
        view.error = p.error;
        return false;
      }
      absl::Status st = model.Update(p.metrics, p.decisions, p.decisions_error, now_s());
      view.error = st.ok() ? "" : std::string(st.message());
      return st.ok();
    };
    if (o->once) {
      if (!update()) {
        exit_code = PrintError(absl::UnavailableError(view.error));
        return;
      }
      std::this_thread::sleep_for(interval);
      update();
      std::cout << epp::RenderTop(model.state(), view, o->width, o->height) << "\n";
      exit_code = view.error.empty() ? kExitOk : kExitFailure;
      return;
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
      exit_code = PrintError(absl::InvalidArgumentError("eppctl top needs a terminal (or --once)"));
      return;
    }
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
    RawTerminal term;
    auto next_poll = std::chrono::steady_clock::now();
    bool dirty = true;
    while (!g_stop) {
      if (std::chrono::steady_clock::now() >= next_poll) {
        update();
        next_poll = std::chrono::steady_clock::now() + interval;
        dirty = true;
      }
      if (dirty) {
        winsize ws{};
        int w = 132, h = 40;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
          w = ws.ws_col;
          h = ws.ws_row;
        }
        std::string frame = epp::RenderTop(model.state(), view, w, h);
        std::string out = "\x1b[H";
        size_t start = 0;
        while (start <= frame.size()) {
          size_t end = frame.find('\n', start);
          if (end == std::string::npos) end = frame.size();
          out.append(frame, start, end - start);
          out += "\x1b[K";
          if (end < frame.size()) out += "\r\n";
          start = end + 1;
        }
        std::cout << out << std::flush;
        dirty = false;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_poll - std::chrono::steady_clock::now());
      const std::string key = ReadKey(std::max(std::chrono::milliseconds(1), left));
      if (key.empty()) continue;
      dirty = true;
      const auto& decisions = model.state().decisions;
      if (key == "q") break;
      if (!view.detail.empty()) {
        if (key == "esc" || key == "enter") view.detail.clear();
        continue;
      }
      if (key == "s") view.sort = static_cast<epp::TopSort>((static_cast<int>(view.sort) + 1) % 5);
      else if (key == "r") view.descending = !view.descending;
      else if (key == "up") view.selected = std::max(0, view.selected - 1);
      else if (key == "down") view.selected = std::min(static_cast<int>(decisions.size()) - 1, view.selected + 1);
      else if (key == "enter" && view.selected >= 0 && view.selected < static_cast<int>(decisions.size()))
        view.detail = Explain(client, base, decisions[decisions.size() - 1 - static_cast<size_t>(view.selected)].id);
      if (view.selected < 0) view.selected = 0;
    }
    exit_code = kExitOk;
  });
}

}  // namespace eppctl
