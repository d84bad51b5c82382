#!/usr/bin/env python3
"""Writes shared-prefix.jsonl: N system prompts x M user questions, one chat request per line.

Every line is a capture envelope ({"path", "headers", "body"}) as `eppctl pick` and
`eppctl explain --history` read them. Each system prompt is a long (~1,500 character) policy text
that starts with its own company name, so two prompts share no prefix block while the M requests
of one prompt share all of theirs: a prefix-aware scheduler should see a prefix match ratio close
to 1 once each prompt has been routed once. The order is a fixed-seed shuffle, so the output is
byte-for-byte the same on every run and every Python 3.

    python3 examples/traces/make_shared_prefix.py            # rewrites shared-prefix.jsonl
    python3 examples/traces/make_shared_prefix.py -o - -n 3 -m 4   # a small trace on stdout

System prompt 0 (Northwind Outfitters) is also the system prompt of
examples/requests/chat-capture.json, so `eppctl explain --history` with this trace warms the
prefix of that request.
"""
import argparse
import json
import os
import random
import sys

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

COMPANIES = [
    ("Northwind Outfitters", "outdoor clothing and camping gear"),
    ("Contoso Telecom", "mobile and home broadband plans"),
    ("Fabrikam Bank", "current accounts, savings and small-business loans"),
    ("Tailspin Air", "regional flights and travel insurance"),
    ("Litware Cloud", "managed databases and object storage"),
    ("Adventure Works Cycles", "road bikes, e-bikes and servicing"),
    ("Wide World Importers", "wholesale kitchenware for restaurants"),
    ("Proseware Health", "telehealth appointments and prescription refills"),
    ("Coho Winery", "wine subscriptions and vineyard tours"),
    ("Lucerne Publishing", "textbooks, e-books and course licences"),
    ("Margie's Travel", "package holidays and city breaks"),
    ("Trey Research", "laboratory equipment rental"),
]

POLICY = (
    "Answer in the customer's language, in at most five short paragraphs, and never invent order "
    "numbers, prices, delivery dates or policy details: when you do not know, say so and offer to "
    "open a ticket. Before discussing an account, ask for the customer's reference number and the "
    "postcode on file; never ask for passwords, full card numbers or one-time codes, and if a "
    "customer volunteers them, tell them to change them and do not repeat them back. Refunds: "
    "unused items may be returned within 30 days with proof of purchase; faulty items within one "
    "year; custom or personalised items only when faulty. Shipping: standard delivery takes three "
    "to five working days, express one to two; remote areas may take longer and this is not a "
    "fault. Escalation: hand over to a human agent when the customer asks for one twice, mentions "
    "legal action, a safety issue or a vulnerable person, or when the same problem has been "
    "reported three times. Tone: friendly, direct, no marketing language, no emojis, no "
    "exclamation marks. Formatting: plain text, numbered steps for procedures, and a one-line "
    "summary at the end starting with 'In short:'. Privacy: do not reveal information about other "
    "customers, staff names or internal systems, and do not speculate about the causes of outages. "
    "Always close by asking whether anything else is needed."
)

QUESTIONS = [
    "Where is my order? It was due yesterday.",
    "How do I return an item I bought last week?",
    "Can I change the delivery address after ordering?",
    "The product arrived damaged. What should I do?",
    "Do you price match other retailers?",
    "How long does a refund take to reach my card?",
    "I was charged twice for the same order.",
    "Can I cancel my subscription online?",
    "What is your warranty on replacement parts?",
    "Is there a student discount?",
    "How do I update my email address?",
    "My discount code does not work at checkout.",
    "Can I speak to a human, please?",
    "Do you deliver to the Channel Islands?",
    "I never received the confirmation email.",
    "Can I split a payment between two cards?",
    "What are your opening hours on public holidays?",
    "The tracking link says 'label created' for a week.",
    "How do I close my account?",
    "Can I exchange an item for a different size?",
    "Why was my payment declined?",
    "Is my personal data shared with partners?",
    "Can I add an item to an order already placed?",
    "How do I report a safety problem with a product?",
    "Do gift cards expire?",
    "What happens if I miss the delivery?",
    "Can I get an invoice with my company's VAT number?",
    "How do I reset the password on the app?",
    "Is express delivery available on weekends?",
    "Can you hold an order until I am back from holiday?",
]


def system_prompt(i):
    company, product = COMPANIES[i]
    return (f"{company} customer support assistant. You help customers of {company}, which sells "
            f"{product}, with orders, accounts, deliveries, returns and complaints. " + POLICY)


def lines(n, m, seed):
    pairs = [(s, q) for s in range(n) for q in range(m)]
    random.Random(seed).shuffle(pairs)
    for k, (s, q) in enumerate(pairs):
        body = {"model": MODEL, "max_tokens": 256,
                "messages": [{"role": "system", "content": system_prompt(s)},
                             {"role": "user", "content": QUESTIONS[q]}]}
        yield {"path": "/v1/chat/completions",
               "headers": {"x-request-id": f"sp-{k:04d}", "x-system-prompt": str(s)},
               "body": body}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--system-prompts", type=int, default=8, help="distinct system prompts (max %d)" % len(COMPANIES))
    ap.add_argument("-m", "--questions", type=int, default=25, help="questions per system prompt (max %d)" % len(QUESTIONS))
    ap.add_argument("--seed", type=int, default=42, help="shuffle seed")
    ap.add_argument("-o", "--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "shared-prefix.jsonl"),
                    help="output file ('-' = stdout)")
    a = ap.parse_args()
    if not (1 <= a.system_prompts <= len(COMPANIES) and 1 <= a.questions <= len(QUESTIONS)):
        ap.error("-n must be in 1..%d and -m in 1..%d" % (len(COMPANIES), len(QUESTIONS)))
    text = "".join(json.dumps(l, separators=(",", ":"), ensure_ascii=False) + "\n"
                   for l in lines(a.system_prompts, a.questions, a.seed))
    if a.output == "-":
        sys.stdout.write(text)
    else:
        with open(a.output, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)


if __name__ == "__main__":
    main()
