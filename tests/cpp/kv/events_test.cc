// The KV-event codec (kv/events.h): the byte examples of the research notes, every engine shape
// (vLLM map and array events, the oldest 2-element batches, SGLang's signed hashes and short
// events), round trips in both encodings, the exact bytes the encoder writes (checked against
// msgpack-cxx as an independent reader too), every error message, and the topic and sequence
// frame helpers.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#define MSGPACK_NO_BOOST
#include <msgpack.hpp>

#include "epp/kv/events.h"

namespace epp {
namespace {

constexpr uint64_t kH1 = 0xf31309635ef2add0;
constexpr uint64_t kH2 = 0x8464eee8f2cf3412;

// Bytes from a spec like `93 cb41d954fc40200000 ab"BlockStored"`: pairs of hex digits (spaces
// ignored) and "quoted text" copied as is, the notation of the notes' section 6.
std::string Hex(std::string_view spec) {
  std::string out;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < spec.size();) {
    const char c = spec[i];
    if (c == ' ' || c == '\n') {
      ++i;
    } else if (c == '"') {
      const size_t end = spec.find('"', i + 1);
      if (end == std::string_view::npos) {
        ADD_FAILURE() << "unterminated text in " << spec;
        return out;
      }
      out.append(spec.substr(i + 1, end - i - 1));
      i = end + 1;
    } else {
      if (i + 1 >= spec.size() || digit(c) < 0 || digit(spec[i + 1]) < 0) {
        ADD_FAILURE() << "bad hex at " << i << " in " << spec;
        return out;
      }
      out += static_cast<char>(digit(c) << 4 | digit(spec[i + 1]));
      i += 2;
    }
  }
  return out;
}

std::string ToHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    out += kDigits[static_cast<uint8_t>(c) >> 4];
    out += kDigits[static_cast<uint8_t>(c) & 15];
  }
  return out;
}

// Test inputs built with msgpack-cxx's packer (an implementation independent of the codec's).
std::string BigEndian(uint64_t v, int bytes) {
  std::string out;
  for (int i = bytes - 1; i >= 0; --i) out += static_cast<char>(v >> (8 * i));
  return out;
}

class Mp {
 public:
  Mp& Array(uint32_t n) { return Do([&] { p_.pack_array(n); }); }
  Mp& Map(uint32_t n) { return Do([&] { p_.pack_map(n); }); }
  Mp& Str(std::string_view s) {
    return Do([&] {
      p_.pack_str(static_cast<uint32_t>(s.size()));
      p_.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
    });
  }
  Mp& Bin(std::string_view b) {
    return Do([&] {
      p_.pack_bin(static_cast<uint32_t>(b.size()));
      p_.pack_bin_body(b.data(), static_cast<uint32_t>(b.size()));
    });
  }
  Mp& Uint(uint64_t v) { return Do([&] { p_.pack_uint64(v); }); }  // the shortest form
  Mp& Int(int64_t v) { return Do([&] { p_.pack_int64(v); }); }
  Mp& Nil() { return Do([&] { p_.pack_nil(); }); }
  Mp& Bool(bool b) { return Do([&] { b ? p_.pack_true() : p_.pack_false(); }); }
  // Always 0xcb / 0xca: msgpack-cxx's pack_double and pack_float write integral values as ints.
  Mp& Double(double d) { return Raw("\xcb" + BigEndian(std::bit_cast<uint64_t>(d), 8)); }
  Mp& Float(float f) { return Raw("\xca" + BigEndian(std::bit_cast<uint32_t>(f), 4)); }
  Mp& Raw(std::string_view bytes) { return Do([&] { buf_.write(bytes.data(), bytes.size()); }); }
  std::string Bytes() const { return std::string(buf_.data(), buf_.size()); }

  // The batch head [ts, events(n)] with a 3rd element to follow (rank), or 2 elements.
  Mp& Batch(uint32_t events, bool with_rank = true) {
    Array(with_rank ? 3 : 2).Double(1700000000.5);
    return Array(events);
  }
  // An array-form BlockStored with `extra` fields after block_size (lora_id, medium, ...).
  Mp& Stored(uint32_t extra) {
    Array(5 + extra).Str("BlockStored").Array(1).Uint(kH1).Nil().Array(2).Uint(1).Uint(2);
    return Uint(2);
  }

 private:
  template <class F>
  Mp& Do(F f) {
    f();
    return *this;
  }
  msgpack::sbuffer buf_;
  msgpack::packer<msgpack::sbuffer> p_{buf_};
};

KvEventBatch MustDecode(std::string_view payload) {
  absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(payload);
  EXPECT_TRUE(b.ok()) << b.status() << "\npayload: " << ToHex(payload);
  return b.ok() ? *std::move(b) : KvEventBatch();
}

// The error message of decoding `payload` (which must fail with kInvalidArgument).
std::string DecodeError(std::string_view payload) {
  absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(payload);
  if (b.ok()) {
    ADD_FAILURE() << "decoded: " << ToHex(payload);
    return "";
  }
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
  return std::string(b.status().message());
}

KvBlockStored Stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent, std::vector<uint32_t> tokens,
                     int64_t block_size, std::string medium = "GPU") {
  KvBlockStored s;
  s.block_hashes = std::move(hashes);
  s.parent_block_hash = parent;
  s.token_ids = std::move(tokens);
  s.block_size = block_size;
  s.medium = std::move(medium);
  return s;
}

KvBlockRemoved Removed(std::vector<uint64_t> hashes, std::string medium = "GPU",
                       std::optional<int64_t> group = std::nullopt) {
  KvBlockRemoved r;
  r.block_hashes = std::move(hashes);
  r.medium = std::move(medium);
  r.group_idx = group;
  return r;
}

// Every field set, in all three event types, for the round trips.
KvEventBatch FullBatch() {
  KvEventBatch b;
  b.ts = 1789095808.8312345;
  KvBlockStored s = Stored({kH1, kH2, 0, 1, ~uint64_t{0}}, kH2, {0, 1, 15, 16, 127, 128, 65535, 65536, UINT32_MAX},
                           16);
  s.lora_id = -3;
  s.lora_name = "sql-lora";
  s.group_idx = 1;
  s.kv_cache_spec_kind = "sliding_window";
  b.events.push_back(s);
  KvBlockStored location_only = Stored({42}, std::nullopt, {}, 64, "CPU");
  b.events.push_back(location_only);
  KvBlockStored kind_only = Stored({7}, std::nullopt, {1}, 1, "");
  kind_only.kv_cache_spec_kind = "full_attention";
  b.events.push_back(kind_only);
  b.events.push_back(Removed({kH1}, "GPU", 0));
  b.events.push_back(Removed({kH2, 5}, ""));
  b.events.push_back(KvAllBlocksCleared{});
  b.data_parallel_rank = 3;
  return b;
}

// ---- The notes' byte examples (section 6) -----------------------------------------------------

constexpr std::string_view kNotesArrayBatch =
    R"(93 cb41d954fc40200000 93
       98 ab"BlockStored" 92 cff31309635ef2add0 cf8464eee8f2cf3412 c0 94 01020304 02 c0 a3"GPU" c0
       93 ac"BlockRemoved" 91 cff31309635ef2add0 a3"GPU"
       91 b0"AllBlocksCleared"
       00)";

