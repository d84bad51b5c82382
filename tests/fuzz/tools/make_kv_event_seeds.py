#!/usr/bin/env python3
"""Writes the KV-event payload seeds of tests/fuzz/corpus/kv_events/ (the msgpack frame of a model
server's ZeroMQ messages, see libepp/include/epp/kv/events.h): vLLM map-event batches as 0.26+
sends them, legacy array events, the oldest 2-element batches, SGLang's shapes (signed hashes,
short events, metadata, location-only stores), bytes hashes, and invalid neighbours of each
(EAGLE token pairs, truncations, trailing bytes, unknown tags, wrong types, huge declared lengths,
deep nesting).

A tiny msgpack writer of its own, compact ints like msgspec but hashes as 0xcf uint64 (or int64
for SGLang) as the engines' 64-bit values come out; no pip packages.

Run from the repository root: python3 tests/fuzz/tools/make_kv_event_seeds.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(__file__), "..", "corpus", "kv_events")


class Raw(bytes):
    """Bytes written as they are (a hand-made msgpack fragment)."""


class U64(int):
    """An int always written as 0xcf + 8 bytes."""


class I64(int):
    """An int always written as 0xd3 + 8 bytes."""


class F32(float):
    """A float written as float32."""


def pack(v):
    if isinstance(v, Raw):
        return bytes(v)
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, U64):
        return b"\xcf" + struct.pack(">Q", v)
    if isinstance(v, I64):
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, int):
        if 0 <= v <= 0x7F:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack(">b", v)
        if 0 <= v <= 0xFF:
            return b"\xcc" + struct.pack(">B", v)
        if 0 <= v <= 0xFFFF:
            return b"\xcd" + struct.pack(">H", v)
        if 0 <= v <= 0xFFFFFFFF:
            return b"\xce" + struct.pack(">I", v)
        if 0 <= v:
            return b"\xcf" + struct.pack(">Q", v)
        if v >= -0x80:
            return b"\xd0" + struct.pack(">b", v)
        if v >= -0x8000:
            return b"\xd1" + struct.pack(">h", v)
        if v >= -0x80000000:
            return b"\xd2" + struct.pack(">i", v)
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, F32):
        return b"\xca" + struct.pack(">f", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        n = len(b)
        if n <= 31:
            return bytes([0xA0 | n]) + b
        if n <= 0xFF:
            return b"\xd9" + bytes([n]) + b
        if n <= 0xFFFF:
            return b"\xda" + struct.pack(">H", n) + b
        return b"\xdb" + struct.pack(">I", n) + b
    if isinstance(v, (bytes, bytearray)):
        n = len(v)
        if n <= 0xFF:
            return b"\xc4" + bytes([n]) + bytes(v)
        if n <= 0xFFFF:
            return b"\xc5" + struct.pack(">H", n) + bytes(v)
        return b"\xc6" + struct.pack(">I", n) + bytes(v)
    if isinstance(v, (list, tuple)):
        n = len(v)
        head = bytes([0x90 | n]) if n <= 15 else (b"\xdc" + struct.pack(">H", n) if n <= 0xFFFF
                                                  else b"\xdd" + struct.pack(">I", n))
        return head + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        n = len(v)
        head = bytes([0x80 | n]) if n <= 15 else (b"\xde" + struct.pack(">H", n) if n <= 0xFFFF
                                                  else b"\xdf" + struct.pack(">I", n))
        return head + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(type(v))


# 64-bit engine hashes (the notes' test vectors and a few more), as vLLM sends them.
H = [U64(x) for x in (0xF31309635EF2ADD0, 0x8464EEE8F2CF3412, 0xEAD3C96AEA607C7E,
                      0xDABFD7DB7B8A6D1C, 15760518052499183552)]
TS = 1789095808.83


def tokens(n, start=1):
    return [start + i for i in range(n)]


def stored_map(hashes, parent, toks, block_size=16, medium="GPU", **later):
    e = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": toks,
         "block_size": block_size, "lora_id": None, "medium": medium, "lora_name": None}
    e.update(later)
    return e


def stored_array(hashes, parent, toks, block_size=16, *later):
    return ["BlockStored", hashes, parent, toks, block_size, *later]


SEEDS = {}

# ---- vLLM 0.26+: array batch, map events -------------------------------------------------------
SEEDS["vllm026-capture.msgpack"] = pack([TS, [stored_map(
    [H[4]], None, tokens(16), extra_keys=[None], group_idx=0, kv_cache_spec_kind="full_attention")], 0])
SEEDS["vllm026-chain-and-evict.msgpack"] = pack([TS, [
    stored_map([H[0], H[1]], None, tokens(32), extra_keys=[None, None], group_idx=0,
               kv_cache_spec_kind="full_attention"),
    stored_map([H[2]], H[1], tokens(16, 33), extra_keys=[None], group_idx=0, kv_cache_spec_kind="full_attention"),
    {"type": "BlockRemoved", "block_hashes": [H[0]], "medium": "GPU", "group_idx": 0},
    {"type": "AllBlocksCleared"},
], 0])
SEEDS["vllm-main-newest-fields.msgpack"] = pack([TS, [
    stored_map([H[0]], None, tokens(16), lora_name="sql-lora", extra_keys=[["sql-lora", "mm-hash-1", "salt"]],
               group_idx=1, kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=4096,
               locality="LOCAL", ownership="tier-a", session_id="s-1"),
    {"type": "BlockRemoved", "block_hashes": [H[0]], "medium": "CPU", "group_idx": 1, "locality": "REMOTE"},
], 3])
SEEDS["vllm-offload-location-only.msgpack"] = pack([TS, [
    stored_map([H[0], H[1]], None, [], medium="CPU"),
    stored_map([H[2]], H[1], [], medium="STORAGE"),
], 0])
SEEDS["vllm-big-batch.msgpack"] = pack([TS, [
    stored_map([U64((0x9E3779B97F4A7C15 * (i + 1)) & (2**64 - 1))],
               None if i == 0 else U64((0x9E3779B97F4A7C15 * i) & (2**64 - 1)),
               tokens(16, 16 * i), extra_keys=[None], group_idx=0, kv_cache_spec_kind="full_attention")
    for i in range(40)], 0])
SEEDS["vllm-bytes-hashes.msgpack"] = pack([TS, [
    stored_map([bytes(range(32)), bytes(range(32, 64))], None, tokens(32)),
    stored_map([bytes(range(64, 96))], bytes(range(32, 64)), tokens(16, 33)),
    {"type": "BlockRemoved", "block_hashes": [bytes(range(32))], "medium": "GPU"},
], 0])
SEEDS["vllm-short-bytes-hash.msgpack"] = pack([TS, [stored_map([b"\x01\x02\x03"], b"\x07", tokens(4), 4)], 0])

# ---- legacy array events (vLLM before 0.26) and the oldest shapes ------------------------------
SEEDS["vllm-legacy-array.msgpack"] = pack([1700000000.5, [
    stored_array([H[0], H[1]], None, [1, 2, 3, 4], 2, None, "GPU", None),
    ["BlockRemoved", [H[0]], "GPU"],
    ["AllBlocksCleared"],
], 0])
SEEDS["vllm-legacy-grouped.msgpack"] = pack([TS, [
    stored_array([H[0]], None, tokens(16), 16, None, "GPU", None, [None], 0, "full_attention", None),
    ["BlockRemoved", [H[0]], "GPU", 0],
], 0])
SEEDS["vllm-oldest-2-element.msgpack"] = pack([TS, [
    stored_array([H[0]], None, tokens(16), 16, None),
    ["BlockRemoved", [H[0]]],
]])

# ---- the map batch some copies show ------------------------------------------------------------
SEEDS["map-batch.msgpack"] = pack({"ts": TS, "events": [stored_map([H[0]], None, tokens(16))],
                                   "data_parallel_rank": None})
SEEDS["mixed-events-int-ts.msgpack"] = pack([1789095808, [
    stored_array([H[0]], None, tokens(16), 16, None, "GPU"),
    {"type": "BlockRemoved", "block_hashes": [H[0]], "medium": "GPU"},
    ["AllBlocksCleared"],
    {"block_hashes": [H[1]], "type": "BlockStored", "parent_block_hash": None, "block_size": 16,
     "token_ids": tokens(16)},
], 1])

# ---- SGLang ------------------------------------------------------------------------------------
SEEDS["sglang-signed-hashes.msgpack"] = pack([F32(1789095808.0), [
    stored_array([I64(-6148914691236517206), I64(4611686018427387904)], I64(-1), tokens(2), 1, None, "GPU"),
    ["BlockRemoved", [I64(-6148914691236517206)], "GPU"],
], 0])
SEEDS["sglang-metadata.msgpack"] = pack([TS, [
    stored_array([I64(-42)], None, tokens(16), 16, None, "GPU", {"cache_salt": "tenant-a"}),
], 0])
SEEDS["sglang-location-only.msgpack"] = pack([TS, [
    stored_array([I64(12345678901), I64(-98765432109)], None, [], 16, None, "CPU_PINNED"),
    ["BlockRemoved", [I64(12345678901)], "DISK"],
], None])
SEEDS["sglang-oldest.msgpack"] = pack([TS, [stored_array([I64(-7)], None, tokens(1), 1, None)]])
SEEDS["sglang-map-events.msgpack"] = pack([TS, [
    {"type": "BlockStored", "block_hashes": [I64(-3)], "parent_block_hash": None, "token_ids": tokens(16),
     "block_size": 16, "lora_id": None, "medium": "GPU", "cache_salt": "t", "session_id": "abc"},
], 2])

# ---- invalid neighbours ------------------------------------------------------------------------
SEEDS["bad-sglang-eagle-pairs.msgpack"] = pack([TS, [
    stored_array([I64(-3)], None, [[1, 2], [2, 3], [3, 4]], 3, None, "GPU")], 0])
SEEDS["bad-truncated.msgpack"] = SEEDS["vllm026-capture.msgpack"][:-7]
SEEDS["bad-trailing.msgpack"] = SEEDS["vllm-legacy-array.msgpack"] + b"\x00"
SEEDS["bad-unknown-tag.msgpack"] = pack([TS, [["BlockMoved", [H[0]]], {"type": "Evicted"}], 0])
SEEDS["bad-hash-str.msgpack"] = pack([TS, [stored_map(["f31309635ef2add0"], None, tokens(16))], 0])
SEEDS["bad-hash-bin-33.msgpack"] = pack([TS, [stored_map([bytes(33)], None, tokens(16))], 0])
SEEDS["bad-token-too-big.msgpack"] = pack([TS, [stored_map([H[0]], None, [1, 2**32])], 0])
SEEDS["bad-token-negative.msgpack"] = pack([TS, [stored_array([H[0]], None, [1, -1], 2)], 0])
SEEDS["bad-block-stored-short.msgpack"] = pack([TS, [["BlockStored", [H[0]], None, tokens(2)]], 0])
SEEDS["bad-map-missing-tokens.msgpack"] = pack([TS, [{"type": "BlockStored", "block_hashes": [H[0]],
                                                      "parent_block_hash": None, "block_size": 16}], 0])
SEEDS["bad-medium-int.msgpack"] = pack([TS, [["BlockRemoved", [H[0]], 1]], 0])
SEEDS["bad-ts-nan.msgpack"] = pack([float("nan"), [], 0])
SEEDS["bad-rank-str.msgpack"] = pack([TS, [], "0"])
SEEDS["bad-huge-array.msgpack"] = b"\x93" + pack(TS) + b"\xdd\xff\xff\xff\xff"
SEEDS["bad-huge-tokens.msgpack"] = pack([TS, [stored_array([H[0]], None, Raw(b"\xdd\x00\x10\x00\x00"), 16)], 0])
SEEDS["bad-huge-map.msgpack"] = b"\xdf\x01\x00\x00\x00" + pack("ts")
SEEDS["bad-deep-nesting.msgpack"] = pack([TS, [stored_array([H[0]], None, [], 16, None, None, None,
                                                            Raw(b"\x91" * 80 + b"\xc0"))], 0])
SEEDS["bad-invalid-byte.msgpack"] = pack([TS, [Raw(b"\xc1")], 0])
SEEDS["bad-json.msgpack"] = b'{"ts": 1789095808.83, "events": [], "data_parallel_rank": 0}'


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if name.endswith(".msgpack"):
            os.remove(os.path.join(OUT, name))
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
