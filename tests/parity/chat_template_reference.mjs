// The parity reference for chat templates: Hugging Face's JavaScript Jinja (@huggingface/jinja).
// Reads JSON lines {"template": SOURCE, "variables": {...}} on stdin and writes one line per
// input, in order: {"text": RENDERED} or {"error": MESSAGE}.
//   node chat_template_reference.mjs NODE_MODULES_DIR
import { createRequire } from "node:module";
import { join } from "node:path";
import { createInterface } from "node:readline";

const [modules] = process.argv.slice(2);
const require = createRequire(join(modules, "noop.js"));
const { Template } = require("@huggingface/jinja");

const compiled = new Map();
const out = [];
const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (!line.trim()) continue;
  const { template, variables } = JSON.parse(line);
  try {
    if (!compiled.has(template)) compiled.set(template, new Template(template));
    const vars = { ...variables };
    out.push(JSON.stringify({ text: compiled.get(template).render(vars) }));
  } catch (e) {
    out.push(JSON.stringify({ error: String(e && e.message ? e.message : e) }));
  }
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
