// KV-cache event payloads (msgpack) <-> KvEventBatch, and the topic and sequence frames
// (kv/events.h has the wire format).
//
// Decoding reads the payload with the small bounds-checked msgpack reader below rather than with
// msgpack-cxx's unpack, for three reasons: errors name the place and byte ("events[2].token_ids[5]:
// truncated at byte 57") where msgpack-cxx only throws "insufficient bytes" or "parse error"; the
// fields go straight into the structs instead of through a tree of msgpack::object copies; and
// memory follows the bytes actually present. msgpack-cxx reserves 24 bytes per *declared* array
// element (48 per map entry) as soon as it reads a length, so a 5-byte input declaring 2^24
// elements reserves 400 MB, and 63 nested ones 25 GB of address space (untouched pages, cheap
// under Linux's default overcommit, a bad_alloc under strict overcommit). Here a declared length
// must fit in the bytes that are left (every element takes at least one), and skipped values
// allocate nothing.
//
// The reader never throws and never reads outside the payload; recursion is bounded by the nesting
// limit (64) and the work by the payload size (each value consumes at least one byte).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "epp/kv/events.h"
#include "epp/status.h"

namespace epp {
namespace {

constexpr int kMaxDepth = 64;                        // nested arrays and maps, the payload's own included
constexpr uint64_t kMaxElements = uint64_t{1} << 24;  // elements of one array, entries of one map
constexpr size_t kMaxBytesHash = 32;                 // a sha256 digest
constexpr size_t kMaxQuotedTag = 64;                 // bytes of an unknown tag quoted in an error

// ---------------------------------------------------------------------------------------------
// Error locations: a chain of stack-allocated segments, turned into text ("events[2].token_ids")
// only when an error is reported.

constexpr size_t kNoIndex = static_cast<size_t>(-1);

struct Path {
  const Path* parent = nullptr;
  std::string_view key;  // member name, unless index != kNoIndex
  size_t index = kNoIndex;

  Path Key(std::string_view k) const { return Path{this, k, kNoIndex}; }
  Path Index(size_t i) const { return Path{this, {}, i}; }
};

std::string PathString(const Path& path) {
  std::vector<const Path*> chain;
  for (const Path* p = &path; p != nullptr; p = p->parent) chain.push_back(p);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Path& seg = **it;
    if (seg.index != kNoIndex) {
      absl::StrAppend(&out, out.empty() ? "payload[" : "[", seg.index, "]");
    } else if (seg.parent != nullptr) {  // the root segment has no name
      if (!out.empty()) out += '.';
      out += seg.key;
    }
  }
  if (out.empty()) out = "payload";
  return out;
}

absl::Status ErrorAt(const Path& path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(PathString(path), ": ", ToAbsl(what)));
}

// ---------------------------------------------------------------------------------------------
// The msgpack reader.

enum class Type : uint8_t { kNil, kBool, kInt, kFloat, kStr, kBin, kArray, kMap, kExt };

// One value's head: scalars completely, containers as their element count (the elements follow).
struct Value {
  Type type = Type::kNil;
  bool negative = false;   // kInt: the value is a negative int64 (its bits are in `u`)
  uint64_t u = 0;          // kInt: the value (two's complement when negative); kBool: 0/1;
                           // kArray: elements; kMap: entries
  double f = 0;            // kFloat
  std::string_view bytes;  // kStr, kBin, kExt: the payload

  bool is_nil() const { return type == Type::kNil; }
  int64_t as_signed() const { return static_cast<int64_t>(u); }
};

// "nil", "str", ..., and ints with their value ("int -1"), for "got ..." messages.
std::string Describe(const Value& v) {
  switch (v.type) {
    case Type::kNil: return "nil";
    case Type::kBool: return "bool";
    case Type::kInt: return v.negative ? absl::StrCat("int ", v.as_signed()) : absl::StrCat("int ", v.u);
    case Type::kFloat: return "float";
    case Type::kStr: return "str";
    case Type::kBin: return absl::StrCat("bin of ", v.bytes.size(), v.bytes.size() == 1 ? " byte" : " bytes");
    case Type::kArray: return "array";
    case Type::kMap: return "map";
    case Type::kExt: return "ext";
  }
  return "value";
}

