// Private: the parts of a Tokenizer (tokenizer.cc), its regex splitter (regex_split.cc) and its
// BPE model (bpe.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "epp/status.h"
#include "epp/text/tokenizer.h"

namespace epp::tokenizer_internal {

// Unicode White_Space, the set Oniguruma's `\s` and Rust's char::is_whitespace match.
bool IsWhiteSpace(int32_t cp);

// Receives the pieces a pre-tokenizer step cuts, in order.
using PieceSink = absl::FunctionRef<void(std::string_view)>;

// Patterns with a hand-written scanner (known_split.cc).
enum class KnownPattern { kNone, kLlama3, kQwen2, kGpt2 };
KnownPattern RecognizePattern(std::string_view pattern);
// Appends the pieces of `text` (valid UTF-8); the pattern matches everywhere, so there are no gaps.
void SplitKnown(KnownPattern pattern, std::string_view text, PieceSink out);

// A compiled Split pattern (PCRE2, UTF + UCP, JIT when available; a known pattern's scanner
// when it has one).
class SplitRegex {
 public:
  ~SplitRegex();
  // `pattern` in Oniguruma syntax as tokenizer.json writes it; errors name `path`.
  static absl::StatusOr<std::shared_ptr<const SplitRegex>> Compile(std::string_view pattern, const std::string& path);
  // Appends the pieces of `text` (valid UTF-8): every match, and every non-empty stretch between
  // matches unless `removed` (behavior Removed drops the matches instead... see regex_split.cc).
  absl::Status Split(std::string_view text, bool removed, PieceSink out) const;
  // The same on PCRE2 even for a known pattern (tests compare the two).
  absl::Status SplitPcre2(std::string_view text, bool removed, PieceSink out) const;
  KnownPattern known() const { return known_; }
  // False when PCRE2's Unicode tables (10.42: Unicode 14) and utf8proc's (the scanners': Unicode
  // 15) disagree on whether a character of `text` is a letter or a number: characters assigned
  // in Unicode 15. There the scanners follow the newer tables, as the reference (Node's ICU) does.
  static bool SameCharacterClasses(std::string_view text);
  // Pattern rewriting (exposed for tests): `\s` / `\S` as Oniguruma's White_Space sets.
  static absl::StatusOr<std::string> Translate(std::string_view pattern);

 private:
  SplitRegex() = default;
  void* code_ = nullptr;  // pcre2_code_8
  KnownPattern known_ = KnownPattern::kNone;
};

struct NormalizerStep {
  enum Kind { kNfc, kNfd, kNfkc, kNfkd, kPrepend, kReplace } kind = kNfc;
  std::string text, with;  // Prepend: text; Replace: every `text` becomes `with`
};

struct PreTokenizerStep {
  enum Kind { kSplit, kByteLevel, kMetaspace } kind = kSplit;
  // Metaspace: spaces become `replacement`, which is prepended (always, or only to the text's
  // first section) and, with split, starts each piece.
  std::string replacement;
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
  bool metaspace_split = true;
  enum SplitBehavior { kIsolated, kRemoved } split_behavior = kIsolated;
  bool add_prefix_space = false;              // ByteLevel
  std::shared_ptr<const SplitRegex> regex;    // Split, or ByteLevel with use_regex
};

struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool lstrip = false, rstrip = false, single_word = false, special = false;
};

struct TemplateItem {
  bool sequence = false;      // the text's ids
  std::vector<uint32_t> ids;  // a special token's ids
};

// Byte-level BPE: symbols are bytes; merges join adjacent symbols by rank.
struct Bpe {
  absl::flat_hash_map<std::string, uint32_t> vocab;  // raw bytes -> id
  absl::flat_hash_map<uint64_t, uint32_t> short_vocab;  // ShortKey -> id, tokens of up to 7 bytes
  // Up to 7 bytes and their length in one integer (most pieces are that short; an integer key
  // hashes and compares in a few instructions). REQUIRES: w.size() <= 7.
  static uint64_t ShortKey(std::string_view w) {
    uint64_t k = static_cast<uint64_t>(w.size()) << 56;
    for (size_t i = 0; i < w.size(); ++i) k |= static_cast<uint64_t>(static_cast<unsigned char>(w[i])) << (8 * i);
    return k;
  }
  std::optional<uint32_t> byte_id[256];
  // (left id << 32 | right id) -> (rank << 32 | merged id)
  absl::flat_hash_map<uint64_t, uint64_t> merges;
  bool ignore_merges = false;
  uint32_t max_id = 0;
  // SentencePiece-style BPE (no ByteLevel step): symbols start as characters (the vocabulary
  // holds UTF-8 strings); a character the vocabulary lacks becomes its bytes' <0xXX> tokens
  // (byte_fallback), else the unknown token, consecutive unknowns fused into one (fuse_unk).
  bool char_level = false;
  bool byte_fallback = false, fuse_unk = false;
  std::optional<uint32_t> unk_id;
  std::optional<uint32_t> fallback_id[256];
  // The first symbols of `word` into `sym` (room for word.size()); returns how many.
  uint32_t Initial(std::string_view word, uint32_t* sym) const;
  const uint64_t cache_owner;  // this model's key in the per-thread word caches