// The notes elide the ts and the hash ("cb...", "cf..."); filled in with the array example's.
constexpr std::string_view kNotesMapBatch =
    R"(93 cb41d954fc40200000 93
       8b a4"type" ab"BlockStored" ac"block_hashes" 91 cff31309635ef2add0 b1"parent_block_hash" c0
          a9"token_ids" 92 0102 aa"block_size" 02 a7"lora_id" c0 a6"medium" a3"GPU" a9"lora_name" c0
          aa"extra_keys" 91 c0 a9"group_idx" 00 b2"kv_cache_spec_kind" ae"full_attention"
       84 a4"type" ac"BlockRemoved" ac"block_hashes" 91 cff31309635ef2add0 a6"medium" a3"GPU" a9"group_idx" 00
       81 a4"type" b0"AllBlocksCleared"
       00)";

TEST(KvEventNotesTest, ArrayEventBatchDecodes) {
  const KvEventBatch b = MustDecode(Hex(kNotesArrayBatch));
  KvEventBatch want;
  want.ts = 1700000000.5;
  want.events = {Stored({kH1, kH2}, std::nullopt, {1, 2, 3, 4}, 2), Removed({kH1}), KvAllBlocksCleared{}};
  want.data_parallel_rank = 0;
  EXPECT_EQ(b, want);
}

TEST(KvEventNotesTest, ArrayEventBatchIsWhatTheEncoderWrites) {
  KvEventBatch b;
  b.ts = 1700000000.5;
  b.events = {Stored({kH1, kH2}, std::nullopt, {1, 2, 3, 4}, 2), Removed({kH1}), KvAllBlocksCleared{}};
  b.data_parallel_rank = 0;
  EXPECT_EQ(ToHex(EncodeKvEventBatch(b, KvEventEncoding::kArray)), ToHex(Hex(kNotesArrayBatch)));
}

TEST(KvEventNotesTest, MapEventBatchDecodes) {
  const KvEventBatch b = MustDecode(Hex(kNotesMapBatch));
  KvBlockStored s = Stored({kH1}, std::nullopt, {1, 2}, 2);
  s.group_idx = 0;
  s.kv_cache_spec_kind = "full_attention";
  KvEventBatch want;
  want.ts = 1700000000.5;
  want.events = {s, Removed({kH1}, "GPU", 0), KvAllBlocksCleared{}};
  want.data_parallel_rank = 0;
  EXPECT_EQ(b, want);
}

TEST(KvEventNotesTest, ExamplesAreValidMsgpackForMsgpackCxx) {
  for (std::string_view spec : {kNotesArrayBatch, kNotesMapBatch}) {
    const std::string bytes = Hex(spec);
    size_t offset = 0;
    msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size(), offset);
    EXPECT_EQ(offset, bytes.size());
    ASSERT_EQ(h.get().type, msgpack::type::ARRAY);
    EXPECT_EQ(h.get().via.array.size, 3u);
  }
}

// ---- Engine shapes ------------------------------------------------------------------------------

TEST(KvEventDecodeTest, TwoElementLegacyBatchWithTheOldestEvents) {
  // vLLM's first shape: [ts, events], BlockStored up to lora_id, BlockRemoved with hashes only.
  Mp mp;
  mp.Batch(2, /*with_rank=*/false);
  mp.Array(6).Str("BlockStored").Array(1).Uint(kH1).Uint(kH2).Array(2).Uint(1).Uint(2).Uint(2).Uint(7);
  mp.Array(2).Str("BlockRemoved").Array(1).Uint(kH1);
  const KvEventBatch b = MustDecode(mp.Bytes());
  KvBlockStored s = Stored({kH1}, kH2, {1, 2}, 2, "");
  s.lora_id = 7;
  EXPECT_EQ(b.ts, 1700000000.5);
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(std::get<KvBlockStored>(b.events[0]), s);
  EXPECT_EQ(std::get<KvBlockRemoved>(b.events[1]), Removed({kH1}, ""));
  EXPECT_FALSE(b.data_parallel_rank.has_value());
}

TEST(KvEventDecodeTest, MinimalBlockStoredHasDefaults) {
  Mp mp;
  mp.Batch(1).Stored(0).Nil();
  const KvEventBatch b = MustDecode(mp.Bytes());
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(std::get<KvBlockStored>(b.events[0]), Stored({kH1}, std::nullopt, {1, 2}, 2, ""));
  EXPECT_FALSE(b.data_parallel_rank.has_value());
}

TEST(KvEventDecodeTest, SglangSignedHashesAndShortEvents) {
  // SGLang: signed int64 hashes (any int width), [tag, hashes, parent, tokens, size, lora_id,
  // medium] with no lora_name, a BlockStoredWithMetadata's {cache_salt} right after medium (where
  // vLLM has lora_name; ignored), location-only prefetch events, attn_dp_rank.
  Mp mp;
  mp.Array(3).Double(12.25).Array(4);
  mp.Array(7).Str("BlockStored").Array(3).Int(-1).Int(INT64_MIN).Int(-200).Int(-5).Array(1).Uint(9).Uint(1).Nil()
      .Str("GPU");
  mp.Array(8).Str("BlockStored").Array(1).Int(-9000000000).Int(-1).Array(0).Uint(1).Nil().Str("CPU_PINNED");
  mp.Map(1).Str("cache_salt").Str("tenant-a");
  mp.Array(3).Str("BlockRemoved").Array(2).Int(-1).Int(INT64_MAX).Str("GPU");
  mp.Array(1).Str("AllBlocksCleared");
  mp.Uint(1);
  const KvEventBatch b = MustDecode(mp.Bytes());
  ASSERT_EQ(b.events.size(), 4u);
  EXPECT_EQ(std::get<KvBlockStored>(b.events[0]),
            Stored({~uint64_t{0}, uint64_t{1} << 63, static_cast<uint64_t>(int64_t{-200})},
                   static_cast<uint64_t>(int64_t{-5}), {9}, 1));
  EXPECT_EQ(std::get<KvBlockStored>(b.events[1]),
            Stored({static_cast<uint64_t>(int64_t{-9000000000})}, ~uint64_t{0}, {}, 1, "CPU_PINNED"));
  EXPECT_EQ(std::get<KvBlockRemoved>(b.events[2]), Removed({~uint64_t{0}, uint64_t{INT64_MAX}}));
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(b.events[3]));
  EXPECT_EQ(b.ts, 12.25);
  EXPECT_EQ(b.data_parallel_rank, 1);

  // Only array events put metadata there: in a map event "lora_name" must be a str or nil.
  Mp map;
  map.Batch(1).Map(6).Str("type").Str("BlockStored").Str("block_hashes").Array(0).Str("parent_block_hash").Nil()
      .Str("token_ids").Array(0).Str("block_size").Uint(1).Str("lora_name").Map(1).Str("cache_salt").Str("t").Nil();
  EXPECT_EQ(DecodeError(map.Bytes()), "events[0].lora_name: expected a str or nil, got map");
  // A str there (vLLM's lora_name) is kept, anything else but a map or nil is still an error.
  EXPECT_EQ(std::get<KvBlockStored>(MustDecode(Mp().Batch(1).Stored(3).Nil().Nil().Str("l").Nil().Bytes()).events.at(0))
                .lora_name,
            "l");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Stored(3).Nil().Nil().Array(0).Nil().Bytes()),
            "events[0].lora_name: expected a str or nil, got array");
}

