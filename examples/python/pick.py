"""Pick an endpoint for a chat request with pyepp, and print why.

A scheduler from an EndpointPickerConfig, two model servers described by their metrics, one
OpenAI chat request: the busy server loses on queue and KV cache. Run from a checkout after
building the _pyepp target:

    PYTHONPATH=build/python:python /usr/bin/python3 examples/python/pick.py
"""

import json

import pyepp

CONFIG = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
"""


def main() -> None:
    scheduler = pyepp.Scheduler.from_yaml(CONFIG, seed=1)
    endpoints = [
        pyepp.Endpoint("10.0.0.1:8000", pyepp.EndpointMetrics.from_dict(
            {"waiting_queue_size": 4, "running_requests": 30, "kv_cache_usage": 0.7})),
        pyepp.Endpoint("10.0.0.2:8000", pyepp.EndpointMetrics.from_dict(
            {"waiting_queue_size": 0, "running_requests": 5, "kv_cache_usage": 0.2})),
    ]
    request = pyepp.Request.from_openai(
        {"model": "meta-llama/Llama-3.1-8B-Instruct",
         "messages": [{"role": "system", "content": "You are a helpful assistant."},
                      {"role": "user", "content": "Which endpoint will serve me?"}]},
        path="/v1/chat/completions")
    result = scheduler.pick(request, endpoints)
    print(f"{result.status} -> {result.endpoint}")
    print(result.explain_text())
    print(json.dumps(result.explain()["decision"], indent=2))
    scheduler.release(result)


if __name__ == "__main__":
    main()