  Bpe();
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  void AddToken(const std::string& bytes, uint32_t id);
  absl::Status AddMerge(const std::string& a, const std::string& b, uint32_t rank);
  // Appends the ids of one pre-token (raw bytes, non-empty).
  void Encode(std::string_view word, std::vector<uint32_t>& out) const;
  // Merges one pre-token (at least two bytes) without the whole-word lookup.
  void Merge(std::string_view word, std::vector<uint32_t>& out) const;
  static constexpr uint32_t kSmallWord = 48;
  void EncodeSmall(std::string_view word, std::vector<uint32_t>& out) const;
  // Encode through the calling thread's cache of recent words.
  void EncodeCached(std::string_view word, std::vector<uint32_t>& out) const;
};

}  // namespace epp::tokenizer_internal

namespace epp {

namespace tokenizer_internal {
// A place where the ids of a text could be cut: the first `ids` ids are those of text[0, end).
struct Checkpoint {
  uint32_t end;
  uint32_t ids;
};
// Where EncodeBody records checkpoints: piece ends that lie in `origin` (not in a normalized or
// rewritten copy).
struct CheckpointSink {
  std::string_view origin;
  std::vector<Checkpoint>* out;
};
}  // namespace tokenizer_internal

struct Tokenizer::Impl {
  std::string source;
  std::vector<tokenizer_internal::NormalizerStep> normalizers;
  std::vector<tokenizer_internal::PreTokenizerStep> pre_tokenizers;
  tokenizer_internal::Bpe bpe;
  std::vector<tokenizer_internal::AddedToken> added;
  std::vector<tokenizer_internal::TemplateItem> single;  // post-processor template
  // Added-token matching: which bytes start one; tokens by length, longest first.
  bool added_first[256] = {};
  int single_first = -1;  // the byte every added token starts with, or -1
  std::vector<size_t> order;
  std::vector<std::optional<std::string>> id_to_bytes;  // Decode
  // Decoding a SentencePiece-style vocabulary: replacements (▁ to a space) on the joined text,
  // then up to `decode_strip` leading spaces removed. An unsupported decoder is kept as the
  // reason Decode fails.
  std::vector<std::pair<std::string, std::string>> decode_replace;
  size_t decode_strip = 0;
  std::string decoder_unsupported;

  void IndexAddedTokens();
  const tokenizer_internal::AddedToken* AddedAt(std::string_view text, size_t pos, size_t* skip) const;
  // The ids of `text` without the post-processor's template (valid UTF-8 is the caller's check);
  // with `sink`, the checkpoints along the way.
  absl::Status EncodeBody(std::string_view text, std::vector<uint32_t>& out,
                          const tokenizer_internal::CheckpointSink* sink = nullptr) const;
  void ApplyTemplate(const std::vector<uint32_t>& body, std::vector<uint32_t>& out) const;
  // `first`: the section starts the text (Metaspace's prepend_scheme "first").
  absl::Status EncodeSection(std::string_view text, std::vector<uint32_t>& out,
                             const tokenizer_internal::CheckpointSink* sink, bool first = false) const;
  // Pre-tokenizer steps from `step` on, over one piece; the last step's pieces go to BPE.
  absl::Status PreTokenize(size_t step, std::string_view piece, std::vector<uint32_t>& out,
                           const tokenizer_internal::CheckpointSink* sink, bool first = false) const;
  bool prefix_space = false;  // a ByteLevel step adds a prefix space: no prefix reuse
  bool restartable = true;    // every split step is a known pattern: piece ends are restart points
  size_t max_added_bytes = 0;
};

}  // namespace epp
