// The model-server simulator: a clock-injected cost model (SimServer) and its HTTP front
// (SimHttpServer, what `eppctl sim` runs).
//
// SimServer is pure and single-threaded: time is virtual (int64 microseconds) and moves only when
// the caller says so (Submit / AdvanceTo), so one process can run thousands of servers in a
// discrete-event replay, and tests are exact. The model (docs/sim.md has the formulas):
//  - continuous batching in iterations: each step, waiting requests are admitted FCFS while fewer
//    than max_running run and their KV blocks fit; every running request then produces one token.
//    A step lasts decode_step_ms + decode_ms_per_seq * running + (uncached prompt tokens of the
//    requests admitted in it) / prefill_tokens_per_s. The first token comes at the end of the
//    admission step (TTFT); the request finishes after output_tokens steps;
//  - prefix KV cache: prompt blocks are chained hashes (prefix_cache.h) kept in an LRU of kv_blocks
//    blocks; a running request pins its blocks; cached_tokens = longest cached prefix;
//  - KV usage = blocks pinned or privately held by running requests / kv_blocks;
//  - LoRA: at most max_loras adapters resident, swapped LRU with a load delay; requests for an
//    adapter that is not resident wait (other requests go ahead).
// SimServer is not thread-safe; SimHttpServer serialises access to its SimServer.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "epp/kv/events.h"
#include "epp/status.h"

namespace epp {

// Defaults model one H100 80GB serving Llama-3.1-8B in bf16 with vLLM (derivations in docs/sim.md).
struct SimParams {
  std::string engine = "vllm";  // metrics dialect: vllm, sglang or trtllm-serve
  std::vector<std::string> models = {"meta-llama/Llama-3.1-8B-Instruct"};
  std::vector<std::string> loras;   // adapter names served besides the base models
  int max_loras = 1;                // adapters resident at once (vLLM --max-loras default)
  int max_running = 256;            // vLLM --max-num-seqs
  int64_t kv_blocks = 27648;        // 16-token blocks that fit in HBM next to the weights
  int block_size = 16;              // tokens per KV block
  double prefill_tokens_per_s = 20000;
  double decode_step_ms = 6.0;      // one decode step at batch size 1
  double decode_ms_per_seq = 0.05;  // added per running sequence
  double lora_load_ms = 25;         // swapping an adapter in
  // Also publish vLLM's residency metric vllm:lora_adapter_loaded{adapter_name,level="gpu",pinned}
  // (one series per resident adapter) beside vllm:lora_requests_info.
  bool lora_loaded_metric = false;
  uint64_t seed = 0;
  // Record KV-cache events (TakeKvEvents): a BlockStored for the blocks a request adds to the
  // cache (with the request's token_ids), a BlockRemoved for every block evicted.
  bool kv_events = false;

  // kInvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

struct SimRequest {
  uint64_t id = 0;                    // unique per server
  std::string adapter;                // LoRA adapter; empty for a base model
  std::vector<uint64_t> block_hashes; // chained hashes of the prompt's full blocks
  // The prompt's token ids, when the server publishes KV events (SimParams::kv_events): a
  // BlockStored carries the tokens of the blocks it stores. At least block_size per full block.
  std::vector<uint32_t> token_ids;
  int64_t prompt_tokens = 1;          // >= 1
  int64_t output_tokens = 1;          // >= 1
  // Prompt tokens whose KV a prefill server computed and transferred (disaggregated P/D): they
  // need no prefill compute here. 0..prompt_tokens.
  int64_t remote_prefilled_tokens = 0;
};

struct SimEvent {
  enum class Kind { kFirstToken, kFinished, kRejected };
  Kind kind;
  uint64_t id;
  int64_t time_us;
};

// Everything known about one request once it finished (or while it runs).
struct SimRequestResult {
  uint64_t id = 0;
  int64_t arrival_us = 0;
  int64_t admitted_us = -1;
  int64_t first_token_us = -1;
  int64_t finish_us = -1;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t output_tokens = 0;
  bool rejected = false;  // could never fit in the KV cache
};

// Exponential-bucket histogram in the engines' style (upper bounds in seconds).
struct SimHistogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // cumulative is computed when rendered; these are per bucket
  uint64_t count = 0;
  double sum = 0;
  void Observe(double v);
};

struct SimSnapshot {
  int64_t now_us = 0;
  int waiting = 0;
  int running = 0;
  int64_t kv_blocks_used = 0;
  double kv_usage = 0;            // kv_blocks_used / kv_blocks
  int64_t cached_blocks = 0;      // blocks holding reusable prefix content (pinned or not)
  std::vector<std::string> running_adapters;  // adapters of running requests
  std::vector<std::string> waiting_adapters;  // adapters of waiting requests
  std::vector<std::string> resident_adapters;
  int64_t lora_changed_us = 0;    // virtual time of the last change of the two lists above
  uint64_t requests_finished = 0;
  uint64_t requests_rejected = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t generation_tokens_total = 0;
  uint64_t prefix_query_tokens_total = 0;  // prompt tokens looked up in the cache
  uint64_t prefix_hit_tokens_total = 0;    // of which were cached
  SimHistogram ttft_s, e2e_s, queue_s;
};

class SimServer {
 public:
  // kInvalidArgument when `params` is invalid.
  static absl::StatusOr<std::unique_ptr<SimServer>> Create(const SimParams& params);
  ~SimServer();

