// Prometheus text parsing throughput (ParsePrometheusText), in bytes/s of exposition text.
//
// Inputs: the real vLLM and SGLang captures in the shared fixtures folder (read in place, never
// copied into the project) and a ~1 MiB synthetic scrape built from the vLLM capture: each
// family's HELP/TYPE once, its series repeated with a different model_name per copy, as a server
// with many models / LoRA adapters exposes. The captures are small (1-14 KB), so the synthetic
// input shows the per-byte cost without the fixed per-call cost dominating.
//
// With glibc, the synthetic input also runs in two pinned heap states, because a 1 MiB parse
// allocates ~3 MB and whether a plain loop gets that memory back from the kernel on every
// iteration (paying a page fault per 4 KiB touched) depends on where glibc's heap top happens to
// be, i.e. on unrelated allocations: the plain figure flips between two modes 4-8x apart.
//   .../after-malloc_trim  malloc_trim(0) after every parse (outside the timing): each parse
//                          starts from memory given back to the kernel (the slow mode, pinned).
//   .../warm-heap          M_TRIM_THRESHOLD and M_MMAP_THRESHOLD raised first, so freed memory
//                          stays in the process (the fast mode, pinned). mallopt is global and
//                          one-way, so these run last (run_parse_bench.py runs each benchmark
//                          in its own process anyway).
//
//   epp_bench_parse [--fixtures=DIR] [--dump_inputs=DIR] [benchmark flags...]
//
// --fixtures=DIR     the shared fixtures folder (holding metrics/); default $EPP_SHARED_FIXTURES,
//                    else ../shared/fixtures next to the source tree.
// --dump_inputs=DIR  write every input's exact bytes to DIR (one file per input) and
//                    DIR/inputs.txt, one line per benchmark: "<name after BM_.../>\t<file>"; then
//                    exit. bench/run_parse_bench.py uses it to time prometheus_client on the same
//                    bytes.
//
// bench/run_parse_bench.py runs this next to prometheus_client's parser; see docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/metrics.h"

#if defined(__GLIBC__)
#include <malloc.h>
#define EPP_BENCH_HAVE_MALLOC_TRIM 1
#endif

#ifndef EPP_SHARED_FIXTURES
#define EPP_SHARED_FIXTURES "../shared/fixtures"
#endif

namespace {

namespace fs = std::filesystem;

// The real captures, in table order (see the fixtures README for their provenance).
constexpr std::string_view kCaptures[] = {
    "vllm-0.7-v0engine-aibrix-runtime-doc-truncated.prom",
    "llm-d-inference-sim-v0.7.1-idle-maxlora2.prom",
    "sglang-2025-docs-production-metrics-loaded.prom",
    "sglang-2024q4-docs-production-metrics-name-label.prom",
};
constexpr std::string_view kVllmCapture = "vllm-0.7-v0engine-aibrix-runtime-doc-truncated.prom";
constexpr std::string_view kVllmModelLabel = "model_name=\"Qwen/Qwen2.5-Coder-1.5B-Instruct\"";
constexpr size_t kSyntheticTargetBytes = size_t{1} << 20;

struct Input {
  std::string name;  // benchmark name suffix; also the file name under --dump_inputs
  std::string text;
  bool large = false;  // also run in the pinned heap states (see the top of the file)
};

// kAsIs: a fresh result per parse (allocate + free each time); kReuse: ParsePrometheusTextInto one
// long-lived result, as a scraper does per endpoint; the other two pin glibc's heap state.
enum class Heap { kAsIs, kTrimEachParse, kWarm, kReuse };

std::optional<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The model_name label of copy `k` (copy 0 keeps the captured one).
std::string ModelLabel(int k) {
  if (k == 0) return std::string(kVllmModelLabel);
  char buf[96];
  std::snprintf(buf, sizeof buf, "model_name=\"Qwen/Qwen2.5-Coder-1.5B-Instruct-lora-%04d\"", k);
  return buf;
}

// The capture with every run of sample lines repeated `copies` times, the k-th copy carrying
// ModelLabel(k). Comment lines stay once; sample lines without model_name stay once. Each
// histogram series stays contiguous (its _sum, _bucket and _count lines move together).
std::string Synthesize(std::string_view capture, int copies) {
  std::string out;
  std::vector<std::string_view> run;
  auto flush = [&] {
    for (int k = 0; k < copies; ++k) {
      const std::string label = ModelLabel(k);
      for (std::string_view line : run) {
        const size_t at = line.find(kVllmModelLabel);
        if (at == std::string_view::npos) {
          if (k == 0) out.append(line).push_back('\n');
          continue;
        }
        out.append(line.substr(0, at)).append(label);
        out.append(line.substr(at + kVllmModelLabel.size())).push_back('\n');
      }
    }
    run.clear();
  };
  size_t pos = 0;
  while (pos < capture.size()) {
    size_t nl = capture.find('\n', pos);
    if (nl == std::string_view::npos) nl = capture.size();
    std::string_view line = capture.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line[0] == '#') {
      flush();
      out.append(line).push_back('\n');
    } else {
      run.push_back(line);
    }
  }
  flush();
  return out;
}

Input SyntheticFromVllm(std::string_view capture) {
  const size_t one = Synthesize(capture, 1).size();
  const size_t per_copy = Synthesize(capture, 2).size() - one;
  int copies = 1;
  if (per_copy > 0 && one < kSyntheticTargetBytes) {
    copies += static_cast<int>((kSyntheticTargetBytes - one + per_copy - 1) / per_copy);
  }
  return Input{"synthetic-vllm-0.7-x" + std::to_string(copies) + "-models",
               Synthesize(capture, copies), /*large=*/true};
}