TEST(KvEventDecodeTest, BytesHashes) {
  // VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: the raw sha256 digest on the wire; the last 8 bytes
  // read big-endian, fewer than 8 as if left-padded with zeros.
  std::string digest;
  for (int i = 0; i < 32; ++i) digest += static_cast<char>(i);
  const std::string ten = std::string("\xaa\xbb") + std::string(7, '\0') + "\x07";
  Mp mp;
  mp.Batch(1).Array(5).Str("BlockStored");
  mp.Array(4).Bin(digest).Bin("\x01\x02").Bin(std::string(8, '\xff')).Bin(ten);
  mp.Bin(std::string("\x00\x00\x01\x00", 4)).Array(0).Uint(16).Uint(0);
  const KvEventBatch b = MustDecode(mp.Bytes());
  ASSERT_EQ(b.events.size(), 1u);
  const auto& s = std::get<KvBlockStored>(b.events[0]);
  EXPECT_EQ(s.block_hashes, (std::vector<uint64_t>{0x18191a1b1c1d1e1f, 0x0102, ~uint64_t{0}, 7}));
  EXPECT_EQ(s.parent_block_hash, 0x100u);

  for (const size_t size : {size_t{0}, size_t{33}, size_t{64}}) {
    Mp bad;
    bad.Batch(1).Array(5).Str("BlockStored").Array(1).Bin(std::string(size, 'x')).Nil().Array(0).Uint(16).Uint(0);
    EXPECT_EQ(DecodeError(bad.Bytes()), "events[0].block_hashes[0]: expected an int or 1 to 32 bytes, got bin of " +
                                            std::to_string(size) + " bytes");
  }
}

TEST(KvEventDecodeTest, MixedArrayAndMapEvents) {
  Mp mp;
  mp.Batch(4);
  mp.Stored(2).Nil().Str("GPU");
  // A map with "type" last, an unknown key with nested contents, a non-str key and a repeated
  // key (the last one wins).
  mp.Map(6).Str("medium").Str("CPU").Str("block_hashes").Array(1).Uint(kH2).Str("locality").Map(1).Str("x")
      .Array(2).Nil().Bool(true).Uint(7).Str("not a key").Str("medium").Str("GPU").Str("type").Str("BlockRemoved");
  mp.Array(1).Str("AllBlocksCleared");
  mp.Map(5).Str("token_ids").Array(0).Str("block_size").Uint(64).Str("type").Str("BlockStored")
      .Str("parent_block_hash").Uint(kH1).Str("block_hashes").Array(1).Uint(kH2);
  mp.Uint(0);
  const KvEventBatch b = MustDecode(mp.Bytes());
  ASSERT_EQ(b.events.size(), 4u);
  EXPECT_EQ(std::get<KvBlockStored>(b.events[0]), Stored({kH1}, std::nullopt, {1, 2}, 2));
  EXPECT_EQ(std::get<KvBlockRemoved>(b.events[1]), Removed({kH2}));
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(b.events[2]));
  EXPECT_EQ(std::get<KvBlockStored>(b.events[3]), Stored({kH2}, kH1, {}, 64, ""));
}

TEST(KvEventDecodeTest, MapEventKeyOrderAndRepeatedKeys) {
  // A repeated key: the last one counts, whether or not the earlier one was valid, "type" too.
  auto decode_one = [](Mp& event) {
    const KvEventBatch b = MustDecode(Mp().Batch(1).Raw(event.Bytes()).Nil().Bytes());
    return b.events.empty() ? KvEvent{} : b.events[0];
  };
  Mp a;
  a.Map(4).Str("type").Str("BlockRemoved").Str("medium").Uint(5).Str("block_hashes").Array(1).Uint(1).Str("medium")
      .Str("GPU");
  EXPECT_EQ(std::get<KvBlockRemoved>(decode_one(a)), Removed({1}));
  Mp b;
  b.Map(3).Str("type").Str("BlockRemoved").Str("block_hashes").Array(1).Uint(1).Str("block_hashes").Array(1).Uint(2);
  EXPECT_EQ(std::get<KvBlockRemoved>(decode_one(b)), Removed({2}, ""));
  Mp c;
  c.Map(3).Str("type").Str("BlockStored").Str("block_hashes").Array(1).Uint(3).Str("type").Str("BlockRemoved");
  EXPECT_EQ(std::get<KvBlockRemoved>(decode_one(c)), Removed({3}, ""));
  Mp d;
  d.Map(2).Str("type").Str("Unknown").Str("type").Str("AllBlocksCleared");
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(decode_one(d)));
  // Keys out of declaration order.
  Mp e;
  e.Map(5).Str("type").Str("BlockStored").Str("block_size").Uint(4).Str("token_ids").Array(1).Uint(9)
      .Str("parent_block_hash").Uint(kH2).Str("block_hashes").Array(1).Uint(kH1);
  EXPECT_EQ(std::get<KvBlockStored>(decode_one(e)), Stored({kH1}, kH2, {9}, 4, ""));
  // The error is the same whichever way the keys come.
  EXPECT_EQ(DecodeError(Mp().Batch(1).Map(2).Str("type").Str("BlockRemoved").Str("block_hashes").Str("x").Nil()
                            .Bytes()),
            "events[0].block_hashes: expected an array, got str");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Map(2).Str("block_hashes").Str("x").Str("type").Str("BlockRemoved").Nil()
                            .Bytes()),
            "events[0].block_hashes: expected an array, got str");
}

TEST(KvEventDecodeTest, MapBatch) {
  Mp mp;
  mp.Map(4).Str("events").Array(1).Map(1).Str("type").Str("AllBlocksCleared").Str("ts").Uint(1700000000)
      .Str("other").Array(1).Nil().Str("data_parallel_rank").Int(-2);
  KvEventBatch b = MustDecode(mp.Bytes());
  EXPECT_EQ(b.ts, 1700000000.0);
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(b.data_parallel_rank, -2);

  Mp no_rank;
  no_rank.Map(2).Str("ts").Double(0.5).Str("events").Array(0);
  b = MustDecode(no_rank.Bytes());
  EXPECT_EQ(b.ts, 0.5);
  EXPECT_TRUE(b.events.empty());
  EXPECT_FALSE(b.data_parallel_rank.has_value());

  Mp nil_rank;
  nil_rank.Map(3).Str("ts").Double(0.5).Str("events").Array(0).Str("data_parallel_rank").Nil();
  EXPECT_FALSE(MustDecode(nil_rank.Bytes()).data_parallel_rank.has_value());
}

