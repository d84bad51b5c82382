"""The model-server simulator: :class:`Simulator` (real HTTP on a free port) and :class:`SimServer`
(the cost model in virtual time). The model and its defaults are described in docs/sim.md."""

import itertools
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ._native import lib as _lib

_COST_FIELDS = ("max_loras", "max_running", "kv_blocks", "block_size", "prefill_tokens_per_s", "decode_step_ms",
                "decode_ms_per_seq", "lora_load_ms", "seed")


def _params(engine: str, models: Optional[Sequence[str]], loras: Optional[Sequence[str]], cost: Dict[str, Any]):
    p = _lib.SimParams()
    p.engine = engine
    if models is not None:
        if isinstance(models, str):
            models = [models]
        p.models = list(models)
    if loras is not None:
        if isinstance(loras, str):
            loras = [loras]
        p.loras = list(loras)
    for key, value in cost.items():
        if key not in _COST_FIELDS:
            raise TypeError(f"unknown simulator parameter {key!r} (known: {', '.join(_COST_FIELDS)})")
        setattr(p, key, value)
    return p


class Simulator:
    """A simulated model server serving HTTP in this process, on a free port by default.

    >>> with pyepp.Simulator(engine="vllm", loras=["sql-lora"], time_scale=0.01) as sim:
    ...     pyepp.check(sim.url)["status"]
    'pass'

    Cost-model parameters (``max_running``, ``kv_blocks``, ``block_size``, ``prefill_tokens_per_s``,
    ``decode_step_ms``, ``decode_ms_per_seq``, ``max_loras``, ``lora_load_ms``, ``seed``) are
    keyword arguments, as are the fault injections of ``eppctl sim``.

    ``role`` is llm-d's P/D role (``eppctl sim --role``): a ``"decode"`` or ``"both"`` server given a
    request with ``x-prefiller-host-port`` first sends the prefill to that server, then models the
    KV transfer (``kv_bytes_per_token`` over ``kv_link_gbytes_per_s``) and decodes; ``"prefill"``
    and ``"encode"`` servers ignore the header. Its ``/metrics`` count the hops
    (``epp_sim_prefill_hops_total``, ``epp_sim_remote_prefills_total``, ...).

    ``kv_events`` (``eppctl sim --kv-events``) publishes the cache's KV events in vLLM's wire format
    on that ZeroMQ address (``"tcp://127.0.0.1:0"``: a free port, see :attr:`kv_events_endpoint`);
    ``kv_events_replay`` serves replays of the last batches there.

    ``tokenizer`` (``eppctl sim --tokenizer``) is the servers' tokenizer for their KV events and
    their ``/tokenize`` and render endpoints: ``"estimate"`` (4 bytes a token) or ``"words"`` (a
    token per word, so that only an EPP asking the server for tokens matches its events);
    ``render_endpoints=False`` answers ``/v1/*/render`` with 404, as vLLM before that API.
    """

    def __init__(self, engine: str = "vllm", *, models: Optional[Sequence[str]] = None,
                 loras: Optional[Sequence[str]] = None, host: str = "127.0.0.1", port: int = 0,
                 time_scale: float = 1.0, fail_rate: float = 0.0, metrics_delay: float = 0.0,
                 metrics_malformed: bool = False, drop_rate: float = 0.0, max_tokens_default: int = 16,
                 threads: int = 64, role: str = "both", kv_link_gbytes_per_s: float = 25.0,
                 kv_bytes_per_token: int = 131072, kv_events: str = "", kv_events_replay: str = "",
                 tokenizer: str = "estimate", render_endpoints: bool = True, **cost: Any) -> None:
        self._server = _lib.SimHttpServer(_params(engine, models, loras, cost), host, port, time_scale, fail_rate,
                                          int(metrics_delay * 1000), metrics_malformed, drop_rate,
                                          max_tokens_default, threads, role, kv_link_gbytes_per_s, kv_bytes_per_token,
                                          kv_events, kv_events_replay, tokenizer, render_endpoints)

    @property
    def kv_events_endpoint(self) -> str:
        """The bound KV-event address (``tcp://127.0.0.1:40123``); "" without ``kv_events``."""
        return self._server.kv_events_endpoint

    @property
    def kv_events_replay_endpoint(self) -> str:
        return self._server.kv_events_replay_endpoint

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        return self._server.url

    @property
    def port(self) -> int:
        return self._server.port

    def stop(self) -> None:
        """Stops serving (idempotent); requests still in flight are answered 503."""
        self._server.stop()

    def __enter__(self) -> "Simulator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class SimServer:
    """One simulated server's cost model in virtual time (integer microseconds).

    Time moves only through :meth:`submit` and :meth:`advance_to`, so results are exact and
    reproducible. Events are ``(kind, id, time_us)`` tuples, kind ``"first_token"``,
    ``"finished"`` or ``"rejected"``.
    """

    def __init__(self, engine: str = "vllm", *, models: Optional[Sequence[str]] = None,
                 loras: Optional[Sequence[str]] = None, **cost: Any) -> None:
        self._params = _params(engine, models, loras, cost)
        self._sim = _lib.SimServer(self._params)
        self._ids = itertools.count(1)

    @property
    def now_us(self) -> int:
        return self._sim.now_us

    def prompt_blocks(self, prompt: str, model: Optional[str] = None, cache_salt: str = "") -> Tuple[int, List[int]]:
        """(prompt_tokens, block hashes) of a prompt text, exactly as the HTTP front computes them."""
        model = model if model is not None else self._params.models[0]
        data = prompt.encode()
        tokens = max(1, _lib.approx_tokens(len(data)))
        block_chars = self._params.block_size * 4
        hashes = _lib.chained_block_hashes(data, block_chars, _lib.prefix_seed(model, cache_salt), 0)
        return tokens, hashes[: tokens // self._params.block_size]

    def submit(self, *, t_us: int, output_tokens: int, prompt: Optional[str] = None, prompt_tokens: Optional[int] = None,
               block_hashes: Iterable[int] = (), adapter: str = "", id: Optional[int] = None,
               cache_salt: str = "") -> Tuple[int, List[Tuple[str, int, int]]]:
        """Queues a request at ``t_us``; returns (id, events that happened up to ``t_us``).

        Give either ``prompt`` (text) or ``prompt_tokens`` (with optional ``block_hashes``)."""
        if prompt is not None:
            if prompt_tokens is not None:
                raise TypeError("give prompt or prompt_tokens, not both")
            prompt_tokens, block_hashes = self.prompt_blocks(prompt, adapter or None, cache_salt)
        if prompt_tokens is None:
            raise TypeError("prompt or prompt_tokens is required")
        rid = next(self._ids) if id is None else id
        events = self._sim.submit(rid, prompt_tokens, output_tokens, list(block_hashes), adapter, t_us)
        return rid, events

    def advance_to(self, t_us: int) -> List[Tuple[str, int, int]]:
        return self._sim.advance_to(t_us)

    def next_event_time(self) -> Optional[int]:
        return self._sim.next_event_time()

    def run_until_idle(self) -> List[Tuple[str, int, int]]:
        """Advances event by event until nothing is left to do; returns all events."""
        events = []
        while (t := self._sim.next_event_time()) is not None:
            events.extend(self._sim.advance_to(t))
        return events

    def progress(self, id: int) -> Optional[int]:
        return self._sim.progress(id)

    def result(self, id: int) -> Optional[Dict[str, Any]]:
        """The finished request's timings (and forgets it); None while it is in flight."""
        r = self._sim.take_result(id)
        if r is None:
            return None
        return {k: getattr(r, k) for k in ("id", "arrival_us", "admitted_us", "first_token_us", "finish_us",
                                            "prompt_tokens", "cached_tokens", "output_tokens", "rejected")}

    def cached_prefix_blocks(self, block_hashes: Iterable[int]) -> int:
        return self._sim.cached_prefix_blocks(list(block_hashes))

    def snapshot(self) -> Dict[str, Any]:
        return self._sim.snapshot()

    def metrics_text(self, wall_time_s: float = 0.0) -> str:
        """``/metrics`` of this server now, in its engine's dialect."""
        return self._sim.metrics_text(wall_time_s)
