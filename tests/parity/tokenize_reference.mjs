// The parity reference: Hugging Face's JavaScript tokenizer (@huggingface/tokenizers) on the
// same tokenizer files. Reads JSON lines {"text": ..., "add_special_tokens": bool} on stdin and
// writes one line {"ids": [...]} per input, in order.
//   node tokenize_reference.mjs NODE_MODULES_DIR TOKENIZER_DIR
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";

const [modules, dir] = process.argv.slice(2);
const require = createRequire(join(modules, "noop.js"));
const { Tokenizer } = require("@huggingface/tokenizers");
const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
const tokenizer = new Tokenizer(json, config);

const out = [];
const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (!line.trim()) continue;
  const { text, add_special_tokens } = JSON.parse(line);
  const { ids } = tokenizer.encode(text, { add_special_tokens: Boolean(add_special_tokens) });
  out.push(JSON.stringify({ ids: Array.from(ids, Number) }));
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