TEST(KvEventDecodeTest, TsForms) {
  const struct {
    std::string name;
    std::string ts;
    double want;
  } cases[] = {
      {"float64", Mp().Double(1789095808.83).Bytes(), 1789095808.83},
      {"float32", Mp().Float(0.25f).Bytes(), 0.25},
      {"uint", Mp().Uint(1700000000).Bytes(), 1700000000.0},
      {"uint64", Mp().Uint(~uint64_t{0}).Bytes(), 18446744073709551615.0},
      {"negative int", Mp().Int(-5).Bytes(), -5.0},
      {"zero", Mp().Uint(0).Bytes(), 0.0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const KvEventBatch b = MustDecode(Mp().Array(3).Raw(c.ts).Array(0).Nil().Bytes());
    EXPECT_EQ(b.ts, c.want);
  }
}

TEST(KvEventDecodeTest, IgnoresLaterFieldsAndUnknownKeys) {
  // vLLM main: extra_keys (per block, nested), group_idx, kind, sliding window, locality,
  // ownership, session_id; a batch element after the rank; AllBlocksCleared with extra elements.
  Mp mp;
  mp.Array(4).Double(1).Array(5);
  mp.Stored(10).Uint(3).Str("GPU").Str("sql-lora").Array(2).Array(3).Str("sql-lora").Array(2).Str("mm").Uint(0)
      .Str("cache_salt").Nil().Uint(2).Str("full_attention").Uint(128).Str("LOCAL").Nil().Str("session");
  mp.Map(13).Str("type").Str("BlockStored").Str("block_hashes").Array(1).Uint(kH1).Str("parent_block_hash").Nil()
      .Str("token_ids").Array(2).Uint(1).Uint(2).Str("block_size").Uint(2).Str("lora_id").Nil().Str("medium")
      .Str("GPU").Str("lora_name").Nil().Str("extra_keys").Array(1).Nil().Str("group_idx").Uint(0)
      .Str("kv_cache_spec_kind").Str("mla_attention").Str("kv_cache_spec_sliding_window").Nil().Str("locality")
      .Str("REMOTE");
  mp.Array(5).Str("BlockRemoved").Array(1).Uint(kH1).Str("CPU").Uint(1).Str("LOCAL");
  mp.Map(5).Str("type").Str("BlockRemoved").Str("block_hashes").Array(1).Uint(kH2).Str("medium").Nil()
      .Str("ownership").Str("x").Str("group_idx").Nil();
  mp.Array(3).Str("AllBlocksCleared").Nil().Map(0);
  mp.Uint(0).Array(2).Str("future").Map(0);
  const KvEventBatch b = MustDecode(mp.Bytes());
  ASSERT_EQ(b.events.size(), 5u);
  KvBlockStored s0 = Stored({kH1}, std::nullopt, {1, 2}, 2);
  s0.lora_id = 3;
  s0.lora_name = "sql-lora";
  s0.group_idx = 2;
  s0.kv_cache_spec_kind = "full_attention";
  EXPECT_EQ(std::get<KvBlockStored>(b.events[0]), s0);
  KvBlockStored s1 = Stored({kH1}, std::nullopt, {1, 2}, 2);
  s1.group_idx = 0;
  s1.kv_cache_spec_kind = "mla_attention";
  EXPECT_EQ(std::get<KvBlockStored>(b.events[1]), s1);
  EXPECT_EQ(std::get<KvBlockRemoved>(b.events[2]), Removed({kH1}, "CPU", 1));
  EXPECT_EQ(std::get<KvBlockRemoved>(b.events[3]), Removed({kH2}, ""));
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(b.events[4]));
  EXPECT_EQ(b.data_parallel_rank, 0);
}

TEST(KvEventDecodeTest, NilOptionalFieldsAreAbsent) {
  Mp mp;
  mp.Batch(2).Stored(6).Nil().Nil().Nil().Nil().Nil().Nil();
  mp.Array(3).Str("BlockRemoved").Array(0).Nil();
  mp.Nil();
  const KvEventBatch b = MustDecode(mp.Bytes());
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(std::get<KvBlockStored>(b.events[0]), Stored({kH1}, std::nullopt, {1, 2}, 2, ""));
  EXPECT_EQ(std::get<KvBlockRemoved>(b.events[1]), Removed({}, ""));
}

TEST(KvEventDecodeTest, TokenIdRange) {
  Mp mp;
  mp.Batch(1).Array(5).Str("BlockStored").Array(0).Nil().Array(4).Uint(0).Uint(0x7f).Uint(65536).Uint(UINT32_MAX);
  mp.Uint(0).Uint(0);
  EXPECT_EQ(std::get<KvBlockStored>(MustDecode(mp.Bytes()).events.at(0)).token_ids,
            (std::vector<uint32_t>{0, 0x7f, 65536, UINT32_MAX}));
}

// ---- Errors -----------------------------------------------------------------------------------

// A batch with one array-form BlockStored whose fields after the tag are `fields` (raw msgpack),
// `n` of them.
std::string StoredWith(uint32_t n, std::string_view fields) {
  return Mp().Batch(1).Array(n + 1).Str("BlockStored").Raw(fields).Uint(0).Bytes();
}

// The 4 required BlockStored fields with one replaced: `which` 0..3 by `value`.
std::string RequiredWith(int which, std::string_view value) {
  std::string f[4] = {Mp().Array(1).Uint(kH1).Bytes(), Mp().Nil().Bytes(), Mp().Array(1).Uint(1).Bytes(),
                      Mp().Uint(1).Bytes()};
  f[which] = std::string(value);
  return f[0] + f[1] + f[2] + f[3];
}

// The required fields followed by `later` (raw msgpack, `n` more fields).
std::string StoredLater(uint32_t n, std::string_view later) {
  return StoredWith(4 + n, RequiredWith(0, Mp().Array(1).Uint(kH1).Bytes()) + std::string(later));
}

TEST(KvEventErrorTest, NotABatch) {
  EXPECT_EQ(DecodeError(""), "payload: truncated at byte 0");
  EXPECT_EQ(DecodeError("\xc1"), "payload: invalid msgpack byte 0xc1 at byte 0");
  EXPECT_EQ(DecodeError(R"({"ts": 1, "events": []})"), "payload: expected an array or map, got int 123");
  EXPECT_EQ(DecodeError(Mp().Str("abc").Bytes()), "payload: expected an array or map, got str");
  EXPECT_EQ(DecodeError(Mp().Nil().Bytes()), "payload: expected an array or map, got nil");
  EXPECT_EQ(DecodeError(Mp().Array(0).Bytes()),
            "payload: expected [ts, events, data_parallel_rank], got an array of 0 elements");
  EXPECT_EQ(DecodeError(Mp().Array(1).Double(1).Bytes()),
            "payload: expected [ts, events, data_parallel_rank], got an array of 1 element");
  EXPECT_EQ(DecodeError(Mp().Map(1).Str("events").Array(0).Bytes()), "ts: missing");
  EXPECT_EQ(DecodeError(Mp().Map(1).Str("ts").Double(0).Bytes()), "events: missing");
  // An invalid byte deeper in.
  EXPECT_EQ(DecodeError(Mp().Array(3).Double(1).Array(1).Raw("\xc1").Nil().Bytes()),
            "events[0]: invalid msgpack byte 0xc1 at byte 11");
}

TEST(KvEventErrorTest, TrailingBytes) {
  const std::string full = Hex(kNotesArrayBatch);
  EXPECT_EQ(DecodeError(full + std::string(1, '\0')),
            "payload: 1 trailing byte after the batch, from byte " + std::to_string(full.size()));
  EXPECT_EQ(DecodeError(full + full), "payload: " + std::to_string(full.size()) +
                                          " trailing bytes after the batch, from byte " + std::to_string(full.size()));
}

TEST(KvEventErrorTest, EveryTruncationFails) {
  for (std::string_view spec : {kNotesArrayBatch, kNotesMapBatch}) {
    const std::string full = Hex(spec);
    for (size_t n = 0; n < full.size(); ++n) {
      const std::string message = DecodeError(full.substr(0, n));
      EXPECT_NE(message.find("truncated"), std::string::npos) << n << ": " << message;
    }
  }
  const std::string full = Hex(kNotesArrayBatch);
  EXPECT_EQ(DecodeError(full.substr(0, full.size() - 1)),
            "data_parallel_rank: truncated at byte " + std::to_string(full.size() - 1));
  // Inside the second hash of the first event (1 + 9 + 1 + 1 + 12 + 1 + 9 = 34 bytes before it).
  EXPECT_EQ(DecodeError(full.substr(0, 40)), "events[0].block_hashes[1]: truncated at byte 40");
}

