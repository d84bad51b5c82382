"""Stubs of the private native module (python/src/bindings.cc). Import pyepp instead."""

import datetime
from typing import Any, Callable, Dict, List, Optional, Tuple

__version__: str

class LoraInfo:
    max_lora: int
    running: List[str]
    waiting: List[str]
    def __init__(self) -> None: ...

class EndpointMetrics:
    waiting_queue_size: Optional[float]
    running_requests: Optional[float]
    kv_cache_usage: Optional[float]
    lora: Optional[LoraInfo]
    cache_block_size: Optional[int]
    cache_num_blocks: Optional[int]
    custom: List[Tuple[str, float]]
    def __init__(self) -> None: ...

class Endpoint:
    address: str
    labels: Dict[str, str]
    engine: str
    metrics: EndpointMetrics
    # pyepp's convention (python/src/shims.h): relative to the pick, 0 = fresh, None = no metrics.
    metrics_time_us: Optional[int]
    metrics_error: str
    unreachable: bool
    capacity: EndpointCapacity
    def __init__(self) -> None: ...

class EndpointCapacity:
    requests_per_second: Optional[float]
    tokens_per_second: Optional[float]
    def __init__(self) -> None: ...

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

def validate_endpoint_address(address: str) -> None: ...
def load_endpoints(path: str, check: CheckOptions, fail_on_metrics_error: bool) -> List[Endpoint]: ...