  const SimParams& params() const;
  int64_t now_us() const;

  // Moves time to `t_us` (>= now), running every step that ends by then; appends events in time
  // order. Idempotent for t_us == now.
  void AdvanceTo(int64_t t_us, std::vector<SimEvent>* events = nullptr);

  // Advances to `t_us`, then queues the request. kInvalidArgument for a bad request (tokens < 1,
  // duplicate id, unknown adapter).
  absl::Status Submit(const SimRequest& request, int64_t t_us, std::vector<SimEvent>* events = nullptr);

  // The time of the next event (a step end or an adapter finishing its load); max() when idle.
  int64_t NextEventTime() const;

  // Tokens generated so far by a running or finished request (for streaming); nullopt if unknown.
  std::optional<int64_t> Progress(uint64_t id) const;

  // The result of a finished request; erased when taken. nullopt while it is still in flight.
  std::optional<SimRequestResult> TakeResult(uint64_t id);

  // How many leading blocks of `hashes` the cache holds right now (pinned or not).
  int64_t CachedPrefixBlocks(std::span<const uint64_t> hashes) const;

  // With SimParams::kv_events: the cache's BlockStored / BlockRemoved events since the last call,
  // in the order they happened (as vLLM's block pool queues them), moved out.
  std::vector<KvEvent> TakeKvEvents();

  SimSnapshot Snapshot() const;

  struct Impl;

