// The driver of the fuzz targets in builds without libFuzzer (GCC, the normal CI build): runs
// every input given on the command line through LLVMFuzzerTestOneInput once, so each corpus and
// every past crash is replayed as an ordinary test. Arguments are files or directories (each
// directory's regular files, sorted by name, so a failure names the same file every run);
// arguments starting with '-' (libFuzzer flags) are ignored. Exit code 0 when every input ran,
// 1 when an argument cannot be read; a crashing input aborts the process after its name was
// printed.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool ReadFile(const std::filesystem::path& path, std::vector<char>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    const std::filesystem::path arg(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(arg, ec))
        if (entry.is_regular_file()) files.push_back(entry.path());
      if (ec) {
        std::fprintf(stderr, "cannot list %s: %s\n", argv[i], ec.message().c_str());
        return 1;
      }
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (std::filesystem::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "not a file or directory: %s\n", argv[i]);
      return 1;
    }
  }
  using Clock = std::chrono::steady_clock;
  double slowest_ms = 0;
  std::string slowest;
  const Clock::time_point start = Clock::now();
  std::vector<char> bytes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = inputs[i].string();
    if (!ReadFile(inputs[i], bytes)) {
      std::fprintf(stderr, "cannot read %s\n", name.c_str());
      return 1;
    }
    std::fprintf(stderr, "[%zu/%zu] %s (%zu bytes)\n", i + 1, inputs.size(), name.c_str(), bytes.size());
    // An exactly sized heap copy, so a sanitizer build catches reads past the end.
    std::unique_ptr<uint8_t[]> data(new uint8_t[bytes.size() + (bytes.empty() ? 1 : 0)]);
    if (!bytes.empty()) std::memcpy(data.get(), bytes.data(), bytes.size());
    const Clock::time_point t0 = Clock::now();
    LLVMFuzzerTestOneInput(data.get(), bytes.size());
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (ms > slowest_ms) {
      slowest_ms = ms;
      slowest = name;
    }
  }
  const double total_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  std::printf("ran %zu inputs in %.1f ms", inputs.size(), total_ms);
  if (!slowest.empty()) std::printf(" (slowest %.1f ms: %s)", slowest_ms, slowest.c_str());
  std::printf("\n");
  return 0;
}
