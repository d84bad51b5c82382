// The JavaScript reference's throughput on the same files as bench/tokenizer_bench.cc:
//   node tokenizer_reference_bench.mjs NODE_MODULES TOKENIZER_DIR MIN_MS FILE...
// One JSON line per file, the same fields.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const [modules, dir, minMs, ...files] = process.argv.slice(2);
const require = createRequire(join(modules, "noop.js"));
const { Tokenizer } = require("@huggingface/tokenizers");
const tok = new Tokenizer(JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
                          JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")));
for (const file of files) {
  const text = readFileSync(file, "utf8");
  const bytes = Buffer.byteLength(text, "utf8");
  tok.encode(text, { add_special_tokens: false });  // warm up the JIT
  let runs = 0, tokens = 0;
  const start = process.hrtime.bigint();
  let ms = 0;
  do {
    tokens = tok.encode(text, { add_special_tokens: false }).ids.length;
    ++runs;
    ms = Number(process.hrtime.bigint() - start) / 1e6;
  } while (ms < Number(minMs));
  console.log(JSON.stringify({ file, bytes, tokens, runs, mb_per_s: bytes * runs / 1e6 / (ms / 1e3), ms_per_run: ms / runs }));
}
