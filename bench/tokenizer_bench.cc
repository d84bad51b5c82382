// Tokenizer throughput: `epp_bench_tokenizer TOKENIZER_DIR FILE...` encodes each file (as text,
// no special tokens) repeatedly for at least --min-ms and prints one JSON line per file:
// {"file", "bytes", "tokens", "runs", "mb_per_s", "ms_per_run"}. bench/run_tokenizer_bench.py
// drives it next to Hugging Face's JavaScript tokenizer on the same files.
// --prefix-kb=N: instead, through a PrefixTokenizer that has seen the file's first N KB, each run
// encodes those N KB followed by a new ending (the rest of the file behind a run number), and
// "ms_per_run" is the latency of such a mostly-cached prompt ("cold_ms": the same text
// without the cache).
// --chat: instead, each FILE is the system prompt of a chat request ({"messages": [system FILE,
// user "question N"]}) rendered with the chat template beside the tokenizer: "render_ms" is
// ChatTemplate::RenderRequest alone, "ms_per_run" the whole TokenizeRequestBody (parse, render,
// encode) through a PrefixTokenizer that has seen the system prompt, "cold_ms" the same without
// the cache.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <algorithm>
#include <vector>

#include "epp/text/chat_template.h"
#include "epp/text/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int BenchChat(const std::shared_ptr<const epp::Tokenizer>& t, const epp::ChatTemplate& chat, const std::string& file,
              const std::string& text, int min_ms) {
  auto body = [&](int n) {
    nlohmann::json b;
    b["model"] = "m";
    b["messages"] = nlohmann::json::array({{{"role", "system"}, {"content", text}},
                                           {{"role", "user"}, {"content", "question " + std::to_string(n) + ": what changed?"}}});
    return b.dump();
  };
  epp::PrefixTokenizer cache(t);
  auto warm = epp::TokenizeRequestBody(cache, "/v1/chat/completions", body(-1), &chat);
  if (!warm.ok()) return 1;
  const size_t tokens = warm->ids.size();  // of the warm-up request, which the reference counts too
  int runs = 0;
  double total_ms = 0, render_ms = 0, cold_ms = 0;
  size_t rendered = 0;
  while (total_ms < min_ms) {
    const std::string b = body(runs);
    const auto t0 = std::chrono::steady_clock::now();
    auto text_only = chat.RenderRequest(b);
    const auto t1 = std::chrono::steady_clock::now();
    auto p = epp::TokenizeRequestBody(cache, "/v1/chat/completions", b, &chat);
    const auto t2 = std::chrono::steady_clock::now();
    if (!text_only.ok() || !p.ok()) {
      std::cerr << file << ": " << (text_only.ok() ? p.status() : text_only.status()) << "\n";
      return 1;
    }
    render_ms += Ms(t0, t1);
    total_ms += Ms(t1, t2);
    rendered = p->text.size();
    if (runs == 0) {
      const auto c0 = std::chrono::steady_clock::now();
      auto cold = epp::TokenizeRequestBody(*t, "/v1/chat/completions", b, &chat);
      cold_ms = Ms(c0, std::chrono::steady_clock::now());
      if (!cold.ok() || cold->ids != p->ids) {
        std::cerr << "cached and uncached chat ids differ\n";
        return 1;
      }
    }
    ++runs;
  }
  std::printf("{\"file\": \"%s\", \"chat\": true, \"bytes\": %zu, \"tokens\": %zu, \"runs\": %d, \"render_ms\": %.4f, "
              "\"ms_per_run\": %.4f, \"cold_ms\": %.4f, \"hits\": %lld}\n",
              file.c_str(), rendered, tokens, runs, render_ms / runs, total_ms / runs, cold_ms,
              static_cast<long long>(cache.stats().hits));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int min_ms = 1000;
  size_t prefix_kb = 0;
  bool chat_mode = false;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--min-ms=", 0) == 0) min_ms = std::atoi(a.c_str() + 9);
    else if (a == "--chat") chat_mode = true;
    else if (a.rfind("--prefix-kb=", 0) == 0) prefix_kb = static_cast<size_t>(std::atoi(a.c_str() + 12));
    else args.push_back(a);
  }
  if (args.size() < 2) {
    std::cerr << "usage: epp_bench_tokenizer [--min-ms=N] TOKENIZER_DIR FILE...\n";
    return 2;
  }
  auto t = epp::Tokenizer::FromPath(args[0]);
  if (!t.ok()) {
    std::cerr << t.status() << "\n";
    return 2;
  }
  std::shared_ptr<const epp::ChatTemplate> chat;
  if (chat_mode) {
    auto c = epp::ChatTemplate::FromPath(args[0]);
    if (!c.ok()) {
      std::cerr << c.status() << "\n";
      return 2;
    }
    chat = *std::move(c);
  }
  for (size_t f = 1; f < args.size(); ++f) {
    std::ifstream in(args[f], std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    if (chat) {
      if (BenchChat(*t, *chat, args[f], text, min_ms) != 0) return 1;
      continue;
    }
    if (prefix_kb > 0) {
      const size_t cut = std::min(text.size(), prefix_kb * 1024);
      epp::PrefixTokenizer cache(*t);
      if (!cache.Encode(text.substr(0, cut), false).ok()) return 1;
      int runs = 0;
      double total_ms = 0, cold_ms = 0;
      size_t tokens = 0;
      while (total_ms < min_ms) {
        const std::string prompt = text.substr(0, cut) + " [" + std::to_string(runs) + "] " + text.substr(cut);
        const auto t0 = std::chrono::steady_clock::now();
        auto ids = cache.Encode(prompt, false);
        const auto t1 = std::chrono::steady_clock::now();
        if (!ids.ok()) return 1;
        tokens = ids->size();
        total_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
        if (runs == 0) {
          const auto c0 = std::chrono::steady_clock::now();
          auto cold = (*t)->Encode(prompt, false);
          cold_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
          if (!cold.ok() || *cold != *ids) {
            std::cerr << "cached and uncached ids differ\n";
            return 1;
          }
        }
        ++runs;
      }
      std::printf("{\"file\": \"%s\", \"bytes\": %zu, \"cached_bytes\": %zu, \"tokens\": %zu, \"runs\": %d, "
                  "\"ms_per_run\": %.4f, \"cold_ms\": %.4f, \"hits\": %lld}\n",
                  args[f].c_str(), text.size() + 8, cut, tokens, runs, total_ms / runs, cold_ms,
                  static_cast<long long>(cache.stats().hits));
      continue;
    }
    std::vector<uint32_t> ids;
    int runs = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed_ms = 0;
    do {
      ids.clear();
      if (absl::Status s = (*t)->EncodeInto(text, false, ids); !s.ok()) {
        std::cerr << args[f] << ": " << s << "\n";
        return 1;
      }
      ++runs;
      elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed_ms < min_ms);
    std::printf("{\"file\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"runs\": %d, \"mb_per_s\": %.2f, \"ms_per_run\": %.4f}\n",
                args[f].c_str(), text.size(), ids.size(), runs, text.size() * runs / 1e6 / (elapsed_ms / 1e3),
                elapsed_ms / runs);
  }
  return 0;
}
