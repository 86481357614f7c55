"""Evaluation: replays, metrics, experiments, sweeps and tuning.

The package itself imports nothing heavy: the command line reads :data:`DEFAULT_PIPELINES` (to
size the worker pool it starts early) before it imports the modules that do the work.
"""

DEFAULT_PIPELINES: tuple[str, ...] = (
    "bm25",
    "dense",
    "graph",
    "rrf",
    "hybrid",
    "conversational",
    "full",
)
"""The pipelines ``memlab eval`` compares when none is named."""