absl::Status TypeError(const Path& path, std::string_view expected, const Value& got) {
  return ErrorAt(path, absl::StrCat("expected ", ToAbsl(expected), ", got ", Describe(got)));
}

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }
  void Seek(size_t pos) { pos_ = pos; }

  // Whether the next value is a map (without reading it).
  bool AtMap() const {
    if (remaining() == 0) return false;
    const auto b = static_cast<uint8_t>(in_[pos_]);
    return (b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf;
  }

  // Reads the value at the current position if it is an int in one of the forms token ids come
  // in (fixint, uint 8/16/32); false (and nothing read) otherwise. The fast path of ReadTokens.
  bool TryReadUint32(uint32_t& out) {
    if (remaining() == 0) return false;
    const auto b = static_cast<uint8_t>(in_[pos_]);
    if (b <= 0x7f) {
      out = b;
      ++pos_;
      return true;
    }
    if (b < 0xcc || b > 0xce) return false;
    const size_t width = size_t{1} << (b - 0xcc);
    if (remaining() < 1 + width) return false;
    uint32_t v = 0;
    for (size_t i = 1; i <= width; ++i) v = v << 8 | static_cast<uint8_t>(in_[pos_ + i]);
    pos_ += 1 + width;
    out = v;
    return true;
  }

  // Reads the head of the value at the current position into `v`. `depth` is the nesting level
  // the value has if it is a container (1 for the payload itself): deeper than kMaxDepth, or
  // more than kMaxElements elements, or more elements than bytes left, is an error.
  absl::Status Read(const Path& at, int depth, Value& v) {
    if (remaining() == 0) return Truncated(at);
    const size_t start = pos_;
    const auto b = static_cast<uint8_t>(in_[pos_++]);
    v = Value();
    if (b <= 0x7f) return Int(v, b);
    if (b >= 0xe0) return NegInt(v, static_cast<int8_t>(b));
    if (b >= 0x80 && b <= 0x8f) return Container(at, depth, Type::kMap, b & 0x0f, v);
    if (b >= 0x90 && b <= 0x9f) return Container(at, depth, Type::kArray, b & 0x0f, v);
    if (b >= 0xa0 && b <= 0xbf) return Bytes(at, Type::kStr, b & 0x1f, v);
    uint64_t n = 0;
    switch (b) {
      case 0xc0: v.type = Type::kNil; return absl::OkStatus();
      case 0xc2:
      case 0xc3: v.type = Type::kBool; v.u = b & 1; return absl::OkStatus();
      case 0xc4: case 0xc5: case 0xc6:  // bin 8/16/32
        if (!Uint(size_t{1} << (b - 0xc4), n)) return Truncated(at);
        return Bytes(at, Type::kBin, n, v);
      case 0xc7: case 0xc8: case 0xc9:  // ext 8/16/32: length, type byte, data
        if (!Uint(size_t{1} << (b - 0xc7), n)) return Truncated(at);
        return Bytes(at, Type::kExt, n + 1, v);
      case 0xca: {
        uint64_t bits = 0;
        if (!Uint(4, bits)) return Truncated(at);
        v.type = Type::kFloat;
        v.f = std::bit_cast<float>(static_cast<uint32_t>(bits));
        return absl::OkStatus();
      }
      case 0xcb: {
        uint64_t bits = 0;
        if (!Uint(8, bits)) return Truncated(at);
        v.type = Type::kFloat;
        v.f = std::bit_cast<double>(bits);
        return absl::OkStatus();
      }
      case 0xcc: case 0xcd: case 0xce: case 0xcf:  // uint 8/16/32/64
        if (!Uint(size_t{1} << (b - 0xcc), n)) return Truncated(at);
        return Int(v, n);
      case 0xd0: case 0xd1: case 0xd2: case 0xd3: {  // int 8/16/32/64
        const size_t width = size_t{1} << (b - 0xd0);
        if (!Uint(width, n)) return Truncated(at);
        // Sign-extend the big-endian two's complement value to 64 bits.
        const int shift = static_cast<int>(64 - 8 * width);
        const auto value = static_cast<int64_t>(n << shift) >> shift;
        return value < 0 ? NegInt(v, value) : Int(v, static_cast<uint64_t>(value));
      }
      case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:  // fixext 1/2/4/8/16
        return Bytes(at, Type::kExt, (size_t{1} << (b - 0xd4)) + 1, v);
      case 0xd9: case 0xda: case 0xdb:  // str 8/16/32
        if (!Uint(size_t{1} << (b - 0xd9), n)) return Truncated(at);
        return Bytes(at, Type::kStr, n, v);
      case 0xdc: case 0xdd:  // array 16/32
        if (!Uint(size_t{2} << (b - 0xdc), n)) return Truncated(at);
        return Container(at, depth, Type::kArray, n, v);
      case 0xde: case 0xdf:  // map 16/32
        if (!Uint(size_t{2} << (b - 0xde), n)) return Truncated(at);
        return Container(at, depth, Type::kMap, n, v);
      default: break;  // 0xc1: never used
    }
    return ErrorAt(at, absl::StrCat("invalid msgpack byte 0x", absl::Hex(b, absl::kZeroPad2), " at byte ", start));
  }

  // Reads and discards one whole value (containers with everything in them).
  absl::Status Skip(const Path& at, int depth) {
    Value v;
    EPP_RETURN_IF_ERROR(Read(at, depth, v));
    return SkipElements(at, depth, v);
  }

  // Discards the elements of the container `v` whose head was just read at `depth`.
  absl::Status SkipElements(const Path& at, int depth, const Value& v) {
    if (v.type != Type::kArray && v.type != Type::kMap) return absl::OkStatus();
    const uint64_t n = v.type == Type::kMap ? 2 * v.u : v.u;
    for (uint64_t i = 0; i < n; ++i) EPP_RETURN_IF_ERROR(Skip(at, depth + 1));
    return absl::OkStatus();
  }

 private:
  absl::Status Truncated(const Path& at) const {
    return ErrorAt(at, absl::StrCat("truncated at byte ", in_.size()));
  }

  // A big-endian unsigned integer of `width` bytes.
  bool Uint(size_t width, uint64_t& out) {
    if (remaining() < width) return false;
    out = 0;
    for (size_t i = 0; i < width; ++i) out = out << 8 | static_cast<uint8_t>(in_[pos_ + i]);
    pos_ += width;
    return true;
  }

  static absl::Status Int(Value& v, uint64_t value) {
    v.type = Type::kInt;
    v.u = value;
    return absl::OkStatus();
  }
  static absl::Status NegInt(Value& v, int64_t value) {
    v.type = Type::kInt;
    v.negative = true;
    v.u = static_cast<uint64_t>(value);
    return absl::OkStatus();
  }

  absl::Status Bytes(const Path& at, Type type, uint64_t n, Value& v) {
    if (n > remaining()) return Truncated(at);
    v.type = type;
    v.bytes = in_.substr(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return absl::OkStatus();
  }

  absl::Status Container(const Path& at, int depth, Type type, uint64_t n, Value& v) {
    if (depth > kMaxDepth) return ErrorAt(at, absl::StrCat("nested deeper than ", kMaxDepth));
    const char* what = type == Type::kArray ? "elements" : "entries";
    if (n > kMaxElements) return ErrorAt(at, absl::StrCat(n, " ", what, " declared, more than 2^24"));
    // Every element takes at least one byte (two per map entry).
    if ((type == Type::kMap ? 2 * n : n) > remaining())
      return ErrorAt(at, absl::StrCat("truncated: ", n, " ", what, " declared, ", remaining(),
                                      remaining() == 1 ? " byte left" : " bytes left"));
    v.type = type;
    v.u = n;
    return absl::OkStatus();
  }

  std::string_view in_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Field values. Each reads one whole value at the reader's position (`depth` as in Reader::Read).

// A block hash: an int (a negative one reinterpreted as uint64) or 1..32 bytes (the last 8 read
// big-endian; fewer than 8 as if left-padded with zeros).
absl::Status ReadHash(Reader& r, const Path& at, int depth, uint64_t& out) {
  Value v;
  EPP_RETURN_IF_ERROR(r.Read(at, depth, v));
  if (v.type == Type::kInt) {
    out = v.u;
    return absl::OkStatus();
  }
  if (v.type == Type::kBin && !v.bytes.empty() && v.bytes.size() <= kMaxBytesHash) {
    out = 0;
    for (size_t i = v.bytes.size() > 8 ? v.bytes.size() - 8 : 0; i < v.bytes.size(); ++i)
      out = out << 8 | static_cast<uint8_t>(v.bytes[i]);
    return absl::OkStatus();
  }
  return TypeError(at, v.type == Type::kBin ? "an int or 1 to 32 bytes" : "an int or bytes", v);
}

absl::Status ReadOptionalHash(Reader& r, const Path& at, int depth, std::optional<uint64_t>& out) {
  const size_t start = r.pos();
  Value v;
  EPP_RETURN_IF_ERROR(r.Read(at, depth, v));
  if (v.is_nil()) {
    out.reset();
    return absl::OkStatus();
  }
  r.Seek(start);
  uint64_t h = 0;
  EPP_RETURN_IF_ERROR(ReadHash(r, at, depth, h));
  out = h;
  return absl::OkStatus();
}

absl::Status ReadHashList(Reader& r, const Path& at, int depth, std::vector<uint64_t>& out) {
  Value v;
  EPP_RETURN_IF_ERROR(r.Read(at, depth, v));
  if (v.type != Type::kArray) return TypeError(at, "an array", v);
  out.clear();
  out.reserve(static_cast<size_t>(v.u));  // at most one per byte left (Reader::Read checked)
  for (uint64_t i = 0; i < v.u; ++i) {
    uint64_t h = 0;
    EPP_RETURN_IF_ERROR(ReadHash(r, at.Index(static_cast<size_t>(i)), depth + 1, h));
    out.push_back(h);
  }
  return absl::OkStatus();
}

absl::Status ReadTokens(Reader& r, const Path& at, int depth, std::vector<uint32_t>& out) {
  Value v;
  EPP_RETURN_IF_ERROR(r.Read(at, depth, v));
  if (v.type != Type::kArray) return TypeError(at, "an array", v);
  out.clear();
  out.reserve(static_cast<size_t>(v.u));
  for (uint64_t i = 0; i < v.u; ++i) {
    uint32_t id = 0;
    if (r.TryReadUint32(id)) {
      out.push_back(id);
      continue;
    }
    const Path item = at.Index(static_cast<size_t>(i));
    Value t;
    EPP_RETURN_IF_ERROR(r.Read(item, depth + 1, t));
    // SGLang under EAGLE sends [token, next_token] pairs: an array here, rejected like any other.
    if (t.type != Type::kInt || t.negative || t.u > UINT32_MAX) return TypeError(item, "an int in [0, 2^32)", t);
    out.push_back(static_cast<uint32_t>(t.u));
  }
  return absl::OkStatus();
}

// An int64 >= `min`, or nil when `nil_ok` (then `out` is reset).
absl::Status ReadInt64(Reader& r, const Path& at, int depth, bool nil_ok, int64_t min, std::optional<int64_t>& out) {
  Value v;
  EPP_RETURN_IF_ERROR(r.Read(at, depth, v));
  if (nil_ok && v.is_nil()) {
    out.reset();
    return absl::OkStatus();
  }
  const bool in_range =
      v.type == Type::kInt && (v.negative || v.u <= static_cast<uint64_t>(INT64_MAX)) && v.as_signed() >= min;
  if (!in_range) {
    std::string expected = min == 0 ? "an int >= 0" : "an int64";
    if (nil_ok) expected += " or nil";
    return TypeError(at, expected, v);
  }
  out = v.as_signed();
  return absl::OkStatus();
}

// A str, or nil (""), kept as sent.
absl::Status ReadOptionalString(Reader& r, const Path& at, int depth, std::string& out) {
  Value v;
  EPP_RETURN_IF_ERROR(r.Read(at, depth, v));
  if (v.is_nil()) {
    out.clear();
    return absl::OkStatus();
  }
  if (v.type != Type::kStr) return TypeError(at, "a str or nil", v);
  out.assign(v.bytes);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Events. Fields by position (array events: element i + 1) or by name (map events); names index
// the same table.

constexpr std::string_view kStoredFields[] = {
    "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
    "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"};
constexpr size_t kStoredRequired = 4;  // block_hashes .. block_size
constexpr size_t kNumStoredFields = std::size(kStoredFields);

constexpr std::string_view kRemovedFields[] = {"block_hashes", "medium", "group_idx"};
constexpr size_t kRemovedRequired = 1;
constexpr size_t kNumRemovedFields = std::size(kRemovedFields);

enum class Tag { kStored, kRemoved, kCleared };

std::optional<Tag> ParseTag(std::string_view s) {
  if (s == "BlockStored") return Tag::kStored;
  if (s == "BlockRemoved") return Tag::kRemoved;
  if (s == "AllBlocksCleared") return Tag::kCleared;
  return std::nullopt;
}

std::string_view TagName(Tag tag) {
  switch (tag) {
    case Tag::kStored: return "BlockStored";
    case Tag::kRemoved: return "BlockRemoved";
    case Tag::kCleared: return "AllBlocksCleared";
  }
  return "";
}

absl::Status UnknownTag(const Path& at, std::string_view tag) {
  std::string quoted = absl::CHexEscape(ToAbsl(tag.substr(0, kMaxQuotedTag)));
  if (tag.size() > kMaxQuotedTag) quoted += "...";
  return ErrorAt(at, absl::StrCat("unknown event type \"", quoted, "\""));
}

// `positional`: the event is an array (else a map).
absl::Status ReadStoredField(Reader& r, const Path& event, int depth, size_t field, bool positional,
                             KvBlockStored& out) {
  const Path at = event.Key(kStoredFields[field]);
  std::optional<int64_t> i;
  switch (field) {
    case 0: return ReadHashList(r, at, depth, out.block_hashes);
    case 1: return ReadOptionalHash(r, at, depth, out.parent_block_hash);
    case 2: return ReadTokens(r, at, depth, out.token_ids);
    case 3:
      EPP_RETURN_IF_ERROR(ReadInt64(r, at, depth, /*nil_ok=*/false, 0, i));
      out.block_size = *i;
      return absl::OkStatus();
    case 4: return ReadInt64(r, at, depth, /*nil_ok=*/true, INT64_MIN, out.lora_id);
    case 5: return ReadOptionalString(r, at, depth, out.medium);
    case 6:
      // SGLang's BlockStoredWithMetadata has its metadata ({"cache_salt": ...}) in this position
      // (it has no lora_name): ignored like the fields this codec does not keep.
      if (positional && r.AtMap()) return r.Skip(at, depth);
      return ReadOptionalString(r, at, depth, out.lora_name);
    case 8: return ReadInt64(r, at, depth, /*nil_ok=*/true, INT64_MIN, out.group_idx);
    case 9: return ReadOptionalString(r, at, depth, out.kv_cache_spec_kind);
    default: return r.Skip(at, depth);  // extra_keys, kv_cache_spec_sliding_window, later ones
  }
}

absl::Status ReadRemovedField(Reader& r, const Path& event, int depth, size_t field, KvBlockRemoved& out) {
  const Path at = event.Key(kRemovedFields[field]);
  switch (field) {
    case 0: return ReadHashList(r, at, depth, out.block_hashes);
    case 1: return ReadOptionalString(r, at, depth, out.medium);
    case 2: return ReadInt64(r, at, depth, /*nil_ok=*/true, INT64_MIN, out.group_idx);
    default: return r.Skip(at, depth);
  }
}

// The number of known fields and required ones of an event type.
std::pair<size_t, size_t> FieldCounts(Tag tag) {
  switch (tag) {
    case Tag::kStored: return {kNumStoredFields, kStoredRequired};
    case Tag::kRemoved: return {kNumRemovedFields, kRemovedRequired};
    case Tag::kCleared: return {0, 0};
  }
  return {0, 0};
}

absl::Status ReadField(Reader& r, const Path& event, int depth, size_t field, bool positional, KvEvent& out) {
  if (auto* stored = std::get_if<KvBlockStored>(&out))
    return ReadStoredField(r, event, depth, field, positional, *stored);
  if (auto* removed = std::get_if<KvBlockRemoved>(&out)) return ReadRemovedField(r, event, depth, field, *removed);
  return absl::OkStatus();
}

KvEvent EmptyEvent(Tag tag) {
  switch (tag) {
    case Tag::kStored: return KvBlockStored{};
    case Tag::kRemoved: return KvBlockRemoved{};
    case Tag::kCleared: return KvAllBlocksCleared{};
  }
  return KvAllBlocksCleared{};
}

// ["BlockStored", block_hashes, ...] whose head `v` (at `depth`) was just read.
absl::Status ReadArrayEvent(Reader& r, const Path& at, int depth, const Value& v, KvEvent& out) {
  if (v.u == 0) return ErrorAt(at, "expected a tagged event, got an empty array");
  const Path tag_at = at.Index(0);
  Value tag_value;
  EPP_RETURN_IF_ERROR(r.Read(tag_at, depth + 1, tag_value));
  if (tag_value.type != Type::kStr) return TypeError(tag_at, "the event type (a str)", tag_value);
  const std::optional<Tag> tag = ParseTag(tag_value.bytes);
  if (!tag) return UnknownTag(at, tag_value.bytes);
  const auto [known, required] = FieldCounts(*tag);
  const uint64_t fields = v.u - 1;
  if (fields < required)
    return ErrorAt(at, absl::StrCat(ToAbsl(TagName(*tag)), " needs at least ", required + 1, " elements, got ", v.u));
  out = EmptyEvent(*tag);
  for (uint64_t f = 0; f < fields; ++f) {
    if (f < known) {
      EPP_RETURN_IF_ERROR(ReadField(r, at, depth + 1, static_cast<size_t>(f), /*positional=*/true, out));
    } else {
      EPP_RETURN_IF_ERROR(r.Skip(at.Index(static_cast<size_t>(f + 1)), depth + 1));
    }
  }
  return absl::OkStatus();
}

// The value positions of the str keys `names` in the map whose head `v` (at `depth`) was just
// read, the last one for a repeated key; the reader ends after the map. Other keys are skipped.
template <size_t N>
absl::Status IndexMap(Reader& r, const Path& at, int depth, const Value& v, const std::string_view (&names)[N],
                      std::optional<size_t> (&positions)[N]) {
  for (uint64_t i = 0; i < v.u; ++i) {
    const size_t key_start = r.pos();
    Value key;
    EPP_RETURN_IF_ERROR(r.Read(at, depth + 1, key));
    if (key.type == Type::kStr) {
      for (size_t k = 0; k < N; ++k) {
        if (key.bytes == names[k]) positions[k] = r.pos();
      }
    } else {
      r.Seek(key_start);
      EPP_RETURN_IF_ERROR(r.Skip(at, depth + 1));
    }
    EPP_RETURN_IF_ERROR(r.Skip(at, depth + 1));
  }
  return absl::OkStatus();
}

// The map event's fields in one pass, for the usual layout (msgspec writes the tag first): "type"
// the first key and not repeated. false when the layout differs or anything is wrong, and then
// ReadMapEvent starts over with the general two passes, which define the result (and the error).
bool ReadMapEventFast(Reader& r, const Path& at, int depth, const Value& v, KvEvent& out) {
  if (v.u == 0) return false;
  Value key;
  if (!r.Read(at, depth + 1, key).ok() || key.type != Type::kStr || key.bytes != "type") return false;
  Value tag_value;
  if (!r.Read(at, depth + 1, tag_value).ok() || tag_value.type != Type::kStr) return false;
  const std::optional<Tag> tag = ParseTag(tag_value.bytes);
  if (!tag) return false;
  const auto [known, required] = FieldCounts(*tag);
  const std::string_view* names = *tag == Tag::kStored ? kStoredFields : kRemovedFields;
  out = EmptyEvent(*tag);
  uint32_t seen = 0;  // bit f: field f was present
  size_t next = 0;    // the field expected next (engines write them in declaration order)
  for (uint64_t i = 1; i < v.u; ++i) {
    const size_t key_start = r.pos();
    if (!r.Read(at, depth + 1, key).ok()) return false;
    size_t field = known;
    if (key.type == Type::kStr) {
      if (key.bytes == "type") return false;
      if (next < known && key.bytes == names[next]) {
        field = next;
      } else {
        for (size_t f = 0; f < known; ++f) {
          if (key.bytes == names[f]) {
            field = f;
            break;
          }
        }
      }
      if (field < known) next = field + 1;
    } else {
      r.Seek(key_start);
      if (!r.Skip(at, depth + 1).ok()) return false;
    }
    if (field == known) {
      if (!r.Skip(at, depth + 1).ok()) return false;
      continue;
    }
    if (!ReadField(r, at, depth + 1, field, /*positional=*/false, out).ok()) return false;
    seen |= uint32_t{1} << field;
  }
  const uint32_t all_required = (uint32_t{1} << required) - 1;
  return (seen & all_required) == all_required;
}

// {"type": "BlockStored", "block_hashes": ..., ...} whose head `v` (at `depth`) was just read.
// Keys in any order; a repeated key: the last one counts.
absl::Status ReadMapEvent(Reader& r, const Path& at, int depth, const Value& v, KvEvent& out) {
  const size_t start = r.pos();
  if (ReadMapEventFast(r, at, depth, v, out)) return absl::OkStatus();
  r.Seek(start);

  // "type" and the fields of BlockStored (those of BlockRemoved are among them).
  static constexpr std::string_view kKeys[] = {
      "type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
      "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"};
  std::optional<size_t> positions[std::size(kKeys)];
  EPP_RETURN_IF_ERROR(IndexMap(r, at, depth, v, kKeys, positions));
  const size_t end = r.pos();

  const Path tag_at = at.Key("type");
  if (!positions[0]) return ErrorAt(tag_at, "missing");
  r.Seek(*positions[0]);
  Value tag_value;
  EPP_RETURN_IF_ERROR(r.Read(tag_at, depth + 1, tag_value));
  if (tag_value.type != Type::kStr) return TypeError(tag_at, "a str", tag_value);
  const std::optional<Tag> tag = ParseTag(tag_value.bytes);
  if (!tag) return UnknownTag(at, tag_value.bytes);

  const auto [known, required] = FieldCounts(*tag);
  const std::string_view* names = *tag == Tag::kStored ? kStoredFields : kRemovedFields;
  out = EmptyEvent(*tag);
  for (size_t f = 0; f < known; ++f) {
    std::optional<size_t> position;
    for (size_t k = 1; k < std::size(kKeys); ++k) {
      if (kKeys[k] == names[f]) position = positions[k];
    }
    if (!position) {
      if (f < required) return ErrorAt(at.Key(names[f]), "missing");
      continue;
    }
    r.Seek(*position);
    EPP_RETURN_IF_ERROR(ReadField(r, at, depth + 1, f, /*positional=*/false, out));
  }
  r.Seek(end);
  return absl::OkStatus();
}

absl::Status ReadEvents(Reader& r, const Path& at, int depth, std::vector<KvEvent>& out) {
  Value v;
  EPP_RETURN_IF_ERROR(r.Read(at, depth, v));
  if (v.type != Type::kArray) return TypeError(at, "an array", v);
  out.clear();
  for (uint64_t i = 0; i < v.u; ++i) {
    const Path event_at = at.Index(static_cast<size_t>(i));
    Value e;
    EPP_RETURN_IF_ERROR(r.Read(event_at, depth + 1, e));
    KvEvent event;
    if (e.type == Type::kArray) {
      EPP_RETURN_IF_ERROR(ReadArrayEvent(r, event_at, depth + 1, e, event));
    } else if (e.type == Type::kMap) {
      EPP_RETURN_IF_ERROR(ReadMapEvent(r, event_at, depth + 1, e, event));
    } else {
      return TypeError(event_at, "an array or map", e);
    }
    out.push_back(std::move(event));
  }
  return absl::OkStatus();
}

// ts: a float or an int, finite.
absl::Status ReadTs(Reader& r, const Path& at, int depth, double& out) {
  Value v;
  EPP_RETURN_IF_ERROR(r.Read(at, depth, v));
  if (v.type == Type::kFloat) {
    out = v.f;
  } else if (v.type == Type::kInt) {
    out = v.negative ? static_cast<double>(v.as_signed()) : static_cast<double>(v.u);
  } else {
    return TypeError(at, "a float or int", v);
  }
  if (!std::isfinite(out)) return ErrorAt(at, "not a finite number");
  return absl::OkStatus();
}

// batch field 0, 1, 2: ts, events, data_parallel_rank.
absl::Status ReadBatchField(Reader& r, const Path& root, int depth, size_t field, KvEventBatch& out) {
  switch (field) {
    case 0: return ReadTs(r, root.Key("ts"), depth, out.ts);
    case 1: return ReadEvents(r, root.Key("events"), depth, out.events);
    case 2: return ReadInt64(r, root.Key("data_parallel_rank"), depth, /*nil_ok=*/true, INT64_MIN,
                             out.data_parallel_rank);
    default: return r.Skip(root.Index(field), depth);
  }
}

absl::Status ReadBatch(Reader& r, KvEventBatch& out) {
  const Path root;
  Value v;
  EPP_RETURN_IF_ERROR(r.Read(root, 1, v));
  if (v.type == Type::kArray) {
    if (v.u < 2)
      return ErrorAt(root, absl::StrCat("expected [ts, events, data_parallel_rank], got an array of ", v.u,
                                        v.u == 1 ? " element" : " elements"));
    for (uint64_t f = 0; f < v.u; ++f) EPP_RETURN_IF_ERROR(ReadBatchField(r, root, 2, static_cast<size_t>(f), out));
    return absl::OkStatus();
  }
  if (v.type == Type::kMap) {
    static constexpr std::string_view kKeys[] = {"ts", "events", "data_parallel_rank"};
    std::optional<size_t> positions[std::size(kKeys)];
    EPP_RETURN_IF_ERROR(IndexMap(r, root, 1, v, kKeys, positions));
    const size_t end = r.pos();
    for (size_t f = 0; f < std::size(kKeys); ++f) {
      if (!positions[f]) {
        if (f < 2) return ErrorAt(root.Key(kKeys[f]), "missing");
        continue;
      }
      r.Seek(*positions[f]);
      EPP_RETURN_IF_ERROR(ReadBatchField(r, root, 2, f, out));
    }
    r.Seek(end);
    return absl::OkStatus();
  }
  return TypeError(root, "an array or map", v);
}

// ---------------------------------------------------------------------------------------------
// The msgpack writer.

// Used by the publisher (eppctl sim, tests) to write what an engine would: ints in their
// smallest msgpack form, except hashes (always 9 bytes, see Uint64). Appends to `out`.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  void Nil() { out_ += '\xc0'; }

  void Uint(uint64_t v) {
    if (v <= 0x7f) {
      Byte(static_cast<uint8_t>(v));
    } else if (v <= UINT8_MAX) {
      Byte(0xcc);
      BigEndian(v, 1);
    } else if (v <= UINT16_MAX) {
      Byte(0xcd);
      BigEndian(v, 2);
    } else if (v <= UINT32_MAX) {
      Byte(0xce);
      BigEndian(v, 4);
    } else {
      Uint64(v);
    }
  }

  // Always the 9-byte form (hashes: llm-d's decoder rejects the shorter ones).
  void Uint64(uint64_t v) {
    Byte(0xcf);
    BigEndian(v, 8);
  }

  void Int(int64_t v) {
    if (v >= 0) return Uint(static_cast<uint64_t>(v));
    const auto bits = static_cast<uint64_t>(v);
    if (v >= -32) {
      Byte(static_cast<uint8_t>(bits));  // negative fixint
    } else if (v >= INT8_MIN) {
      Byte(0xd0);
      BigEndian(bits, 1);
    } else if (v >= INT16_MIN) {
      Byte(0xd1);
      BigEndian(bits, 2);
    } else if (v >= INT32_MIN) {
      Byte(0xd2);
      BigEndian(bits, 4);
    } else {
      Byte(0xd3);
      BigEndian(bits, 8);
    }
  }

  void OptionalInt(const std::optional<int64_t>& v) { v ? Int(*v) : Nil(); }

  void Float64(double v) {
    Byte(0xcb);
    BigEndian(std::bit_cast<uint64_t>(v), 8);
  }

  void Str(std::string_view s) {
    const size_t n = s.size();
    if (n <= 31) {
      Byte(static_cast<uint8_t>(0xa0 | n));
    } else if (n <= UINT8_MAX) {
      Byte(0xd9);
      BigEndian(n, 1);
    } else if (n <= UINT16_MAX) {
      Byte(0xda);
      BigEndian(n, 2);
    } else {
      Byte(0xdb);
      BigEndian(n, 4);  // a str over 4 GiB does not fit msgpack
    }
    out_.append(s);
  }

  // A str, or nil for "".
  void StrOrNil(std::string_view s) { s.empty() ? Nil() : Str(s); }

  void Array(size_t n) { Header(n, 0x90, 0xdc); }
  void Map(size_t n) { Header(n, 0x80, 0xde); }

 private:
  void Byte(uint8_t b) { out_ += static_cast<char>(b); }

  void BigEndian(uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) Byte(static_cast<uint8_t>(v >> (8 * i)));
  }

  // fix form up to 15, then the 16- and 32-bit forms (`code16` + 1).
  void Header(size_t n, uint8_t fix, uint8_t code16) {
    if (n <= 15) {
      Byte(static_cast<uint8_t>(fix | n));
    } else if (n <= UINT16_MAX) {
      Byte(code16);
      BigEndian(n, 2);
    } else {
      Byte(static_cast<uint8_t>(code16 + 1));
      BigEndian(n, 4);
    }
  }

  std::string& out_;
};

void WriteHashes(Writer& w, const std::vector<uint64_t>& hashes) {
  w.Array(hashes.size());
  for (uint64_t h : hashes) w.Uint64(h);
}

// BlockStored in either layout: the map form names each field (vLLM 0.26 on), the array form
// puts them in the order of the engine's struct after the tag (SGLang, older vLLM). The same
// `key` calls serve both, writing names only for maps.
void WriteStored(Writer& w, const KvBlockStored& e, KvEventEncoding encoding) {
  // group_idx and kv_cache_spec_kind only when set (then extra_keys as nil before them, in arrays).
  const bool group = e.group_idx.has_value();
  const bool kind = !e.kv_cache_spec_kind.empty();
  const bool map = encoding == KvEventEncoding::kMap;
  if (map) {
    w.Map(8 + (group ? 1 : 0) + (kind ? 1 : 0));
    w.Str("type");
  } else {
    w.Array(group || kind ? 11 : 8);
  }
  w.Str("BlockStored");
  auto key = [&](std::string_view name) {
    if (map) w.Str(name);
  };
  key("block_hashes");
  WriteHashes(w, e.block_hashes);
  key("parent_block_hash");
  e.parent_block_hash ? w.Uint64(*e.parent_block_hash) : w.Nil();
  key("token_ids");
  w.Array(e.token_ids.size());
  for (uint32_t t : e.token_ids) w.Uint(t);
  key("block_size");
  w.Int(e.block_size);
  key("lora_id");
  w.OptionalInt(e.lora_id);
  key("medium");
  w.StrOrNil(e.medium);
  key("lora_name");
  w.StrOrNil(e.lora_name);
  if (map) {
    if (group) {
      w.Str("group_idx");
      w.Int(*e.group_idx);
    }
    if (kind) {
      w.Str("kv_cache_spec_kind");
      w.Str(e.kv_cache_spec_kind);
    }
  } else if (group || kind) {
    w.Nil();  // extra_keys
    w.OptionalInt(e.group_idx);
    w.StrOrNil(e.kv_cache_spec_kind);
  }
}

void WriteRemoved(Writer& w, const KvBlockRemoved& e, KvEventEncoding encoding) {
  const bool group = e.group_idx.has_value();
  if (encoding == KvEventEncoding::kMap) {
    w.Map(group ? 4 : 3);
    w.Str("type");
    w.Str("BlockRemoved");
    w.Str("block_hashes");
    WriteHashes(w, e.block_hashes);
    w.Str("medium");
    w.StrOrNil(e.medium);
    if (group) {
      w.Str("group_idx");
      w.Int(*e.group_idx);
    }
    return;
  }
  w.Array(group ? 4 : 3);
  w.Str("BlockRemoved");
  WriteHashes(w, e.block_hashes);
  w.StrOrNil(e.medium);
  if (group) w.Int(*e.group_idx);
}

void WriteCleared(Writer& w, KvEventEncoding encoding) {
  if (encoding == KvEventEncoding::kMap) {
    w.Map(1);
    w.Str("type");
  } else {
    w.Array(1);
  }
  w.Str("AllBlocksCleared");
}

uint64_t ReadBigEndian64(std::string_view b) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = v << 8 | static_cast<uint8_t>(b[i]);
  return v;
}

}  // namespace