TEST(KvEventErrorTest, EventShapes) {
  EXPECT_EQ(DecodeError(Mp().Batch(1).Array(1).Str("BlockMoved").Nil().Bytes()),
            R"(events[0]: unknown event type "BlockMoved")");
  EXPECT_EQ(DecodeError(Mp().Batch(2).Array(1).Str("AllBlocksCleared").Map(1).Str("type").Str("Evicted\n\"").Nil()
                            .Bytes()),
            R"(events[1]: unknown event type "Evicted\n\"")");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Array(1).Str(std::string(100, 'x')).Nil().Bytes()),
            "events[0]: unknown event type \"" + std::string(64, 'x') + "...\"");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Array(1).Str("blockstored").Nil().Bytes()),
            R"(events[0]: unknown event type "blockstored")");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Array(1).Uint(1).Nil().Bytes()),
            "events[0][0]: expected the event type (a str), got int 1");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Array(0).Nil().Bytes()), "events[0]: expected a tagged event, got an empty array");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Uint(5).Nil().Bytes()), "events[0]: expected an array or map, got int 5");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Str("BlockStored").Nil().Bytes()), "events[0]: expected an array or map, got str");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Map(1).Str("block_hashes").Array(0).Nil().Bytes()), "events[0].type: missing");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Map(1).Str("type").Uint(3).Nil().Bytes()),
            "events[0].type: expected a str, got int 3");
  EXPECT_EQ(DecodeError(Mp().Array(3).Double(1).Map(0).Nil().Bytes()), "events: expected an array, got map");
  EXPECT_EQ(DecodeError(Mp().Array(3).Double(1).Nil().Nil().Bytes()), "events: expected an array, got nil");
}

TEST(KvEventErrorTest, TooFewFields) {
  EXPECT_EQ(DecodeError(StoredWith(3, Mp().Array(0).Nil().Array(0).Bytes())),
            "events[0]: BlockStored needs at least 5 elements, got 4");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Array(1).Str("BlockStored").Nil().Bytes()),
            "events[0]: BlockStored needs at least 5 elements, got 1");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Array(1).Str("BlockRemoved").Nil().Bytes()),
            "events[0]: BlockRemoved needs at least 2 elements, got 1");
  const std::string hashes = Mp().Str("block_hashes").Array(0).Bytes();
  const std::string parent = Mp().Str("parent_block_hash").Nil().Bytes();
  const std::string tokens = Mp().Str("token_ids").Array(0).Bytes();
  const std::string size = Mp().Str("block_size").Uint(0).Bytes();
  const std::string type = Mp().Str("type").Str("BlockStored").Bytes();
  auto map_event = [](uint32_t n, std::string_view entries) {
    return Mp().Batch(1).Map(n).Raw(entries).Nil().Bytes();
  };
  EXPECT_EQ(DecodeError(map_event(4, type + parent + tokens + size)), "events[0].block_hashes: missing");
  EXPECT_EQ(DecodeError(map_event(4, type + hashes + tokens + size)), "events[0].parent_block_hash: missing");
  EXPECT_EQ(DecodeError(map_event(4, type + hashes + parent + size)), "events[0].token_ids: missing");
  EXPECT_EQ(DecodeError(map_event(4, type + hashes + parent + tokens)), "events[0].block_size: missing");
  MustDecode(map_event(5, type + hashes + parent + tokens + size));
  EXPECT_EQ(DecodeError(map_event(2, Mp().Str("type").Str("BlockRemoved").Str("medium").Str("GPU").Bytes())),
            "events[0].block_hashes: missing");
}

TEST(KvEventErrorTest, Hashes) {
  // The header's example: the third event's first hash a str.
  Mp mp;
  mp.Batch(3).Array(1).Str("AllBlocksCleared").Array(2).Str("BlockRemoved").Array(0);
  mp.Array(2).Str("BlockRemoved").Array(1).Str("0xf313").Nil();
  EXPECT_EQ(DecodeError(mp.Bytes()), "events[2].block_hashes[0]: expected an int or bytes, got str");

  const std::string hash_list_with[] = {
      Mp().Array(1).Double(1).Bytes(), Mp().Array(1).Nil().Bytes(), Mp().Array(2).Uint(1).Array(0).Bytes(),
      Mp().Array(1).Map(0).Bytes(), Mp().Array(1).Bool(true).Bytes(), Mp().Array(1).Raw("\xd4\x01\x02").Bytes()};
  const char* const got[] = {"events[0].block_hashes[0]: expected an int or bytes, got float",
                             "events[0].block_hashes[0]: expected an int or bytes, got nil",
                             "events[0].block_hashes[1]: expected an int or bytes, got array",
                             "events[0].block_hashes[0]: expected an int or bytes, got map",
                             "events[0].block_hashes[0]: expected an int or bytes, got bool",
                             "events[0].block_hashes[0]: expected an int or bytes, got ext"};
  for (size_t i = 0; i < std::size(got); ++i) {
    EXPECT_EQ(DecodeError(StoredWith(4, RequiredWith(0, hash_list_with[i]))), got[i]);
  }
  EXPECT_EQ(DecodeError(StoredWith(4, RequiredWith(0, Mp().Nil().Bytes()))),
            "events[0].block_hashes: expected an array, got nil");
  EXPECT_EQ(DecodeError(StoredWith(4, RequiredWith(0, Mp().Uint(kH1).Bytes()))),
            "events[0].block_hashes: expected an array, got int 17515353698173365712");
  EXPECT_EQ(DecodeError(StoredWith(4, RequiredWith(1, Mp().Str("none").Bytes()))),
            "events[0].parent_block_hash: expected an int or bytes, got str");
  EXPECT_EQ(DecodeError(StoredWith(4, RequiredWith(1, Mp().Array(0).Bytes()))),
            "events[0].parent_block_hash: expected an int or bytes, got array");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Array(2).Str("BlockRemoved").Str("h").Nil().Bytes()),
            "events[0].block_hashes: expected an array, got str");
}

