// The JavaScript reference's throughput on the same files as bench/tokenizer_bench.cc:
//   node tokenizer_reference_bench.mjs NODE_MODULES TOKENIZER_DIR MIN_MS FILE...
// One JSON line per file, the same fields.
//   node tokenizer_reference_bench.mjs NODE_MODULES TOKENIZER_DIR MIN_MS --chat FILE...
// instead renders each FILE as the system prompt of a two-message chat with the model's chat
// template (@huggingface/jinja) and encodes the result: "ms_per_run" is render + encode.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const [modules, dir, minMs, ...rest] = process.argv.slice(2);
const chat = rest[0] === "--chat";
const files = chat ? rest.slice(1) : rest;
const require = createRequire(join(modules, "noop.js"));
const { Tokenizer } = require("@huggingface/tokenizers");
const tok = new Tokenizer(JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
                          JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")));
const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
const template = chat ? new (require("@huggingface/jinja").Template)(config.chat_template) : null;
const special = {};
for (const k of ["bos_token", "eos_token", "pad_token", "unk_token"])
  if (typeof config[k] === "string") special[k] = config[k];
function chatRun(text, n) {
  const prompt = template.render({ ...special, add_generation_prompt: true, tools: null, documents: null,
    messages: [{ role: "system", content: text }, { role: "user", content: `question ${n}: what changed?` }] });
  return tok.encode(prompt, { add_special_tokens: false }).ids.length;
}
for (const file of files) {
  if (chat) {
    const text = readFileSync(file, "utf8");
    const tokens = chatRun(text, -1);  // the warm-up request's count, as ours reports
    let runs = 0, ms = 0;
    const start = process.hrtime.bigint();
    do {
      chatRun(text, runs);
      ++runs;
      ms = Number(process.hrtime.bigint() - start) / 1e6;
    } while (ms < Number(minMs));
    console.log(JSON.stringify({ file, chat: true, tokens, runs, ms_per_run: ms / runs }));
    continue;
  }
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
