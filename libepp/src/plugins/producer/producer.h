// Private: the data producers (prefix_producer.cc) and the request-header processors
// (session_id_producer.cc, agent_identity.cc: attributes read from the request's headers).
#pragma once

#include <string>
#include <string_view>

#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kApproxPrefixProducerType = "approx-prefix-cache-producer";

PluginOr CreateApproxPrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema ApproxPrefixProducerSchema();

inline constexpr std::string_view kPrecisePrefixProducerType = "precise-prefix-cache-producer";
inline constexpr std::string_view kPrecisePrefixScorerType = "precise-prefix-cache-scorer";  // deprecated wrapper
inline constexpr std::string_view kTokenProducerType = "token-producer";
inline constexpr std::string_view kTokenizerType = "tokenizer";  // token-producer's legacy name
inline constexpr std::string_view kEndpointNotificationSourceType = "endpoint-notification-source";

PluginOr CreatePrecisePrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePrecisePrefixScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateTokenProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateEndpointNotificationSource(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema PrecisePrefixProducerSchema();  // precise-prefix-cache-scorer's too
PluginSchema TokenProducerSchema();

inline constexpr std::string_view kMultiClusterApproxPrefixProducerType = "multicluster-approx-prefix-cache-producer";
inline constexpr std::string_view kSessionIdProducerType = "session-id-producer";
inline constexpr std::string_view kAgentIdentityType = "agent-identity";
// The data type of session-id-producer's attribute; its key is "SessionIDDataKey/<plugin name>".
inline constexpr std::string_view kSessionIdAttributeType = "SessionIDDataKey";

PluginOr CreateMultiClusterApproxPrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateSessionIdProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateAgentIdentity(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema SessionIdProducerSchema();
PluginSchema AgentIdentitySchema();

// llm-d Router's other request-control data producers (mm_embeddings.cc, burst_prefix_producer.cc,
// p2p_source_producer.cc). mm-embeddings-cache-scorer lives with its producer: it only reads what
// the producer leaves in SchedulingContext::encoder_cache.
inline constexpr std::string_view kMmEmbeddingsCacheProducerType = "mm-embeddings-cache-producer";
inline constexpr std::string_view kMmEmbeddingsCacheScorerType = "mm-embeddings-cache-scorer";
inline constexpr std::string_view kBurstPrefixProducerType = "burst-prefix-cache-producer";
inline constexpr std::string_view kP2pSourceProducerType = "p2p-source-producer";
// The header p2p-source-producer sets: the peer llm-d's routing sidecar pulls KV blocks from.
inline constexpr std::string_view kKvCacheSourceHeader = "x-kv-cache-source-host-port";

PluginOr CreateMmEmbeddingsCacheProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateMmEmbeddingsCacheScorer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateBurstPrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateP2pSourceProducer(const std::string& name, const Params& params, const PluginContext& ctx);
PluginSchema MmEmbeddingsCacheProducerSchema();
PluginSchema MmEmbeddingsCacheScorerSchema();
PluginSchema BurstPrefixProducerSchema();
PluginSchema P2pSourceProducerSchema();
// Media items an mm-embeddings-cache-producer remembers for `endpoint` (0 for another plugin).
size_t MmEmbeddingsCacheEntries(const Plugin& producer, std::string_view endpoint);

}  // namespace epp::plugins
