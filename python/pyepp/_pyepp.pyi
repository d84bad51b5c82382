"""Stubs of the private native module (python/src/bindings.cc). Import pyepp instead."""

import datetime
from typing import List, Optional, Tuple

__version__: str

class LoraInfo:
    @property
    def max_lora(self) -> int: ...
    @property
    def running(self) -> List[str]: ...
    @property
    def waiting(self) -> List[str]: ...

class EndpointMetrics:
    @property
    def waiting_queue_size(self) -> Optional[float]: ...
    @property
    def running_requests(self) -> Optional[float]: ...
    @property
    def kv_cache_usage(self) -> Optional[float]: ...
    @property
    def lora(self) -> Optional[LoraInfo]: ...
    @property
    def cache_block_size(self) -> Optional[int]: ...
    @property
    def cache_num_blocks(self) -> Optional[int]: ...

class CheckResult:
    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...  # "pass", "warn", "fail" or "skip"
    @property
    def message(self) -> str: ...

class MetricMapping:
    @property
    def engine(self) -> str: ...

# (name, labels, value, timestamp in milliseconds or None)
_RawSample = Tuple[str, dict[str, str], float, Optional[int]]
# (name, type as libepp spells it: counter, gauge, histogram, summary, untyped; help; samples)
_RawFamily = Tuple[str, str, str, List[_RawSample]]

def parse_prometheus(text: str, lenient: bool) -> Tuple[List[_RawFamily], List[Tuple[int, str]]]: ...
def extract_metrics(
    text: str, engine: str, lenient: bool, metric_overrides: List[Tuple[str, str]]
) -> Tuple[str, EndpointMetrics, List[CheckResult]]: ...
def builtin_engines() -> List[str]: ...
def load_metric_mappings_yaml(yaml: str, source_name: str) -> List[MetricMapping]: ...

class CheckOptions:
    engine: str
    metric_overrides: List[Tuple[str, str]]
    custom_mappings: List[MetricMapping]
    metrics_path: str
    # Whole milliseconds; set from a timedelta (or a float of seconds).
    timeout: datetime.timedelta
    insecure: bool
    bearer_token: str
    headers: List[str]
    model: str
    lenient: bool
    api: bool
    max_body_bytes: int
    def __init__(self) -> None: ...

def run_checks_json(targets: List[str], options: CheckOptions) -> str: ...

def prefix_seed(model: str, cache_salt: str) -> int: ...
def chained_block_hashes(text: bytes, block_chars: int, seed: int, max_blocks: int) -> List[int]: ...
def approx_tokens(chars: int) -> int: ...

class SimParams:
    engine: str
    models: List[str]
    loras: List[str]
    max_loras: int
    max_running: int
    kv_blocks: int
    block_size: int
    prefill_tokens_per_s: float
    decode_step_ms: float
    decode_ms_per_seq: float
    lora_load_ms: float
    seed: int
    def __init__(self) -> None: ...

class SimRequestResult:
    id: int
    arrival_us: int
    admitted_us: int
    first_token_us: int
    finish_us: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    rejected: bool

class SimServer:
    def __init__(self, params: SimParams) -> None: ...
    @property
    def now_us(self) -> int: ...
    def submit(self, id: int, prompt_tokens: int, output_tokens: int, block_hashes: List[int], adapter: str,
               t_us: int) -> List[Tuple[str, int, int]]: ...
    def advance_to(self, t_us: int) -> List[Tuple[str, int, int]]: ...
    def next_event_time(self) -> Optional[int]: ...
    def progress(self, id: int) -> Optional[int]: ...
    def take_result(self, id: int) -> Optional[SimRequestResult]: ...
    def cached_prefix_blocks(self, block_hashes: List[int]) -> int: ...
    def snapshot(self) -> dict: ...
    def metrics_text(self, wall_time_s: float) -> str: ...

class SimHttpServer:
    def __init__(self, params: SimParams, host: str, port: int, time_scale: float, fail_rate: float,
                 metrics_delay_ms: int, metrics_malformed: bool, drop_rate: float, max_tokens_default: int,
                 threads: int) -> None: ...
    @property
    def port(self) -> int: ...
    @property
    def url(self) -> str: ...
    def stop(self) -> None: ...