TEST(KvEventErrorTest, TokenIds) {
  const struct {
    std::string tokens;
    std::string message;
  } cases[] = {
      {Mp().Array(2).Uint(1).Int(-1).Bytes(), "events[0].token_ids[1]: expected an int in [0, 2^32), got int -1"},
      {Mp().Array(1).Uint(uint64_t{1} << 32).Bytes(),
       "events[0].token_ids[0]: expected an int in [0, 2^32), got int 4294967296"},
      {Mp().Array(1).Uint(~uint64_t{0}).Bytes(),
       "events[0].token_ids[0]: expected an int in [0, 2^32), got int 18446744073709551615"},
      {Mp().Array(1).Double(5).Bytes(), "events[0].token_ids[0]: expected an int in [0, 2^32), got float"},
      {Mp().Array(1).Str("5").Bytes(), "events[0].token_ids[0]: expected an int in [0, 2^32), got str"},
      {Mp().Array(1).Nil().Bytes(), "events[0].token_ids[0]: expected an int in [0, 2^32), got nil"},
      // SGLang under EAGLE: [token, next_token] pairs.
      {Mp().Array(2).Array(2).Uint(11).Uint(12).Array(2).Uint(12).Uint(13).Bytes(),
       "events[0].token_ids[0]: expected an int in [0, 2^32), got array"},
      {Mp().Str("1 2 3").Bytes(), "events[0].token_ids: expected an array, got str"},
      {Mp().Nil().Bytes(), "events[0].token_ids: expected an array, got nil"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(DecodeError(StoredWith(4, RequiredWith(2, c.tokens))), c.message);
  }
}

TEST(KvEventErrorTest, IntFields) {
  EXPECT_EQ(DecodeError(StoredWith(4, RequiredWith(3, Mp().Int(-1).Bytes()))),
            "events[0].block_size: expected an int >= 0, got int -1");
  EXPECT_EQ(DecodeError(StoredWith(4, RequiredWith(3, Mp().Nil().Bytes()))),
            "events[0].block_size: expected an int >= 0, got nil");
  EXPECT_EQ(DecodeError(StoredWith(4, RequiredWith(3, Mp().Str("16").Bytes()))),
            "events[0].block_size: expected an int >= 0, got str");
  EXPECT_EQ(DecodeError(StoredWith(4, RequiredWith(3, Mp().Uint(uint64_t{1} << 63).Bytes()))),
            "events[0].block_size: expected an int >= 0, got int 9223372036854775808");
  EXPECT_EQ(DecodeError(StoredLater(1, Mp().Uint(uint64_t{1} << 63).Bytes())),
            "events[0].lora_id: expected an int64 or nil, got int 9223372036854775808");
  EXPECT_EQ(DecodeError(StoredLater(1, Mp().Str("1").Bytes())), "events[0].lora_id: expected an int64 or nil, got str");
  EXPECT_EQ(DecodeError(StoredLater(5, Mp().Nil().Nil().Nil().Nil().Str("0").Bytes())),
            "events[0].group_idx: expected an int64 or nil, got str");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Array(4).Str("BlockRemoved").Array(0).Nil().Double(0).Nil().Bytes()),
            "events[0].group_idx: expected an int64 or nil, got float");
  EXPECT_EQ(DecodeError(Mp().Batch(0).Str("0").Bytes()), "data_parallel_rank: expected an int64 or nil, got str");
  EXPECT_EQ(DecodeError(Mp().Batch(0).Uint(~uint64_t{0}).Bytes()),
            "data_parallel_rank: expected an int64 or nil, got int 18446744073709551615");
  // The extremes that fit.
  KvEventBatch b = MustDecode(StoredLater(5, Mp().Int(INT64_MIN).Nil().Nil().Nil().Uint(INT64_MAX).Bytes()));
  EXPECT_EQ(std::get<KvBlockStored>(b.events.at(0)).lora_id, INT64_MIN);
  EXPECT_EQ(std::get<KvBlockStored>(b.events.at(0)).group_idx, INT64_MAX);
}

TEST(KvEventErrorTest, StringFields) {
  EXPECT_EQ(DecodeError(StoredLater(2, Mp().Nil().Uint(1).Bytes())), "events[0].medium: expected a str or nil, got int 1");
  EXPECT_EQ(DecodeError(StoredLater(2, Mp().Nil().Bin("GPU").Bytes())),
            "events[0].medium: expected a str or nil, got bin of 3 bytes");
  EXPECT_EQ(DecodeError(StoredLater(3, Mp().Nil().Nil().Bool(false).Bytes())),
            "events[0].lora_name: expected a str or nil, got bool");
  EXPECT_EQ(DecodeError(StoredLater(6, Mp().Nil().Nil().Nil().Nil().Uint(0).Uint(1).Bytes())),
            "events[0].kv_cache_spec_kind: expected a str or nil, got int 1");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Array(3).Str("BlockRemoved").Array(0).Array(1).Str("GPU").Nil().Bytes()),
            "events[0].medium: expected a str or nil, got array");
  EXPECT_EQ(DecodeError(Mp().Batch(1).Map(6).Raw(Mp().Str("type").Str("BlockStored").Str("block_hashes").Array(0)
                                                     .Str("parent_block_hash").Nil().Str("token_ids").Array(0)
                                                     .Str("block_size").Uint(4)
                                                     .Str("lora_name").Uint(1).Bytes())
                            .Nil()
                            .Bytes()),
            "events[0].lora_name: expected a str or nil, got int 1");
}

TEST(KvEventErrorTest, Ts) {
  EXPECT_EQ(DecodeError(Mp().Array(3).Str("now").Array(0).Nil().Bytes()), "ts: expected a float or int, got str");
  EXPECT_EQ(DecodeError(Mp().Array(3).Nil().Array(0).Nil().Bytes()), "ts: expected a float or int, got nil");
  EXPECT_EQ(DecodeError(Mp().Array(3).Double(std::nan("")).Array(0).Nil().Bytes()), "ts: not a finite number");
  EXPECT_EQ(DecodeError(Mp().Array(3).Float(std::numeric_limits<float>::infinity()).Array(0).Nil().Bytes()),
            "ts: not a finite number");
  EXPECT_EQ(DecodeError(Mp().Map(2).Str("ts").Str("x").Str("events").Array(0).Bytes()),
            "ts: expected a float or int, got str");
}

TEST(KvEventErrorTest, HugeDeclaredLengths) {
  const std::string head = Mp().Array(3).Double(1).Bytes();
  EXPECT_EQ(DecodeError(head + Hex("dd ffffffff")), "events: 4294967295 elements declared, more than 2^24");
  EXPECT_EQ(DecodeError(head + Hex("dd 01000001")), "events: 16777217 elements declared, more than 2^24");
  EXPECT_EQ(DecodeError(head + Hex("dd 01000000")), "events: truncated: 16777216 elements declared, 0 bytes left");
  EXPECT_EQ(DecodeError(head + Hex("dc ffff c0")), "events: truncated: 65535 elements declared, 1 byte left");
  EXPECT_EQ(DecodeError(Hex("df ffffffff")), "payload: 4294967295 entries declared, more than 2^24");
  EXPECT_EQ(DecodeError(Hex("de 0002 a1\"a\" c0")), "payload: truncated: 2 entries declared, 3 bytes left");
  // A token list declaring a million ids with two bytes left (block_size and the rank).
  EXPECT_EQ(DecodeError(StoredWith(4, Mp().Array(1).Uint(kH1).Nil().Raw(Hex("dd 00100000")).Uint(2).Bytes())),
            "events[0].token_ids: truncated: 1048576 elements declared, 2 bytes left");
  // str, bin and ext lengths beyond the payload.
  std::string bytes = Mp().Batch(1).Array(1).Raw(Hex("db ffffffff")).Bytes();
  EXPECT_EQ(DecodeError(bytes), "events[0][0]: truncated at byte " + std::to_string(bytes.size()));
  bytes = StoredWith(4, Mp().Array(1).Raw(Hex("c6 ffffffff 00")).Bytes());
  EXPECT_EQ(DecodeError(bytes), "events[0].block_hashes[0]: truncated at byte " + std::to_string(bytes.size()));
  bytes = StoredLater(4, Mp().Nil().Nil().Nil().Raw(Hex("c9 ffffffff 01")).Bytes());
  EXPECT_EQ(DecodeError(bytes), "events[0].extra_keys: truncated at byte " + std::to_string(bytes.size()));
}

// `levels` nested one-element arrays around a nil.
std::string Nested(int levels) { return std::string(static_cast<size_t>(levels), '\x91') + "\xc0"; }

