// Public headers include only the standard library, Abseil and other epp headers (DESIGN.md
// section 2); every one also compiles on its own (the epp_header_check target in
// tests/CMakeLists.txt).
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace {

TEST(PublicHeadersTest, IncludeOnlyStdAbseilAndEpp) {
  const std::filesystem::path dir = std::filesystem::path(EPP_SOURCE_DIR) / "libepp" / "include" / "epp";
  int headers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.rfind("#include", 0) != 0) continue;
      const bool std_header = line.find('<') != std::string::npos && line.find(".h") == std::string::npos;
      const bool ok = std_header || line.find("\"absl/") != std::string::npos || line.find("\"epp/") != std::string::npos;
      EXPECT_TRUE(ok) << entry.path().filename() << ":" << n << ": " << line;
    }
    ++headers;
  }
  EXPECT_GE(headers, 8);
}

}  // namespace
