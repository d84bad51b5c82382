// Tokenizer throughput: `epp_bench_tokenizer TOKENIZER_DIR FILE...` encodes each file (as text,
// no special tokens) repeatedly for at least --min-ms and prints one JSON line per file:
// {"file", "bytes", "tokens", "runs", "mb_per_s", "ms_per_run"}. bench/run_tokenizer_bench.py
// drives it next to Hugging Face's JavaScript tokenizer on the same files.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "epp/tokenizer.h"

int main(int argc, char** argv) {
  int min_ms = 1000;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--min-ms=", 0) == 0) min_ms = std::atoi(a.c_str() + 9);
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
  for (size_t f = 1; f < args.size(); ++f) {
    std::ifstream in(args[f], std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
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
