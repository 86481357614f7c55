"""Relevance judging of recordings: pooling runs, durable judgments, agreement between judges."""