absl::StatusOr<KvEventBatch> DecodeKvEventBatch(std::string_view payload) {
  Reader r(payload);
  KvEventBatch batch;
  EPP_RETURN_IF_ERROR(ReadBatch(r, batch));
  if (r.remaining() != 0) {
    const size_t n = r.remaining();
    return absl::InvalidArgumentError(absl::StrCat("payload: ", n, n == 1 ? " trailing byte" : " trailing bytes",
                                                   " after the batch, from byte ", r.pos()));
  }
  return batch;
}

// The batch is [ts, events, data_parallel_rank] in both layouts; only the events differ.
std::string EncodeKvEventBatch(const KvEventBatch& batch, KvEventEncoding encoding) {
  std::string out;
  Writer w(out);
  w.Array(3);
  w.Float64(batch.ts);
  w.Array(batch.events.size());
  for (const KvEvent& event : batch.events) {
    if (const auto* stored = std::get_if<KvBlockStored>(&event)) {
      WriteStored(w, *stored, encoding);
    } else if (const auto* removed = std::get_if<KvBlockRemoved>(&event)) {
      WriteRemoved(w, *removed, encoding);
    } else {
      WriteCleared(w, encoding);
    }
  }
  w.OptionalInt(batch.data_parallel_rank);
  return out;
}

std::optional<KvTopic> ParseKvTopic(std::string_view topic) {
  const size_t first = topic.find('@');
  if (first == std::string_view::npos || topic.substr(0, first) != "kv") return std::nullopt;
  const size_t second = topic.find('@', first + 1);
  if (second == std::string_view::npos || topic.find('@', second + 1) != std::string_view::npos) return std::nullopt;
  KvTopic out;
  out.endpoint = std::string(topic.substr(first + 1, second - first - 1));
  out.model = std::string(topic.substr(second + 1));
  if (out.endpoint.empty()) return std::nullopt;
  return out;
}

std::string FormatKvTopic(std::string_view endpoint, std::string_view model) {
  std::string out = "kv@";
  out.append(endpoint);
  out += '@';
  out.append(model);
  return out;
}

// The sequence frame: 8 bytes, big-endian, as vLLM's publisher packs it; anything else is not a
// sequence (the subscriber counts such a message as malformed).
std::optional<uint64_t> DecodeKvSequence(std::string_view frame) {
  if (frame.size() != 8) return std::nullopt;
  return ReadBigEndian64(frame);
}

std::string EncodeKvSequence(uint64_t seq) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(seq >> (8 * (7 - i)));
  return out;
}

}  // namespace epp