TEST(KvEventErrorTest, DeepNesting) {
  // The batch is level 1, events 2, the event 3: extra_keys may nest 61 more, to level 64.
  MustDecode(StoredLater(4, Mp().Nil().Nil().Nil().Raw(Nested(61)).Bytes()));
  EXPECT_EQ(DecodeError(StoredLater(4, Mp().Nil().Nil().Nil().Raw(Nested(62)).Bytes())),
            "events[0].extra_keys: nested deeper than 64");
  MustDecode(Mp().Array(4).Double(1).Array(0).Nil().Raw(Nested(63)).Bytes());
  EXPECT_EQ(DecodeError(Mp().Array(4).Double(1).Array(0).Nil().Raw(Nested(64)).Bytes()),
            "payload[3]: nested deeper than 64");
  EXPECT_EQ(DecodeError(Mp().Map(3).Str("ts").Double(1).Str("events").Array(0).Str("x").Raw(Nested(1000000)).Bytes()),
            "payload: nested deeper than 64");
  // Maps count as levels as well.
  std::string maps;
  for (int i = 0; i < 70; ++i) maps += Mp().Map(1).Str("k").Bytes();
  EXPECT_EQ(DecodeError(Mp().Array(4).Double(1).Array(0).Nil().Raw(maps + "\xc0").Bytes()),
            "payload[3]: nested deeper than 64");
}

// ---- Encoding ---------------------------------------------------------------------------------

