#include "commands/sim.h"

#include <csignal>
#include <iostream>
#include <memory>

#include "epp/tools/sim.h"
#include "output.h"

namespace eppctl {
namespace {

struct SimCommandOptions {
  epp::SimHttpOptions http;
  std::vector<std::string> models;
  int count = 1;
  int base_port = 0;
  double metrics_delay_s = 0;
};

// "tcp://host:5557" + 2 -> "tcp://host:5559"; port 0, "*" or another scheme unchanged.
std::string OffsetPort(const std::string& address, int offset) {
  const size_t colon = address.rfind(':');
  if (address.rfind("tcp://", 0) != 0 || colon == std::string::npos) return address;
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (...) {
    return address;
  }
  if (port <= 0) return address;
  return address.substr(0, colon + 1) + std::to_string(port + offset);
}

int RunSim(SimCommandOptions o) {
  if (!o.models.empty()) o.http.params.models = o.models;
  if (o.count < 1) return PrintError(absl::InvalidArgumentError("--count must be >= 1"));
  if (o.count > 1 && o.http.port != 0) {
    return PrintError(absl::InvalidArgumentError("--port serves one simulator; use --base-port with --count"));
  }
  o.http.metrics_delay_ms = static_cast<int>(o.metrics_delay_s * 1000);
  // Block the stop signals before any thread starts so that only sigwait() below sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::vector<std::unique_ptr<epp::SimHttpServer>> servers;
  for (int i = 0; i < o.count; ++i) {
    epp::SimHttpOptions h = o.http;
    if (o.count > 1) h.port = o.base_port == 0 ? 0 : o.base_port + i;
    h.params.seed = o.http.params.seed + static_cast<uint64_t>(i);
    if (i > 0) {  // --kv-events tcp://HOST:PORT with --count: PORT, PORT+1, ... (0 stays 0: free ports)
      if (!h.kv_events_connect) h.kv_events_endpoint = OffsetPort(o.http.kv_events_endpoint, i);  // connect: one socket
      h.kv_events_replay_endpoint = OffsetPort(o.http.kv_events_replay_endpoint, i);
      // One DCGM exporter per server (its GPU): ports PORT, PORT+1, ... (0: free ones), pods NAME-i.
      if (h.dcgm_port > 0) h.dcgm_port += i;
      h.dcgm.gpu = i;
    }
    if (o.count > 1 && !h.dcgm.pod.empty()) h.dcgm.pod += "-" + std::to_string(i);
    auto s = epp::SimHttpServer::Start(h);
    if (!s.ok()) return PrintError(s.status());
    std::cout << "epp-sim " << h.params.engine << " listening on " << (*s)->url();
    if (!(*s)->kv_events_endpoint().empty()) std::cout << " kv-events " << (*s)->kv_events_endpoint();
    if (!(*s)->kv_events_replay_endpoint().empty()) std::cout << " kv-events-replay " << (*s)->kv_events_replay_endpoint();
    if ((*s)->dcgm_port() > 0)
      std::cout << " dcgm http://" << h.host << ":" << (*s)->dcgm_port() << h.dcgm_path;
    std::cout << std::endl;
    servers.push_back(*std::move(s));
  }
  int sig = 0;
  sigwait(&stop, &sig);
  std::cerr << "epp-sim: stopping (" << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ")" << std::endl;
  for (auto& s : servers) s->Stop();
  return kExitOk;
}

}  // namespace

void SetupSimCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SimCommandOptions>();
  epp::SimHttpOptions& h = o->http;
  epp::SimParams& p = h.params;
  CLI::App* cmd = app.add_subcommand("sim", "Run simulated vLLM / SGLang / trtllm-serve model servers (docs/sim.md)");
  cmd->add_option("--host", h.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", h.port, "Port (0 picks a free port and prints it)")->capture_default_str();
  cmd->add_option("--count", o->count, "Number of servers in this process")->capture_default_str();
  cmd->add_option("--base-port", o->base_port, "First port with --count (0: free ports)")->capture_default_str();
  cmd->add_option("--engine", p.engine, "Metrics dialect")->check(CLI::IsMember({"vllm", "sglang", "trtllm-serve"}))
      ->capture_default_str();
  cmd->add_option("--model", o->models, "Served model name (repeatable; default " + p.models.front() + ")");
  cmd->add_option("--lora", p.loras, "LoRA adapter name (repeatable)");
  cmd->add_option("--max-loras", p.max_loras, "Adapters resident at once")->capture_default_str();
  cmd->add_option("--lora-load-ms", p.lora_load_ms, "Time to swap an adapter in")->capture_default_str();
  cmd->add_flag("--lora-loaded-metric", p.lora_loaded_metric,
                "Also publish vllm:lora_adapter_loaded (one series per adapter resident on the GPU)");
  cmd->add_option("--max-running", p.max_running, "Requests in the running batch (max-num-seqs)")->capture_default_str();
  cmd->add_option("--kv-blocks", p.kv_blocks, "KV-cache blocks")->capture_default_str();
  cmd->add_option("--block-size", p.block_size, "Tokens per KV block")->capture_default_str();
  cmd->add_option("--prefill-tokens-per-s", p.prefill_tokens_per_s, "Prefill throughput")->capture_default_str();
  cmd->add_option("--decode-step-ms", p.decode_step_ms, "Decode step time at batch size 1")->capture_default_str();
  cmd->add_option("--decode-ms-per-seq", p.decode_ms_per_seq, "Decode step time added per running request")
      ->capture_default_str();
  cmd->add_option("--max-tokens-default", h.max_tokens_default, "Output tokens when a request sets none")
      ->capture_default_str();
  cmd->add_option("--time-scale", h.time_scale, "Real seconds per simulated second (0.01 = 100x faster)")
      ->capture_default_str();
  cmd->add_option("--seed", p.seed, "Seed for output text and fault injection")->capture_default_str();
  cmd->add_option("--fail-rate", h.fail_rate, "Fraction of inference calls answered with HTTP 500")
      ->capture_default_str();
  cmd->add_option("--metrics-delay", o->metrics_delay_s, "Seconds to wait before answering /metrics")
      ->capture_default_str();
  cmd->add_flag("--metrics-malformed", h.metrics_malformed, "Put a line that is not exposition into /metrics");
  cmd->add_option("--drop-connections", h.drop_rate, "Fraction of requests whose connection is dropped")
      ->capture_default_str();
  cmd->add_option("--threads", h.threads, "HTTP worker threads per server")->capture_default_str();
  cmd->add_option("--role", h.role,
                  "llm-d role: decode/both act as a decode pod with llm-d's sidecar (x-prefiller-host-port -> prefill "
                  "request there, KV transfer, local decode); prefill/encode ignore that header")
      ->check(CLI::IsMember({"both", "decode", "prefill", "encode"}))->capture_default_str();
  cmd->add_option("--kv-events", h.kv_events_endpoint,
                  "Publish KV-cache events (vLLM's wire format) on this ZeroMQ address, e.g. tcp://127.0.0.1:5557 "
                  "(port 0: a free one; with --count, ports PORT, PORT+1, ...)");
  cmd->add_option("--kv-events-replay", h.kv_events_replay_endpoint,
                  "Serve replays of the last --kv-events-buffer-steps batches on this ZeroMQ address (vLLM's "
                  "replay_endpoint)");
  cmd->add_flag("--kv-events-connect", h.kv_events_connect,
                "Connect the KV-event PUB socket to the --kv-events address (an EPP's central zmqEndpoint) instead of "
                "binding it; with --count every server connects to the same address");
  cmd->add_option("--kv-events-buffer-steps", h.kv_events_buffer_steps, "Batches kept for replay")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option_function<std::string>(
      "--kv-events-topic", [o](const std::string& v) { o->http.kv_events_topic = v; },
      "Topic of the KV-event messages (default kv@HOST:PORT@MODEL, llm-d's convention; \"\" as vLLM's default)");
  cmd->add_option("--kv-events-drop-rate", h.kv_events_drop_rate,
                  "Fault: share of KV-event batches numbered but not sent (subscribers see gaps)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--kv-events-delay-ms", h.kv_events_delay_ms, "Fault: delay before each KV-event batch is sent")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--tokenizer", h.tokenizer,
                  "The servers' tokenizer, used by their KV events, /tokenize and render endpoints: estimate (4 bytes a "
                  "token, as an EPP estimating tokens computes them) or words (a token per word: only an EPP that asks "
                  "the server, token-producer's vllm backend, matches its KV events), or a tokenizer.json (or its "
                  "directory): real token ids, a completions prompt as vLLM tokenizes it")
      ->capture_default_str();
  // Its own flag rather than CLI11's "!--no-render", whose help reads "--no-render{false}".
  cmd->add_flag_callback("--no-render", [&h] { h.render_endpoints = false; },
                         "Do not serve vLLM's render endpoints (/v1/*/render answer 404, as vLLM before them); /tokenize "
                         "stays. Default: served");
  cmd->add_option("--kv-link-gbytes-per-s", h.kv_link_gbytes_per_s, "KV transfer bandwidth from prefill servers (GB/s)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--kv-bytes-per-token", h.kv_bytes_per_token, "KV bytes per prompt token (Llama-3.1-8B bf16: 131072)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--dcgm-port", h.dcgm_port,
                  "Also run an NVIDIA DCGM exporter for the server's GPU on this port (0: a free one; with --count, "
                  "PORT, PORT+1, ...; the exporter's own is 9400): GPU utilization, power, memory derived from the "
                  "load (docs/sim.md), what llm-d's dcgm-data-source reads; -1: none")
      ->capture_default_str()->check(CLI::Range(-1, 65535));
  cmd->add_option("--dcgm-path", h.dcgm_path, "The DCGM exporter's path")->capture_default_str();
  cmd->add_option("--dcgm-pod", h.dcgm.pod,
                  "Write the exporter's Kubernetes labels (pod, namespace, container) with this Pod name (with --count: "
                  "NAME-0, NAME-1, ...), as a DaemonSet exporter does; empty: none, as a sidecar");
  cmd->add_option("--dcgm-namespace", h.dcgm.ns, "The namespace label with --dcgm-pod")->capture_default_str();
  cmd->add_option("--dcgm-hostname", h.dcgm.hostname, "The exporter's Hostname label")->capture_default_str();
  cmd->callback([o, &exit_code] { exit_code = RunSim(*o); });
}

}  // namespace eppctl
