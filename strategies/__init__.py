"""Compaction strategies: one module per family, shared components, and prompt templates."""
