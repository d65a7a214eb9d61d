"""Compaction strategies: the agents' rules reimplemented, and the baselines.

`BUILTIN` is the table of built-in strategies the registry (`compaction_bench.registry`) serves
without any install metadata: id -> "module:Class" inside this package, imported on first use.
"""

BUILTIN: dict[str, str] = {
    "none": "baselines:NoCompaction",
    "truncate": "baselines:Truncate",
    "observation-masking": "baselines:ObservationMasking",
    "codex-local": "codex:CodexLocal",
    "codex-remote-v1": "codex:CodexRemoteV1",
    "codex-remote-v2": "codex:CodexRemoteV2",
    "codex-token-budget": "codex:CodexTokenBudget",
    "pi": "pi:Pi",
    "pi-2026-03": "pi:Pi202603",
    "pi-2025-12": "pi:Pi202512",
    "opencode-v1": "opencode:OpenCodeV1",
    "opencode-v2": "opencode:OpenCodeV2",
    "claude-code": "claude_code:ClaudeCode",
    "claude-code-2.1": "claude_code:ClaudeCode21",
    "gemini-cli": "gemini_cli:GeminiCli",
    "openhands": "openhands:OpenHands",
    "openhands-v0": "openhands:OpenHandsV0",
    "aider": "aider:Aider",
    "anthropic-clear-tool-uses": "anthropic_context:ClearToolUses",
    "anthropic-compact": "anthropic_context:ServerCompact",
    "hybrid": "hybrid:Hybrid",
}
