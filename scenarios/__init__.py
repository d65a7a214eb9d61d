"""Scenarios: importers of recorded transcripts, the synthetic suite and probe mining.

`BUILTIN` is the table of built-in importers the registry (`compaction_bench.registry`) serves
without any install metadata: format -> "module:Class" inside this package.
"""

BUILTIN: dict[str, str] = {
    "canonical": "canonical:CanonicalImporter",
    "codex": "codex_rollout:CodexRolloutImporter",
    "pi": "pi_session:PiSessionImporter",
    "opencode": "opencode_export:OpenCodeImporter",
    "claude-code": "claude_code:ClaudeCodeImporter",
    "mini-swe-agent": "mini_swe_agent:MiniSweAgentImporter",
    "swe-agent": "swe_agent:SweAgentImporter",
    "openhands": "openhands:OpenHandsImporter",
    "aider": "aider:AiderImporter",
    "openai-messages": "openai_messages:OpenAIMessagesImporter",
    "hf-dataset": "hf_dataset:HFDatasetImporter",
}
