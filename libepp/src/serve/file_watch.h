// Watching a file by path with the settle rule (private to libepp's serve runtime).
//
// The file is re-stat()ed by path on every poll, so both an edit in place (mtime, size) and a
// Kubernetes ConfigMap update (the `..data` symlink swapped to a new directory: the path now
// resolves to another inode) are seen. A change is reported once the file looked the same on two
// consecutive polls, so a half-written file is not loaded.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace epp::internal {

class FileWatch {
 public:
  enum class Change {
    kNone,      // as last applied
    kSettling,  // changed since the last poll: wait one more
    kChanged,   // changed and settled: load it
    kGone,      // settled as missing or unreadable (reported once per disappearance)
  };

  explicit FileWatch(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  // The file as it is now counts as applied. Call before reading it, so that a change made while
  // it is being read shows on the next polls.
  void MarkApplied() {
    applied_ = Stat();
    pending_.reset();
  }

  Change Poll() {
    const Sig sig = Stat();
    if (sig == applied_) {
      pending_.reset();
      return Change::kNone;
    }
    if (!pending_ || !(*pending_ == sig)) {  // first sight of this version: let it settle one poll
      pending_ = sig;
      return Change::kSettling;
    }
    pending_.reset();
    applied_ = sig;
    return sig.exists ? Change::kChanged : Change::kGone;
  }

 private:
  struct Sig {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const Sig&) const = default;
  };

  Sig Stat() const {
    Sig sig;
    struct stat st {};
    // stat(), not lstat(): a ConfigMap file is a symlink chain (endpoints.yaml -> ..data/... ->
    // ..2025_01_01_.../endpoints.yaml) and the swap shows as the path resolving to a new inode.
    if (::stat(path_.c_str(), &st) != 0) return sig;
    sig.exists = true;
    sig.dev = st.st_dev;
    sig.ino = st.st_ino;
    sig.size = st.st_size;
    sig.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    sig.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
    return sig;
  }

  std::string path_;
  Sig applied_;
  std::optional<Sig> pending_;
};

}  // namespace epp::internal