class InferenceRequest:
    @property
    def api(self) -> str: ...  # "completions", "chat_completions", "responses", "embeddings", "other"
    @property
    def path(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def stream(self) -> bool: ...
    @property
    def cache_salt(self) -> str: ...
    @property
    def prompt(self) -> str: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def headers(self) -> List[Tuple[str, str]]: ...
    priority: int

def parse_openai_request(path: str, body: str) -> InferenceRequest: ...
def parse_capture_envelope(text: str, path_override: str) -> InferenceRequest: ...

class EppConfig:
    @property
    def source(self) -> str: ...
    @property
    def warnings(self) -> List[str]: ...

def parse_config(yaml: str, source: str) -> EppConfig: ...
def load_config_file(path: str) -> EppConfig: ...
def default_config() -> EppConfig: ...

class PluginRegistry:
    def __init__(self) -> None: ...  # the built-in plugins
    def types(self) -> List[str]: ...
    def has(self, type: str) -> bool: ...
    # kind "scorer" or "filter"; factory(name, params_json) -> adapter (see shims.h).
    def register_python(self, type: str, kind: str, factory: Callable[[str, str], Any]) -> None: ...

class PickResult:
    @property
    def status(self) -> int: ...
    @property
    def endpoints(self) -> List[str]: ...
    @property
    def reason(self) -> str: ...
    @property
    def primary_profile(self) -> str: ...
    @property
    def saturation(self) -> float: ...
    @property
    def load_tokens(self) -> int: ...
    @property
    def pick_id(self) -> int: ...
    @property
    def candidates(self) -> int: ...
    @property
    def prefix_block_size_tokens(self) -> int: ...
    @property
    def prefix_blocks(self) -> int: ...
    @property
    def prefix_match_blocks(self) -> int: ...

class PickOutcome:
    @property
    def result(self) -> PickResult: ...
    @property
    def request(self) -> InferenceRequest: ...
    @property
    def has_request(self) -> bool: ...  # False: an ext_proc decision made without a parsed request
    def to_json(self, indent: int) -> str: ...
    def to_text(self, color: bool) -> str: ...

class Scheduler:
    def __init__(self, config: EppConfig, registry: PluginRegistry, seed: int, region: str = "",
                 zone: str = "") -> None: ...
    def pick(self, request: InferenceRequest, endpoints: List[Endpoint], subset: Optional[List[str]], record: bool,
             trace: bool) -> PickOutcome: ...
    def release(self, outcome: PickOutcome) -> None: ...
    def observe_first_token(self, outcome: PickOutcome) -> None: ...
    def effective_config_yaml(self) -> str: ...
    @property
    def warnings(self) -> List[str]: ...
    @property
    def profile_names(self) -> List[str]: ...
    def prefix_index_entries(self) -> int: ...
    def inflight(self, endpoint: str) -> Tuple[int, int]: ...
    def plugin_timings(self) -> List[PluginTiming]: ...
    def missing_inputs_for_engine(self, engine: str) -> List[Dict[str, str]]: ...
    def missing_inputs_for_endpoints(self, endpoints: List[Endpoint]) -> List[Dict[str, str]]: ...
    def cycle_timing(self) -> DurationHistogram: ...

class DurationHistogram:
    count: int
    sum_seconds: float
    bucket_counts: List[int]

class PluginTiming:
    extension_point: str
    plugin_type: str
    plugin_name: str
    count: int
    sum_seconds: float
    bucket_counts: List[int]

timing_bucket_bounds_seconds: List[float]

# --- ext_proc (epp/extproc.h) ---

class ExtProcOptions:
    max_request_bytes: int
    objective_priorities: Dict[str, int]
    ignore_subset_hint: bool
    trace: bool
    def __init__(self) -> None: ...

def requests_from_capture(capture_json: str, path_override: str, subset: Optional[List[str]], subset_as_string: bool,
                          chunk_bytes: int) -> List[bytes]: ...
def build_response_messages(status: int, headers: List[Tuple[str, str]], body: bytes,
                            served_endpoint: str) -> List[bytes]: ...
def processing_request_to_json(bytes: bytes) -> str: ...
def processing_response_to_json(bytes: bytes) -> str: ...
def processing_request_from_json(json: str) -> bytes: ...

class ExtProcSession:
    def __init__(self, scheduler: Scheduler, endpoints: List[Endpoint], options: ExtProcOptions) -> None: ...
    def send(self, message: bytes) -> List[bytes]: ...  # without the GIL
    @property
    def finished(self) -> bool: ...
    @property
    def result(self) -> Optional[PickOutcome]: ...
    @property
    def served(self) -> str: ...

class ServeArgs:
    # A runtime server's settings (pyepp.serve(config=..., ...)), in seconds.
    config_file: str
    watch_config: bool
    endpoints_file: str
    endpoint_flags: List[str]
    pool_name: Optional[str]
    pool_namespace: str
    pool_group: str
    pool_resync_interval_s: float
    kube_api_server: str
    kube_token_file: str
    kube_ca_file: str
    kube_insecure_skip_verify: bool
    engine: str
    refresh_interval_s: float
    scrape_timeout_s: float
    scrape_gzip: bool
    staleness_s: float
    detector_staleness_s: Optional[float]
    metrics_pool_name: str
    region: str
    zone: str
    seed: int
    log_level: str
    def __init__(self) -> None: ...

class ExtProcServer:
    # libepp's EppServer. Static mode: a Python scheduler over endpoints set from Python. Starts
    # without the GIL; a port of None: no such server; readiness reported at once.
    def __init__(self, scheduler: Scheduler, endpoints: List[Endpoint], host: str, port: int, tls: bool,
                 health_port: Optional[int], metrics_port: Optional[int], options: ExtProcOptions) -> None: ...
    # Runtime mode: config, endpoints file / specs / discovery, scrape loop, reloads.
    @staticmethod
    def start_runtime(args: ServeArgs, host: str, port: int, tls: bool, health_port: Optional[int],
                      metrics_port: Optional[int], options: ExtProcOptions) -> "ExtProcServer": ...
    @property
    def port(self) -> int: ...
    @property
    def health_port(self) -> Optional[int]: ...
    @property
    def metrics_port(self) -> Optional[int]: ...
    @property
    def cert_pem(self) -> bytes: ...  # b"" without TLS
    def set_endpoints(self, endpoints: List[Endpoint]) -> None: ...  # static mode only
    def set_ready(self, ready: bool) -> None: ...
    def close(self, drain_s: float) -> None: ...  # idempotent, without the GIL
    def stats(self) -> Dict[str, Any]: ...
    def metrics_text(self) -> str: ...
    def reload_config(self) -> None: ...
    def config_reloads(self) -> Dict[str, Any]: ...
    def endpoints(self) -> List[Endpoint]: ...
    def describe(self) -> str: ...

# --- Replay (epp/replay.h) ---

class SharedPrefixWorkload:
    groups: int
    prompts_per_group: int
    system_len: int
    question_len: int
    output_len: int
    multi_turn: bool
    rate: float
    poisson: bool
    duration_s: float
    seed: int
    model: str
    def __init__(self) -> None: ...

def gie_benchmark_workload(name: str) -> SharedPrefixWorkload: ...

class ReplayTrace:
    def __len__(self) -> int: ...

def load_replay_trace(format: str, path: str, time_scale: float) -> ReplayTrace: ...  # "mooncake" or "openai"
def generate_shared_prefix(workload: SharedPrefixWorkload) -> ReplayTrace: ...

class ReplayPolicy:
    name: str
    config: EppConfig
    def __init__(self) -> None: ...

def named_replay_policy(name: str) -> ReplayPolicy: ...
def named_replay_policies() -> List[str]: ...

class ReplayOptions:
    servers: int
    server: SimParams
    per_server: List[SimParams]
    scrape_interval_us: int
    seed: int
    timeline_buckets: int
    def __init__(self) -> None: ...

class Percentiles:
    p50: float
    p90: float
    p99: float
    mean: float
    def __init__(self) -> None: ...

class ReplayTraceInfo:
    requests: int
    blocks: int
    prompt_tokens: int
    duration_s: float
    upper_bound_block_hit_rate: float
    pooled_cache_bound_block_hit_rate: float
    def __init__(self) -> None: ...

class ReplayPolicyReport:
    name: str
    completed: int
    failed: int
    shed: int
    block_hit_rate: float
    token_hit_rate: float
    ttft_s: Percentiles
    e2e_s: Percentiles
    queue_s: Percentiles
    throughput_rps: float
    load_max_over_mean: float
    prediction_error_rate: float  # NaN without a prefix producer
    requests_per_server: List[int]
    kv_usage_mean_per_server: List[float]
    ttft_samples_s: List[float]
    hit_rate_timeline: List[float]
    wall_s: float
    def __init__(self) -> None: ...

class ReplayReport:
    trace: ReplayTraceInfo
    policies: List[ReplayPolicyReport]
    def __init__(self) -> None: ...

def run_replay(trace: ReplayTrace, policies: List[ReplayPolicy], options: ReplayOptions) -> ReplayReport: ...
def replay_report_to_json(report: ReplayReport, indent: int) -> str: ...
def replay_report_to_text(report: ReplayReport) -> str: ...
def replay_report_to_html(report: ReplayReport, title: str) -> str: ...

class ReplayRegion:
    name: str
    servers: int
    arrival_share: float
    capacity_rps: float
    def __init__(self) -> None: ...

class MultiRegionOptions:
    regions: List[ReplayRegion]
    rtt_ms: Dict[Tuple[str, str], float]
    server: SimParams
    scrape_interval_us: int
    seed: int
    global_region: str
    saturation_queue: float
    saturation_kv: float
    def __init__(self) -> None: ...

class MultiRegionReport: ...

def parse_replay_regions(text: str) -> List[ReplayRegion]: ...
def mixed_speed_servers(base: SimParams, servers: int, speeds: List[float]) -> List[SimParams]: ...
def parse_rtt_matrix(text: str) -> Dict[Tuple[str, str], float]: ...
def run_multi_region_replay(trace: ReplayTrace, policy: ReplayPolicy, options: MultiRegionOptions) -> MultiRegionReport: ...
def multi_region_report_to_json(report: MultiRegionReport, indent: int) -> str: ...
def multi_region_report_to_text(report: MultiRegionReport) -> str: ...


class Tokenizer:
    @staticmethod
    def from_path(path: str) -> "Tokenizer": ...
    def encode(self, text: str, add_special_tokens: bool) -> List[int]: ...
    def decode(self, ids: List[int]) -> bytes: ...
    def token_id(self, token: str) -> Optional[int]: ...
    vocab_size: int
    source: str
    def tokenize_request(self, path: str, body: str) -> Tuple[str, List[int], bool]: ...