 private:
  explicit SimServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Renders a snapshot as Prometheus text in the dialect of params.engine ("vllm", "sglang",
// "trtllm-serve"), with the names, TYPE/HELP lines and labels those servers use. `wall_time_s`
// is written where the engine reports a wall-clock timestamp (vllm:lora_requests_info).
std::string RenderSimMetrics(const SimParams& params, const SimSnapshot& snapshot, double wall_time_s);

// NVIDIA's DCGM exporter beside a simulated server (the GPU it would run on), in the exporter's
// names, TYPE/HELP lines and labels; what llm-d's dcgm-data-source and dcgm-extractor read.
// Derived from the snapshot (docs/sim.md):
//  - DCGM_FI_DEV_GPU_UTIL (integer %): the batch's occupancy, (running + waiting) / max_running,
//    capped at 100. A real exporter reports the time any kernel ran, near 100 whenever a request
//    runs; occupancy is the load signal GPU-utilization routing is after, and it moves with load;
//  - DCGM_FI_DEV_MEM_COPY_UTIL (%): 60% of it (decode reads the weights and KV every step);
//  - DCGM_FI_DEV_FB_USED / _FB_FREE (MiB): vLLM allocates its KV cache up front
//    (gpu-memory-utilization 0.9), so memory in use does not follow the load;
//  - DCGM_FI_DEV_POWER_USAGE (W): 70 idle to 700 at full utilization; DCGM_FI_DEV_GPU_TEMP (C):
//    30 to 70; DCGM_FI_DEV_SM_CLOCK (MHz).
// With `pod` set the samples carry the exporter's Kubernetes labels (namespace, pod, container),
// as a DaemonSet exporter with DCGM_EXPORTER_KUBERNETES=true writes them.
struct SimDcgmOptions {
  std::string hostname = "sim-node";
  std::string ns = "default";
  std::string pod;  // empty: no Kubernetes labels (a sidecar exporter)
  std::string container = "vllm";
  int gpu = 0;  // the GPU index (label gpu, device nvidiaN)
};
std::string RenderDcgmMetrics(const SimParams& params, const SimSnapshot& snapshot, const SimDcgmOptions& options);

struct SimHttpOptions {
  SimParams params;
  std::string host = "127.0.0.1";
  int port = 0;                 // 0 picks a free port
  double time_scale = 1.0;      // real seconds per simulated second (0.01 = 100x faster)
  double fail_rate = 0;         // fraction of inference calls answered with HTTP 500
  int metrics_delay_ms = 0;     // delay before answering /metrics
  bool metrics_malformed = false;  // /metrics carries a line that is not exposition
  double drop_rate = 0;         // fraction of requests whose connection is dropped mid-answer
  int max_tokens_default = 16;  // when a request gives no max_tokens
  int threads = 256;            // HTTP worker threads (each blocked request holds one)
  // llm-d's P/D roles (the pod label llm-d.ai/role, set in the endpoints file or the Pod). A
  // "decode" or "both" server acts as the decode pod with llm-d's sidecar: a request carrying
  // x-prefiller-host-port first goes to that server as a prefill request (stream false, every
  // token limit 1, kv_transfer_params {do_remote_decode: true, ...}, as llm-d's NIXL v2 path sends
  // it); the prompt's KV then "transfers" (the tokens this server does not hold, times
  // kv_bytes_per_token, over kv_link_gbytes_per_s, in simulated time) and the request decodes
  // here without prefill compute for those tokens. A prefill error is returned to the client, as
  // the sidecar does. "prefill" and "encode" servers ignore the header. Every server answers a
  // prefill request (do_remote_decode) with kv_transfer_params for the decoder. Counters on
  // /metrics: epp_sim_prefill_hops_total, epp_sim_prefill_hop_errors_total,
  // epp_sim_kv_transfer_bytes_total, epp_sim_kv_transfer_seconds_total (decode side),
  // epp_sim_remote_prefills_total (prefill side).
  std::string role = "both";
  // KV-cache events (kv/publisher.h), as vLLM's --kv-events-config publishes them: when
  // kv_events_endpoint is set ("tcp://127.0.0.1:5557", port 0 = a free one), every block the
  // cache stores or evicts goes out as BlockStored / BlockRemoved, one batch per request admitted
  // (token ids: EstimateTokenIds of the request's canonical prompt, as libepp's OpenAI parser
  // builds it, so an EPP tokenizing with `estimate` computes the same blocks). Topic
  // "kv@<host>:<port>@<first model>" unless kv_events_topic is set; the replay socket, when set,
  // keeps kv_events_buffer_steps batches; drop/delay are the publisher's fault options.
  // The server's tokenizer (what its KV events, render endpoints and prompt token counts use):
  // "estimate" (4 bytes a token, llm-d's estimate: an EPP estimating tokens matches it) or
  // "words" (tokenize.h WordTokenIds: only an EPP that asks this server for the tokens matches
  // it; blocks are then hashed over token ids, not characters), or the path of a tokenizer.json
  // (or its directory): epp's in-process tokenizer, a completions prompt tokenized as vLLM does
  // (BOS added), a chat rendered with the chat template beside it (chat_template.jinja or
  // tokenizer_config.json; epp/text/chat_template.h) and tokenized without special tokens, as vLLM
  // does; a chat as its canonical prompt's text when there is no template.
  std::string tokenizer = "estimate";
  // Serve vLLM's render endpoints (POST /v1/completions/render, /v1/chat/completions/render);
  // POST /tokenize is always served. False: a server like vLLM before the render API (404).
  bool render_endpoints = true;
  std::string kv_events_endpoint;
  // Connect the PUB socket to kv_events_endpoint instead of binding it (an EPP's central socket,
  // kvEventsConfig.zmqEndpoint, as vLLM connects to an address without '*').
  bool kv_events_connect = false;
  std::string kv_events_replay_endpoint;
  std::optional<std::string> kv_events_topic;
  size_t kv_events_buffer_steps = 10000;
  double kv_events_drop_rate = 0;
  int kv_events_delay_ms = 0;
  double kv_link_gbytes_per_s = 25;      // ~200 Gb/s RDMA
  int64_t kv_bytes_per_token = 131072;   // Llama-3.1-8B bf16: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes
  // A DCGM exporter for the server's GPU (RenderDcgmMetrics) on its own listener, as the exporter
  // sidecar runs beside the model server: -1 none, 0 a free port, else the port (DCGM's is 9400).
  int dcgm_port = -1;
  std::string dcgm_path = "/metrics";
  SimDcgmOptions dcgm;
};

// The HTTP front: GET /metrics, /v1/models, /health; POST /v1/completions and
// /v1/chat/completions (JSON or SSE streaming); POST /v1/completions/render,
// /v1/chat/completions/render and /tokenize (vLLM's shapes, SimHttpOptions::tokenizer). Serves on its own threads until Stop() or
// destruction.
class SimHttpServer {
 public:
  // Binds and starts serving. kInvalidArgument for bad options, kUnavailable when the port
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<SimHttpServer>> Start(const SimHttpOptions& options);
  ~SimHttpServer();
  int port() const;
  std::string url() const;  // http://host:port
  // The bound KV-event addresses ("" without them).
  std::string kv_events_endpoint() const;
  std::string kv_events_replay_endpoint() const;
  int dcgm_port() const;  // the DCGM exporter's bound port; -1 without one
  void Stop();              // idempotent; in-flight requests are answered with 503

  struct Impl;

 private:
  explicit SimHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
