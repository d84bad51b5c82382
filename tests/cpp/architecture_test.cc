// The shape of the tree that docs/architecture.md promises: every public header has a row in its
// header table, every row names a header that exists, and each header is implemented in a source
// file of its own stem (so `epp/kv/index.h` leads to `src/kv/index.cc`), except the few that
// only hold macros and inline code, which the row says are header-only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kRoot = EPP_SOURCE_DIR;

// Public headers as their include path ("epp/kv/index.h").
std::set<std::string> PublicHeaders() {
  std::set<std::string> out;
  const fs::path include = kRoot / "libepp" / "include";
  for (const auto& entry : fs::recursive_directory_iterator(include / "epp")) {
    if (entry.is_regular_file() && entry.path().extension() == ".h") {
      out.insert(fs::relative(entry.path(), include).generic_string());
    }
  }
  return out;
}

struct Row {
  int line = 0;
  std::string implemented_in;  // the last cell
};

// The rows of the "## The public headers" table: `| `epp/...h` | ... | implemented in |`.
std::map<std::string, Row> HeaderRows(std::vector<std::string>& problems) {
  std::ifstream in(kRoot / "docs" / "architecture.md");
  std::map<std::string, Row> rows;
  std::string line;
  bool in_section = false;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.rfind("## ", 0) == 0) in_section = line == "## The public headers";
    if (!in_section || line.rfind("| `epp/", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    const std::string header = line.substr(3, end - 3);
    std::vector<std::string> cells;
    std::stringstream cells_in(line.substr(1));
    std::string cell;
    while (std::getline(cells_in, cell, '|')) cells.push_back(cell);
    if (cells.size() < 4) {
      problems.push_back("docs/architecture.md:" + std::to_string(n) + ": a header row has " +
                         std::to_string(cells.size()) + " cells, not 4 (header, audience, declares, implemented in)");
      continue;
    }
    if (!rows.emplace(header, Row{n, cells[3]}).second) {
      problems.push_back("docs/architecture.md:" + std::to_string(n) + ": a second row for " + header);
    }
  }
  return rows;
}

std::string Stem(const std::string& path) { return fs::path(path).stem().string(); }

TEST(ArchitectureTest, EveryPublicHeaderHasARowAndEveryRowAHeader) {
  std::vector<std::string> problems;
  const auto rows = HeaderRows(problems);
  const auto headers = PublicHeaders();
  ASSERT_GT(headers.size(), 20u) << "the public headers were not found under " << kRoot;
  for (const auto& h : headers) {
    if (!rows.count(h)) problems.push_back(h + " has no row in docs/architecture.md's header table");
  }
  for (const auto& [h, row] : rows) {
    if (!headers.count(h)) {
      problems.push_back("docs/architecture.md:" + std::to_string(row.line) + ": " + h + " is not a public header");
    }
  }
  EXPECT_TRUE(problems.empty()) << [&] {
    std::string all;
    for (const auto& p : problems) all += p + "\n";
    return all;
  }();
}

TEST(ArchitectureTest, EachHeaderIsImplementedInASourceOfItsStem) {
  std::vector<std::string> problems;
  const auto rows = HeaderRows(problems);
  // Every libepp source by stem.
  std::map<std::string, std::vector<std::string>> sources;
  for (const auto& entry : fs::recursive_directory_iterator(kRoot / "libepp" / "src")) {
    if (entry.is_regular_file() && entry.path().extension() == ".cc") {
      sources[entry.path().stem().string()].push_back(fs::relative(entry.path(), kRoot / "libepp").generic_string());
    }
  }
  const std::set<std::string> header_only = {"epp/status.h", "epp/version.h"};
  for (const auto& [h, row] : rows) {
    const std::string where = "docs/architecture.md:" + std::to_string(row.line) + ": " + h;
    if (row.implemented_in.find("header-only") != std::string::npos) {
      if (!header_only.count(h)) problems.push_back(where + " says header-only, but only status.h and version.h are");
      continue;
    }
    // The cell names the sources in backticks: `src/kv/index.cc`, ...; the first has the stem.
    const size_t open = row.implemented_in.find('`');
    const size_t close = open == std::string::npos ? open : row.implemented_in.find('`', open + 1);
    if (close == std::string::npos) {
      problems.push_back(where + ": the last cell names no source in backticks");
      continue;
    }
    const std::string named = row.implemented_in.substr(open + 1, close - open - 1);
    if (!fs::exists(kRoot / "libepp" / named)) problems.push_back(where + ": " + named + " does not exist under libepp/");
    if (Stem(named) != Stem(h)) problems.push_back(where + ": " + named + " does not have the header's stem");
    if (!sources.count(Stem(h))) problems.push_back(where + ": no libepp source is named " + Stem(h) + ".cc");
  }
  EXPECT_TRUE(problems.empty()) << [&] {
    std::string all;
    for (const auto& p : problems) all += p + "\n";
    return all;
  }();
}

}  // namespace
