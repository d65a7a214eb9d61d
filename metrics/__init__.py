"""Metrics: turn replay records into measurements (DESIGN §7).

One module per job:
- `grading`: probe presence (no model) and answered grading (exact, contains, regex, set F1,
  number; judge with strict and lenient rubrics, unscored without a judge);
- `integrity`: tool call/result pairing checked against the wire rules of OpenAI Chat
  Completions, OpenAI Responses and Anthropic Messages;
- `accuracy`: the strategies' own token estimates against true counts, premature and missed
  triggers, overflows;
- `cost`: dollars from the profile's prices, cached-token prices and summarizer calls included;
- `stats`: bootstrap intervals and McNemar's paired test;
- `measure`: the per-cell tables the runner stores (requests, compactions, probes);
- `aggregate`: the summary table per (scenario, strategy, profile) and paired comparisons.
"""
