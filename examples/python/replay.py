"""Compare routing policies on a shared-prefix workload with pyepp.replay, in virtual time.

Sixteen system prompts of 2,000 tokens, each followed by 32 short questions, arrive at 40
requests per second at four simulated model servers whose KV caches hold 12,000 tokens each:
not every system prompt fits everywhere, so where a request goes decides whether its prefix is
already cached. Round-robin ignores that; gie-default (queue, KV-cache and prefix scorers) and
sglang-cache-aware route for cache hits. Everything runs in simulated time, in well under a
second of real time.

With matplotlib installed, the TTFT distribution and the block hit rate over time are saved to
a PNG (the path given as the first argument, default replay.png); without it, the results
table is printed. Run from a checkout after building the _pyepp target:

    PYTHONPATH=build/python:python /usr/bin/python3 examples/python/replay.py [replay.png]
"""

import sys

import pyepp

POLICIES = ["round-robin", "gie-default", "sglang-cache-aware"]

workload = pyepp.SharedPrefix(groups=16, prompts_per_group=32, system_len=2000, question_len=100, output_len=64,
                              rate=40, arrivals="poisson")
report = pyepp.replay(workload, POLICIES, servers=4, server_kv_tokens=12000,
                      sim={"prefill_tokens_per_s": 10000}, seed=7)

trace = report["trace"]
print(f"{trace['requests']} requests over {trace['duration_s']:.1f} s; block hit rate at best "
      f"{trace['upper_bound_block_hit_rate']:.3f}")
for p in report["policies"]:
    print(f"{p['name']:>20}: block hit rate {p['block_hit_rate']:.3f}, TTFT p50 {p['ttft_s']['p50'] * 1000:.0f} ms, "
          f"p99 {p['ttft_s']['p99'] * 1000:.0f} ms")

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print()
    print(pyepp.replay_text(report), end="")
    sys.exit(0)

figure, (ttft, hits) = plt.subplots(1, 2, figsize=(11, 4))
for p in report["policies"]:
    samples = p["ttft_samples_s"]  # sorted
    ttft.step(samples, [(i + 1) / len(samples) for i in range(len(samples))], where="post", label=p["name"])
    timeline = p["hit_rate_timeline"]
    hits.plot([trace["duration_s"] * (i + 0.5) / len(timeline) for i in range(len(timeline))], timeline,
              label=p["name"])
ttft.set(xscale="log", xlabel="time to first token (s, simulated)", ylabel="fraction of requests", title="TTFT CDF")
hits.axhline(trace["upper_bound_block_hit_rate"], color="grey", linestyle="--", label="upper bound")
hits.set(xlabel="arrival time (s, simulated)", ylabel="block hit rate", ylim=(0, 1), title="Prefix-cache hits over time")
ttft.legend()
hits.legend(loc="lower right")
figure.tight_layout()
out = sys.argv[1] if len(sys.argv) > 1 else "replay.png"
figure.savefig(out, dpi=120)
print(f"plots saved to {out}")
