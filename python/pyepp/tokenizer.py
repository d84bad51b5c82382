"""In-process tokenization from a Hugging Face ``tokenizer.json`` (libepp's Tokenizer).

    tok = pyepp.Tokenizer.from_dir("models/llama-3.1")
    tok.encode("Hello world")                        # [9906, 1917]
    tok.encode("Hello world", add_special_tokens=True)  # [128000, 9906, 1917]
    tok.tokenize_request({"model": "m", "prompt": "Hello"}, path="/v1/completions")
    # {"text": "Hello", "ids": [128000, 9906], "tokens": 2}

What a tokenizer.json may contain is libepp's subset (docs/tokenizer.md); anything else raises
:class:`pyepp.ConfigError` at load, naming the JSON path.
"""
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._native import lib


class Tokenizer:
    """A loaded tokenizer; immutable and safe to use from several threads."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def from_path(cls, path: str) -> "Tokenizer":
        """A ``tokenizer.json`` file, or a directory holding one."""
        return cls(lib.Tokenizer.from_path(str(path)))

    from_dir = from_path

    def encode(self, text: str, add_special_tokens: bool = False) -> List[int]:
        """The ids of ``text``. ``add_special_tokens`` adds the post-processor's tokens (BOS)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        return list(self._native.encode(text, bool(add_special_tokens)))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (invalid UTF-8 from a partial sequence is replaced)."""
        return self._native.decode(list(ids)).decode("utf-8", errors="replace")

    def token_id(self, token: str) -> Optional[int]:
        """The id of a vocabulary token (``"Ġthe"``) or an added token (``"<|begin_of_text|>"``)."""
        return self._native.token_id(token)

    @property
    def vocab_size(self) -> int:
        return int(self._native.vocab_size)

    @property
    def source(self) -> str:
        return str(self._native.source)

    def tokenize_request(self, body: Union[str, bytes, Mapping[str, Any]], path: str = "/v1/completions") -> Dict[str, Any]:
        """A request body's prompt as the model server tokenizes it: ``{"text", "ids", "tokens"}``
        (``eppctl tokenize --output json``). A completions ``prompt`` string gets the special
        tokens (BOS); token ids are passed through. Chat requests raise :class:`pyepp.EppError`
        until chat templates land; a body that is not such a request raises
        :class:`pyepp.ConfigError` naming the JSON path."""
        if isinstance(body, Mapping):
            body = json.dumps(body)
        elif isinstance(body, bytes):
            body = body.decode("utf-8")
        text, ids, _ = self._native.tokenize_request(path, body)
        return {"text": text, "ids": list(ids), "tokens": len(ids)}

    def __repr__(self) -> str:
        return f"Tokenizer({self.source!r}, vocab_size={self.vocab_size})"