TEST(KvEventEncodeTest, MapEncodingBytes) {
  KvEventBatch b;
  b.ts = 1.5;
  b.events = {Stored({1}, std::nullopt, {1, 2}, 2), Removed({kH1}), KvAllBlocksCleared{}};
  b.data_parallel_rank = 0;
  EXPECT_EQ(ToHex(EncodeKvEventBatch(b, KvEventEncoding::kMap)),
            ToHex(Hex(R"(93 cb3ff8000000000000 93
                 88 a4"type" ab"BlockStored" ac"block_hashes" 91 cf0000000000000001 b1"parent_block_hash" c0
                    a9"token_ids" 92 0102 aa"block_size" 02 a7"lora_id" c0 a6"medium" a3"GPU" a9"lora_name" c0
                 83 a4"type" ac"BlockRemoved" ac"block_hashes" 91 cff31309635ef2add0 a6"medium" a3"GPU"
                 81 a4"type" b0"AllBlocksCleared"
                 00)")));
  EXPECT_EQ(EncodeKvEventBatch(b), EncodeKvEventBatch(b, KvEventEncoding::kMap));  // the default
}

TEST(KvEventEncodeTest, GroupAndKindOnlyWhenSet) {
  KvBlockStored s = Stored({kH1}, kH2, {300}, 1, "");
  s.lora_id = 2;
  s.lora_name = "a";
  s.group_idx = 0;
  s.kv_cache_spec_kind = "full_attention";
  KvEventBatch b;
  b.events = {s, Removed({1}, "CPU", 1)};
  EXPECT_EQ(ToHex(EncodeKvEventBatch(b, KvEventEncoding::kArray)),
            ToHex(Hex(R"(93 cb0000000000000000 92
                 9b ab"BlockStored" 91 cff31309635ef2add0 cf8464eee8f2cf3412 91 cd012c 01 02 c0 a1"a"
                    c0 00 ae"full_attention"
                 94 ac"BlockRemoved" 91 cf0000000000000001 a3"CPU" 01
                 c0)")));
  EXPECT_EQ(ToHex(EncodeKvEventBatch(b, KvEventEncoding::kMap)),
            ToHex(Hex(R"(93 cb0000000000000000 92
                 8a a4"type" ab"BlockStored" ac"block_hashes" 91 cff31309635ef2add0
                    b1"parent_block_hash" cf8464eee8f2cf3412 a9"token_ids" 91 cd012c aa"block_size" 01
                    a7"lora_id" 02 a6"medium" c0 a9"lora_name" a1"a" a9"group_idx" 00
                    b2"kv_cache_spec_kind" ae"full_attention"
                 84 a4"type" ac"BlockRemoved" ac"block_hashes" 91 cf0000000000000001 a6"medium" a3"CPU"
                    a9"group_idx" 01
                 c0)")));
  // A kind without a group: the array form still carries it (group_idx nil), so it round-trips.
  s.group_idx.reset();
  b.events = {s};
  const std::string array = EncodeKvEventBatch(b, KvEventEncoding::kArray);
  EXPECT_NE(ToHex(array).find("c0c0ae"), std::string::npos) << ToHex(array);  // extra_keys, group_idx, kind
  EXPECT_EQ(MustDecode(array), b);
}

TEST(KvEventEncodeTest, HashesAreAlways64Bit) {
  KvEventBatch b;
  b.events = {Stored({0, 1, 127}, 0, {}, 0, "")};
  const std::string bytes = EncodeKvEventBatch(b, KvEventEncoding::kArray);
  EXPECT_EQ(ToHex(bytes), ToHex(Hex(R"(93 cb0000000000000000 91
      98 ab"BlockStored" 93 cf0000000000000000 cf0000000000000001 cf000000000000007f cf0000000000000000
         90 00 c0 c0 c0
      c0)")));
}

TEST(KvEventEncodeTest, IntsAndStringsInTheirShortestForms) {
  KvEventBatch b;
  KvBlockStored s = Stored({}, std::nullopt, {0x7f, 0x80, 0xffff, 0x10000}, 1 << 20, std::string(31, 'm'));
  s.lora_id = -33;
  s.lora_name = std::string(32, 'l');
  s.group_idx = -129;
  s.kv_cache_spec_kind = std::string(256, 'k');
  b.events = {s};
  b.data_parallel_rank = INT64_MIN;
  const std::string bytes = EncodeKvEventBatch(b, KvEventEncoding::kArray);
  const std::string want = Hex("93 cb0000000000000000 91 9b ab\"BlockStored\" 90 c0 94 7f cc80 cdffff ce00010000"
                               " ce00100000 d0df bf") +
                           std::string(31, 'm') + Hex("d920") + std::string(32, 'l') + Hex("c0 d1ff7f da0100") +
                           std::string(256, 'k') + Hex("d38000000000000000");
  EXPECT_EQ(ToHex(bytes), ToHex(want));
  EXPECT_EQ(MustDecode(bytes), b);
}

TEST(KvEventEncodeTest, MsgpackCxxReadsTheMapEncoding) {
  const std::string bytes = EncodeKvEventBatch(FullBatch(), KvEventEncoding::kMap);
  size_t offset = 0;
  msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size(), offset);
  EXPECT_EQ(offset, bytes.size());
  const msgpack::object& root = h.get();
  ASSERT_EQ(root.type, msgpack::type::ARRAY);
  ASSERT_EQ(root.via.array.size, 3u);
  EXPECT_EQ(root.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(root.via.array.ptr[0].as<double>(), FullBatch().ts);
  EXPECT_EQ(root.via.array.ptr[2].as<int64_t>(), 3);
  const msgpack::object& events = root.via.array.ptr[1];
  ASSERT_EQ(events.type, msgpack::type::ARRAY);
  ASSERT_EQ(events.via.array.size, FullBatch().events.size());
  const msgpack::object& first = events.via.array.ptr[0];
  ASSERT_EQ(first.type, msgpack::type::MAP);
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < first.via.map.size; ++i) keys.push_back(first.via.map.ptr[i].key.as<std::string>());
  EXPECT_EQ(keys, (std::vector<std::string>{"type", "block_hashes", "parent_block_hash", "token_ids", "block_size",
                                            "lora_id", "medium", "lora_name", "group_idx", "kv_cache_spec_kind"}));
  EXPECT_EQ(first.via.map.ptr[0].val.as<std::string>(), "BlockStored");
  EXPECT_EQ(first.via.map.ptr[1].val.as<std::vector<uint64_t>>(), std::get<KvBlockStored>(FullBatch().events[0]).block_hashes);
  EXPECT_EQ(first.via.map.ptr[3].val.as<std::vector<uint32_t>>(), std::get<KvBlockStored>(FullBatch().events[0]).token_ids);
  EXPECT_EQ(first.via.map.ptr[5].val.as<int64_t>(), -3);
}

TEST(KvEventEncodeTest, RoundTripsInBothEncodings) {
  const KvEventBatch b = FullBatch();
  for (const KvEventEncoding encoding : {KvEventEncoding::kArray, KvEventEncoding::kMap}) {
    const std::string bytes = EncodeKvEventBatch(b, encoding);
    EXPECT_EQ(MustDecode(bytes), b);
    EXPECT_EQ(EncodeKvEventBatch(MustDecode(bytes), encoding), bytes);
  }
  KvEventBatch empty;
  EXPECT_EQ(ToHex(EncodeKvEventBatch(empty)), "93cb000000000000000090c0");
  EXPECT_EQ(MustDecode(EncodeKvEventBatch(empty)), empty);
}

TEST(KvEventEncodeTest, RoundTripsLargeContainersAndStrings) {
  // The 16- and 32-bit length forms: 70000 tokens, a 70000-byte lora name, 20 events.
  KvEventBatch b;
  KvBlockStored s = Stored({kH1}, std::nullopt, {}, 16);
  for (uint32_t i = 0; i < 70000; ++i) s.token_ids.push_back(i * 2654435761u);
  s.lora_name = std::string(70000, 'x');
  s.kv_cache_spec_kind = std::string(300, 'k');
  b.events.push_back(s);
  for (int i = 0; i < 19; ++i) b.events.push_back(Removed({static_cast<uint64_t>(i)}));
  for (const KvEventEncoding encoding : {KvEventEncoding::kArray, KvEventEncoding::kMap}) {
    EXPECT_EQ(MustDecode(EncodeKvEventBatch(b, encoding)), b);
  }
}

TEST(KvEventEncodeTest, RandomBatchesRoundTrip) {
  std::mt19937_64 rng(20260901);
  auto pick = [&](uint64_t n) { return rng() % n; };
  auto maybe_int = [&]() -> std::optional<int64_t> {
    if (pick(3) == 0) return std::nullopt;
    return static_cast<int64_t>(rng()) >> pick(64);
  };
  auto text = [&]() {
    static const char* const kTexts[] = {"", "GPU", "CPU", "CPU_PINNED", "full_attention", "sql-lora"};
    return std::string(kTexts[pick(std::size(kTexts))]);
  };
  for (int round = 0; round < 300; ++round) {
    KvEventBatch b;
    b.ts = static_cast<double>(rng() >> 11) / 1024.0;
    if (pick(2)) b.data_parallel_rank = maybe_int();
    const size_t n = pick(6);
    for (size_t i = 0; i < n; ++i) {
      switch (pick(3)) {
        case 0: {
          KvBlockStored s;
          for (size_t h = pick(4); h > 0; --h) s.block_hashes.push_back(rng() >> pick(64));
          if (pick(2)) s.parent_block_hash = rng() >> pick(64);
          for (size_t t = pick(40); t > 0; --t) s.token_ids.push_back(static_cast<uint32_t>(rng() >> pick(64)));
          s.block_size = static_cast<int64_t>(rng() >> (1 + pick(63)));
          s.lora_id = maybe_int();
          s.medium = text();
          s.lora_name = text();
          s.group_idx = maybe_int();
          s.kv_cache_spec_kind = text();
          b.events.push_back(std::move(s));
          break;
        }
        case 1: {
          KvBlockRemoved r;
          for (size_t h = pick(4); h > 0; --h) r.block_hashes.push_back(rng());
          r.medium = text();
          r.group_idx = maybe_int();
          b.events.push_back(std::move(r));
          break;
        }
        default: b.events.emplace_back(std::in_place_type<KvAllBlocksCleared>);
      }
    }
    for (const KvEventEncoding encoding : {KvEventEncoding::kArray, KvEventEncoding::kMap}) {
      const std::string bytes = EncodeKvEventBatch(b, encoding);
      ASSERT_EQ(MustDecode(bytes), b) << "round " << round << ": " << ToHex(bytes);
      // msgpack-cxx agrees that it is one complete msgpack value.
      size_t offset = 0;
      msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size(), offset);
      EXPECT_EQ(offset, bytes.size());
    }
  }
}

// ---- Topic and sequence frames ------------------------------------------------------------------

TEST(KvEventTopicTest, ParsesLlmdTopics) {
  std::optional<KvTopic> t = ParseKvTopic("kv@10.0.0.1:8000@Qwen/Qwen3-32B");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->endpoint, "10.0.0.1:8000");
  EXPECT_EQ(t->model, "Qwen/Qwen3-32B");
  t = ParseKvTopic("kv@[fd00::1]:8000@");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->endpoint, "[fd00::1]:8000");
  EXPECT_EQ(t->model, "");
  for (std::string_view bad : {"", "kv", "kv@", "kv@a", "kv@@model", "kv@a@b@c", "kv@a@b@", "KV@a@b", "kv1@a@b",
                               "@a@b", "xkv@a@b", "kv@a:1@m@", "vllm-topic"}) {
    EXPECT_FALSE(ParseKvTopic(bad).has_value()) << bad;
  }
}

TEST(KvEventTopicTest, FormatRoundTrips) {
  EXPECT_EQ(FormatKvTopic("10.0.0.1:8000", "meta-llama/Llama-3.1-8B"), "kv@10.0.0.1:8000@meta-llama/Llama-3.1-8B");
  const std::optional<KvTopic> t = ParseKvTopic(FormatKvTopic("10.0.0.2:8001", "m"));
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->endpoint, "10.0.0.2:8001");
  EXPECT_EQ(t->model, "m");
}

TEST(KvEventSequenceTest, EightBytesBigEndian) {
  EXPECT_EQ(EncodeKvSequence(0), std::string(8, '\0'));
  EXPECT_EQ(ToHex(EncodeKvSequence(0x0102030405060708)), "0102030405060708");
  EXPECT_EQ(EncodeKvSequence(kKvReplayEndSequence), std::string(8, '\xff'));
  EXPECT_EQ(DecodeKvSequence(Hex("0102030405060708")), 0x0102030405060708u);
  EXPECT_EQ(DecodeKvSequence(std::string(8, '\xff')), kKvReplayEndSequence);
  EXPECT_EQ(DecodeKvSequence(std::string(8, '\0')), 0u);
  for (const uint64_t seq : {uint64_t{1}, uint64_t{255}, uint64_t{256}, uint64_t{1} << 63, ~uint64_t{0} - 1})
    EXPECT_EQ(DecodeKvSequence(EncodeKvSequence(seq)), seq);
  for (const size_t size : {size_t{0}, size_t{1}, size_t{7}, size_t{9}, size_t{16}})
    EXPECT_FALSE(DecodeKvSequence(std::string(size, '\x01')).has_value()) << size;
}

}  // namespace
}  // namespace epp