void BM_ParsePrometheusText(benchmark::State& state, const Input* input, Heap heap) {
#ifdef EPP_BENCH_HAVE_MALLOC_TRIM
  if (heap == Heap::kWarm) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest glibc accepts on 64-bit
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
#endif
  // Parse once outside the timing: an input that does not parse is an error, not a fast run.
  size_t sample_count = 0, family_count = 0;
  {
    absl::StatusOr<epp::MetricFamilies> first = epp::ParsePrometheusText(input->text);
    if (!first.ok()) {
      state.SkipWithError(std::string(first.status().message()).c_str());
      return;
    }
    sample_count = first->sample_count();
    family_count = first->families().size();
  }
  epp::MetricFamilies reused;
  for (auto _ : state) {
    if (heap == Heap::kReuse) {
      absl::Status st = epp::ParsePrometheusTextInto(input->text, {}, reused);
      size_t samples = reused.sample_count();
      benchmark::DoNotOptimize(st);
      benchmark::DoNotOptimize(samples);
      continue;
    }
    {
      absl::StatusOr<epp::MetricFamilies> parsed = epp::ParsePrometheusText(input->text);
      size_t samples = parsed.ok() ? parsed->sample_count() : 0;
      benchmark::DoNotOptimize(samples);
    }  // freeing the result is part of the cost
#ifdef EPP_BENCH_HAVE_MALLOC_TRIM
    if (heap == Heap::kTrimEachParse) {
      state.PauseTiming();
      malloc_trim(0);
      state.ResumeTiming();
    }
#endif
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(input->text.size()));
  state.counters["input_bytes"] = static_cast<double>(input->text.size());
  state.counters["samples"] = static_cast<double>(sample_count);
  state.counters["families"] = static_cast<double>(family_count);
}

// One registered benchmark: BM_ParsePrometheusText/<suffix>.
struct Run {
  std::string suffix;
  const Input* input;
  Heap heap;
};

// In run order: the warm-heap runs change malloc's settings for the rest of the process.
std::vector<Run> Runs(const std::vector<Input>& inputs) {
  std::vector<Run> runs;
  for (const Input& in : inputs) runs.push_back(Run{in.name, &in, Heap::kAsIs});
  for (const Input& in : inputs) runs.push_back(Run{in.name + "/reuse", &in, Heap::kReuse});
#ifdef EPP_BENCH_HAVE_MALLOC_TRIM
  for (const Input& in : inputs) {
    if (in.large) runs.push_back(Run{in.name + "/after-malloc_trim", &in, Heap::kTrimEachParse});
  }
  for (const Input& in : inputs) {
    if (in.large) runs.push_back(Run{in.name + "/warm-heap", &in, Heap::kWarm});
  }
#endif
  return runs;
}

int DumpInputs(const std::vector<Input>& inputs, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (const Input& in : inputs) {
    std::ofstream out(dir / in.name, std::ios::binary);
    out.write(in.text.data(), static_cast<std::streamsize>(in.text.size()));
    if (!out) {
      std::fprintf(stderr, "epp_bench_parse: cannot write %s\n", (dir / in.name).c_str());
      return 1;
    }
  }
  std::ofstream manifest(dir / "inputs.txt");
  for (const Run& run : Runs(inputs)) manifest << run.suffix << '\t' << run.input->name << '\n';
  return manifest ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string fixtures = EPP_SHARED_FIXTURES;
  if (const char* env = std::getenv("EPP_SHARED_FIXTURES"); env != nullptr && *env != '\0') {
    fixtures = env;
  }
  std::string dump_dir;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.starts_with("--fixtures=")) {
      fixtures = std::string(arg.substr(sizeof("--fixtures=") - 1));
    } else if (arg.starts_with("--dump_inputs=")) {
      dump_dir = std::string(arg.substr(sizeof("--dump_inputs=") - 1));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  // Inputs live until the end of main; the registered benchmarks point into this vector.
  std::vector<Input> inputs;
  const fs::path metrics_dir = fs::path(fixtures) / "metrics";
  std::optional<std::string> vllm;
  for (std::string_view name : kCaptures) {
    std::optional<std::string> text = ReadFile(metrics_dir / name);
    if (!text) {
      std::fprintf(stderr, "epp_bench_parse: skipping %s (not found under %s)\n",
                   std::string(name).c_str(), metrics_dir.c_str());
      continue;
    }
    if (name == kVllmCapture) vllm = *text;
    inputs.push_back(Input{std::string(name), std::move(*text)});
  }
  if (vllm) {
    inputs.push_back(SyntheticFromVllm(*vllm));
  } else {
    std::fprintf(stderr, "epp_bench_parse: no vLLM capture, so no synthetic input\n");
  }
  if (inputs.empty()) {
    std::fprintf(stderr,
                 "epp_bench_parse: no inputs; pass --fixtures=DIR (the folder holding metrics/) "
                 "or set EPP_SHARED_FIXTURES\n");
    return 1;
  }

  if (!dump_dir.empty()) return DumpInputs(inputs, dump_dir);

  for (const Run& run : Runs(inputs)) {
    benchmark::RegisterBenchmark(("BM_ParsePrometheusText/" + run.suffix).c_str(),
                                 BM_ParsePrometheusText, run.input, run.heap);
  }
  benchmark::AddCustomContext("fixtures", fixtures);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
