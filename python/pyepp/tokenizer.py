"""In-process tokenization from a Hugging Face ``tokenizer.json`` (libepp's Tokenizer).

    tok = pyepp.Tokenizer.from_dir("models/llama-3.1")
    tok.encode("Hello world")                        # [9906, 1917]
    tok.encode("Hello world", add_special_tokens=True)  # [128000, 9906, 1917]
    tok.tokenize_request({"model": "m", "prompt": "Hello"}, path="/v1/completions")
    # {"text": "Hello", "ids": [128000, 9906], "tokens": 2}
    tok.apply_chat_template([{"role": "user", "content": "Hi"}])   # ids, as vLLM computes them
    tok.chat_template.render_request({"messages": [...]})          # the prompt text

The chat template (``chat_template.jinja`` or ``tokenizer_config.json`` beside the
``tokenizer.json``) is loaded with the tokenizer when present; :class:`ChatTemplate` loads one on
its own. Chat requests follow vLLM's OpenAI server (docs/tokenizer.md, "Chat templates").

What a tokenizer.json may contain is libepp's subset (docs/tokenizer.md); anything else raises
:class:`pyepp.ConfigError` at load, naming the JSON path.
"""
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._native import lib
from .errors import EppError, NotFoundError


def _body_text(body: Union[str, bytes, Mapping[str, Any]]) -> str:
    if isinstance(body, Mapping):
        return json.dumps(body, ensure_ascii=False)
    if isinstance(body, bytes):
        return body.decode("utf-8")
    if isinstance(body, str):
        return body
    raise TypeError(f"body must be a mapping, str or bytes, not {type(body).__name__}")


class ChatTemplate:
    """A model's chat template (Jinja), rendered in process as the model server renders it."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def from_path(cls, path: str, content_format: str = "auto", now: int = 0) -> "ChatTemplate":
        """A directory (``chat_template.jinja``, else ``tokenizer_config.json``), a
        ``tokenizer.json`` (the files beside it), a ``tokenizer_config.json`` or a ``.jinja`` file.
        ``content_format`` is vLLM's ``--chat-template-content-format``; ``now`` fixes the clock
        ``strftime_now`` reads (seconds since the epoch). Raises :class:`pyepp.NotFoundError`
        when there is no template, :class:`pyepp.ConfigError` naming the line of a construct
        outside epp's Jinja subset."""
        return cls(lib.ChatTemplate.from_path(str(path), content_format, int(now)))

    @classmethod
    def from_source(cls, source: str, special_tokens: Optional[Mapping[str, Any]] = None, name: str = "chat template",
                    content_format: str = "auto", now: int = 0) -> "ChatTemplate":
        """A template's Jinja source, with the tokenizer's special tokens (``bos_token``, ...)."""
        special = json.dumps(dict(special_tokens), ensure_ascii=False) if special_tokens else ""
        return cls(lib.ChatTemplate.from_source(source, name, special, content_format, int(now)))

    def render(self, **variables: Any) -> str:
        """The plain Jinja render with ``variables`` as the top-level names (nothing added)."""
        return self._native.render(json.dumps(variables, ensure_ascii=False))

    def request_variables(self, body: Union[str, bytes, Mapping[str, Any]]) -> Dict[str, Any]:
        """What the template sees for an OpenAI chat request body, by vLLM's rules."""
        return json.loads(self._native.request_variables(_body_text(body)))

    def render_request(self, body: Union[str, bytes, Mapping[str, Any]]) -> str:
        """The prompt text of an OpenAI chat request body."""
        return self._native.render_request(_body_text(body))

    @property
    def content_format(self) -> str:
        """``"string"`` or ``"openai"``: how messages' content reaches the template."""
        return str(self._native.content_format)

    @property
    def variables(self) -> List[str]:
        """Names the template reads without setting them first (what chat_template_kwargs may set)."""
        return list(self._native.variables)

    @property
    def source(self) -> str:
        return str(self._native.source)

    def __repr__(self) -> str:
        return f"ChatTemplate({self.source!r}, content_format={self.content_format!r})"


class Tokenizer:
    """A loaded tokenizer; immutable and safe to use from several threads."""

    def __init__(self, native: Any, chat_template: Optional[ChatTemplate] = None) -> None:
        self._native = native
        self.chat_template = chat_template

    @classmethod
    def from_path(cls, path: str, chat_template: Optional[str] = None) -> "Tokenizer":
        """A ``tokenizer.json`` file, or a directory holding one. The chat template beside it is
        loaded too when there is one (``chat_template`` names another file)."""
        native = lib.Tokenizer.from_path(str(path))
        template: Optional[ChatTemplate] = None
        try:
            template = ChatTemplate.from_path(str(chat_template or path))
        except NotFoundError:
            if chat_template:
                raise
        return cls(native, template)

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

    def tokenize_request(self, body: Union[str, bytes, Mapping[str, Any]], path: Optional[str] = None) -> Dict[str, Any]:
        """A request body's prompt as the model server tokenizes it: ``{"text", "ids", "tokens"}``
        (``eppctl tokenize --output json``). ``path`` defaults to /v1/chat/completions for a body
        with ``messages``, else /v1/completions. A completions ``prompt`` string gets the
        special tokens (BOS); token ids are passed through; a chat is rendered with the chat
        template and tokenized without adding special tokens (vLLM's default). A chat without a
        template raises :class:`pyepp.EppError`; a body that is not such a request raises
        :class:`pyepp.ConfigError` naming the JSON path."""
        if path is None:
            path = "/v1/chat/completions" if isinstance(body, Mapping) and "messages" in body else "/v1/completions"
        chat = self.chat_template._native if self.chat_template is not None else None
        text, ids, _ = self._native.tokenize_request(path, _body_text(body), chat)
        return {"text": text, "ids": list(ids), "tokens": len(ids)}

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], tools: Optional[Sequence[Mapping[str, Any]]] = None,
                            add_generation_prompt: bool = True, tokenize: bool = True,
                            **chat_template_kwargs: Any) -> Union[List[int], str]:
        """The ids (or, with ``tokenize=False``, the text) vLLM computes for a chat request with
        these messages and tools: the same as ``tokenize_request`` on
        ``{"messages": ..., "tools": ..., "chat_template_kwargs": ...}``."""
        if self.chat_template is None:
            raise EppError(f"{self.source}: no chat template beside the tokenizer (chat_template.jinja or tokenizer_config.json)")
        body: Dict[str, Any] = {"messages": list(messages), "add_generation_prompt": bool(add_generation_prompt)}
        if tools is not None:
            body["tools"] = list(tools)
        if chat_template_kwargs:
            body["chat_template_kwargs"] = chat_template_kwargs
        if not tokenize:
            return self.chat_template.render_request(body)
        return self.tokenize_request(body, path="/v1/chat/completions")["ids"]

    def __repr__(self) -> str:
        return f"Tokenizer({self.source!r}, vocab_size={self.vocab_size})"
