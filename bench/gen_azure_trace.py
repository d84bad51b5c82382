#!/usr/bin/env python3
"""Writes an Azure-LLM-inference-style CSV trace (TIMESTAMP,ContextTokens,GeneratedTokens) for
`eppctl replay --trace-format azure`: Poisson arrivals at --rate for --duration seconds, context
and generated tokens log-normal around --context / --generated (Azure's 2023 code trace has a
median context near 2,000 tokens and short outputs; the conversation trace ~1,000 and ~200).
Deterministic for --seed. Synthetic: no request shares a prefix with another, as in the real
traces, which carry none."""
import argparse
import datetime
import math
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--context", type=int, default=2000)
    ap.add_argument("--generated", type=int, default=30)
    ap.add_argument("--sigma", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    t = 0.0
    start = datetime.datetime(2023, 11, 16, 18, 0, 0)
    print("TIMESTAMP,ContextTokens,GeneratedTokens")
    while True:
        t += rng.expovariate(a.rate)
        if t > a.duration:
            break
        ctx = max(1, int(rng.lognormvariate(math.log(a.context), a.sigma)))
        gen = max(1, int(rng.lognormvariate(math.log(a.generated), a.sigma)))
        ts = start + datetime.timedelta(seconds=t)
        print("%s%s,%d,%d" % (ts.strftime("%Y-%m-%d %H:%M:%S"), (".%07d" % (ts.microsecond * 10)), ctx, gen))


if __name__ == "__main__":
    main()
