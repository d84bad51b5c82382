// In-process tokenization from a Hugging Face `tokenizer.json`: the token ids the model server
// computes for a text, without asking it.
//
// The pipeline is Hugging Face's: added tokens are matched first (leftmost, longest, with their
// lstrip / rstrip / single_word rules), then each stretch between them is normalized,
// pre-tokenized and run through the model; with add_special_tokens the post-processor's template
// adds BOS / EOS. What is implemented (anything else in a tokenizer.json fails at load, naming
// the JSON path, never a silently different answer):
//   normalizer      null, NFC, NFD, NFKC, NFKD (utf8proc), Prepend, Replace (a string),
//                   Sequence of those
//   pre_tokenizer   null, Split (Regex or String pattern; behavior Isolated or Removed; invert
//                   false), ByteLevel (add_prefix_space, use_regex with GPT-2's pattern),
//                   Metaspace (replacement, prepend_scheme, split), Sequence of those
//   model           BPE: over byte-level symbols with a ByteLevel step; otherwise over
//                   characters (SentencePiece-style) with byte_fallback, unk_token, fuse_unk.
//                   Merges in both "a b" and ["a", "b"] forms, ignore_merges; no dropout, no
//                   subword affixes
//   post_processor  null, ByteLevel (ids unchanged), TemplateProcessing (single), Sequence
//   decoder         (character vocabularies) Replace, ByteFallback, Fuse, Strip, Metaspace
// Split regexes run on PCRE2 (JIT, UTF + UCP). `\s` / `\S` are rewritten to the White_Space set
// Oniguruma (the Rust reference's engine) uses, which PCRE2 10.42's `\s` does not fully match.
//
// A Tokenizer is immutable after load and safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epp/status.h"

namespace epp {

class PrefixTokenizer;
class ChatTemplate;

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // `json` is the text of a tokenizer.json; `source` names it in errors ("dir/tokenizer.json").
  static absl::StatusOr<std::shared_ptr<const Tokenizer>> FromJson(std::string_view json, std::string_view source);
  // A tokenizer.json file, or a directory holding one.
  static absl::StatusOr<std::shared_ptr<const Tokenizer>> FromPath(const std::string& path);

  // The ids of `text` (valid UTF-8, else kInvalidArgument naming the byte offset). Special
  // tokens written in the text are recognised as such (as Hugging Face does by default).
  absl::StatusOr<std::vector<uint32_t>> Encode(std::string_view text, bool add_special_tokens) const;
  // The same, appending to `out` (a caller tokenizing many texts keeps one buffer).
  absl::Status EncodeInto(std::string_view text, bool add_special_tokens, std::vector<uint32_t>& out) const;

  // The bytes of `ids` joined (the ByteLevel decoder; added tokens as written). Unknown ids are
  // kInvalidArgument naming the position.
  absl::StatusOr<std::string> Decode(std::span<const uint32_t> ids) const;

  // The id of a token string (vocabulary form, e.g. "Ġthe", or an added token's content).
  std::optional<uint32_t> TokenId(std::string_view token) const;
  // Vocabulary size including added tokens (largest id + 1).
  size_t vocab_size() const;
  const std::string& source() const;

  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);

 private:
  friend class PrefixTokenizer;
class ChatTemplate;
  std::unique_ptr<Impl> impl_;
};

// Encodes through a cache of earlier texts' ids, so that a prompt whose beginning (a system
// prompt, a conversation so far) was tokenized before pays only for the rest. A text that starts
// with the first k blocks (kBlockBytes each) of an earlier text reuses that text's ids up to a
// safe cut inside those blocks and encodes only what follows. A safe cut is a piece boundary
// between two ASCII non-space characters, the second not the first byte of an added token, at
// least a margin (64 bytes, or the longest added token) before the blocks' end, outside any
// stretch the normalizer changed (text between added tokens that is not in normal form already):
// every decision the pre-tokenizer, the added-token matcher and
// the normalizer make before it depends only on bytes inside the blocks, so the ids are exactly
// Tokenizer::Encode's (tested on random texts). Blocks are identified by chained 128-bit hashes.
// Bounded: least recently used texts go first once the cache holds `max_ids` ids. Tokenizers
// whose ByteLevel step adds a prefix space are encoded without the cache. Thread-safe.
class PrefixTokenizer {
 public:
  static constexpr size_t kBlockBytes = 4096;
  explicit PrefixTokenizer(std::shared_ptr<const Tokenizer> tokenizer, size_t max_ids = size_t{1} << 24);
  ~PrefixTokenizer();
  PrefixTokenizer(const PrefixTokenizer&) = delete;
  PrefixTokenizer& operator=(const PrefixTokenizer&) = delete;

  absl::StatusOr<std::vector<uint32_t>> Encode(std::string_view text, bool add_special_tokens) const;

  struct Stats {
    int64_t encodes = 0;
    int64_t hits = 0;          // encodes that reused an earlier text's ids
    int64_t reused_bytes = 0;  // bytes not tokenized again
    size_t entries = 0;        // texts cached
    size_t ids = 0;            // ids cached
  };
  Stats stats() const;
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  struct State;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<State> state_;
};

// What a request body tokenizes to, as the model server computes it (vLLM's OpenAI server).
struct TokenizedPrompt {
  std::string text;            // the text that was tokenized (empty when ids were given)
  std::vector<uint32_t> ids;
  bool ids_given = false;      // the body carried token ids, passed through
};

// The prompt of an OpenAI request body sent to `path`:
//   .../completions: `prompt` a string, tokenized with the tokenizer's special tokens (BOS) added
//     unless the body says "add_special_tokens": false; or token ids (a list of integers, or a
//     list holding one such list), passed through.
//   .../chat/completions: the messages rendered with `chat` (epp/text/chat_template.h, vLLM's rules),
//     tokenized without special tokens unless the body says "add_special_tokens": true (vLLM's
//     chat default is false: the template writes BOS itself). Without a template,
//     kFailedPrecondition.
// kInvalidArgument naming the JSON path for a body that is not such a request (a batch of
// several prompts included: the EPP routes one request to one server).
absl::StatusOr<TokenizedPrompt> TokenizeRequestBody(const Tokenizer& tokenizer, std::string_view path,
                                                    std::string_view body, const ChatTemplate* chat = nullptr);
// The same through a prefix cache (same ids; a prompt starting like an earlier one costs less).
absl::StatusOr<TokenizedPrompt> TokenizeRequestBody(const PrefixTokenizer& tokenizer, std::string_view path,
                                                    std::string_view body, const ChatTemplate* chat = nullptr);

}  // namespace epp
