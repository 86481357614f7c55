"""LLM-backed merging for consolidation: cluster similar memories, summarise each cluster.

Design §D3.6's consolidation worker: "cluster semantically similar memories; LLM summarises
each cluster → new semantic memory; link semantic memory to source episodic memories". This is
a :class:`~memlab.memory.consolidate.Merger`: the :class:`~memlab.memory.consolidate.Consolidator`
hands it one client's unconsolidated texts, stores each proposed fact through design §D0.10's exact
and semantic dedup, and supersedes the sources (``metadata.merged_from`` links them).

Clustering is average-linkage agglomerative clustering on cosine distance, cut at
``1 - similarity_threshold`` (deterministic for given vectors); clusters smaller than
``min_cluster_size`` are left alone. Each cluster's texts (at most ``max_cluster_size``, in
input order) fill ``prompt_template``; the generator's first non-empty line, stripped of list
markers and quotes, is the merged fact.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

DEFAULT_MERGE_PROMPT = (
    "These notes from an agent's memory describe the same thing:\n"
    "{memories}\n"
    "Write one short factual sentence that states everything they say together. "
    "Answer with the sentence only.\n"
)
"""The default prompt; ``{memories}`` becomes one ``- text`` line per memory."""

_MARKERS = re.compile(r"^\s*(?:[-*•]|\d+[.)])?\s*")


def clean_fact(text: str) -> str:
    """The first non-empty line of a generation, without list markers or enclosing quotes."""
    for line in text.splitlines():
        line = _MARKERS.sub("", line).strip().strip('"“”\'').strip()
        if line:
            return line
    return ""


class ClusterMerger:
    """Propose one merged fact per cluster of similar memories.

    Args:
        generator: Completes the merge prompt (:class:`~memlab.generate.base.Generator`).
        embedder: Embeds the texts to cluster (:class:`~memlab.embed.base.Embedder`).
        similarity_threshold: Average cosine at which texts join one cluster.
        min_cluster_size: Smallest cluster worth merging.
        max_cluster_size: At most this many texts (the first ones) go into one prompt.
        prompt_template: Prompt with a ``{memories}`` field.
        max_new_tokens: Generation budget of one merged fact.

    Attributes:
        last_clusters_: Index lists of the clusters merged on the last call.
    """

    def __init__(
        self,
        generator: Any,
        embedder: Any,
        *,
        similarity_threshold: float = 0.75,
        min_cluster_size: int = 2,
        max_cluster_size: int = 8,
        prompt_template: str = DEFAULT_MERGE_PROMPT,
        max_new_tokens: int = 96,
    ) -> None:
        self.generator = generator
        self.embedder = embedder
        self.similarity_threshold = similarity_threshold
        self.min_cluster_size = min_cluster_size
        self.max_cluster_size = max_cluster_size
        self.prompt_template = prompt_template
        self.max_new_tokens = max_new_tokens

    def _check(self) -> None:
        if not 0.0 < self.similarity_threshold <= 1.0:
            raise ValueError(
                f"ClusterMerger: similarity_threshold must lie in (0, 1], "
                f"got {self.similarity_threshold}"
            )
        if self.min_cluster_size < 2:
            raise ValueError(
                f"ClusterMerger: min_cluster_size must be at least 2, got {self.min_cluster_size}"
            )
        if self.max_cluster_size < self.min_cluster_size:
            raise ValueError(
                "ClusterMerger: max_cluster_size must be at least min_cluster_size, "
                f"got {self.max_cluster_size} < {self.min_cluster_size}"
            )
        if "{memories}" not in self.prompt_template:
            raise ValueError("ClusterMerger: prompt_template needs a {memories} field")

    def clusters(self, texts: Sequence[str]) -> list[list[int]]:
        """Index lists of the clusters of at least ``min_cluster_size`` texts, in order of
        their first member."""
        self._check()
        if len(texts) < self.min_cluster_size:
            return []
        vecs = np.asarray(self.embedder.embed(list(texts)), dtype=np.float64)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        from scipy.cluster.hierarchy import fcluster, linkage
        from scipy.spatial.distance import pdist

        # Average linkage on cosine distance (UPGMA: the tree sklearn's AgglomerativeClustering
        # builds, without its 1.4 s import). A text whose vector is zero is at distance 1 from
        # every other. Texts join while their clusters' average distance stays *below*
        # ``1 - similarity_threshold``: the cut sits one float under it.
        with np.errstate(invalid="ignore", divide="ignore"):
            distances = pdist(vecs, metric="cosine")
        distances[~np.isfinite(distances)] = 1.0
        cut = float(np.nextafter(1.0 - self.similarity_threshold, -np.inf))
        labels = fcluster(linkage(distances, method="average"), t=cut, criterion="distance")
        groups: dict[int, list[int]] = {}
        for i, label in enumerate(labels):
            groups.setdefault(int(label), []).append(i)
        found = [g for g in groups.values() if len(g) >= self.min_cluster_size]
        return sorted(found, key=lambda g: g[0])

    def merge(self, texts: Sequence[str]) -> list[tuple[str, list[int]]]:
        """One ``(merged fact, indices it merges)`` per cluster whose generation is not empty."""
        out: list[tuple[str, list[int]]] = []
        self.last_clusters_: list[list[int]] = []
        for group in self.clusters(texts):
            picks = group[: self.max_cluster_size]
            memories = "\n".join(f"- {texts[i]}" for i in picks)
            raw = self.generator.generate(
                self.prompt_template.format(memories=memories),
                max_new_tokens=self.max_new_tokens,
                temperature=0.0,
            )
            fact = clean_fact(raw)
            if fact:
                out.append((fact, picks))
                self.last_clusters_.append(picks)
        return out


class ExtractiveMerger(ClusterMerger):
    """An LLM-free merge: each cluster's distinct texts joined into one fact, in input order.

    The same clustering as :class:`ClusterMerger` (average-linkage on cosine); the "summary"
    keeps every sentence, so nothing is lost and no model is needed (replays stay offline).

    Args:
        embedder: Embeds the texts to cluster.
        similarity_threshold: Average cosine at which texts join one cluster.
        min_cluster_size: Smallest cluster worth merging.
        max_cluster_size: At most this many texts (the first ones) are joined.
        separator: Put between the joined texts.
    """

    def __init__(
        self,
        embedder: Any,
        *,
        similarity_threshold: float = 0.75,
        min_cluster_size: int = 2,
        max_cluster_size: int = 8,
        separator: str = " ",
    ) -> None:
        super().__init__(
            None,
            embedder,
            similarity_threshold=similarity_threshold,
            min_cluster_size=min_cluster_size,
            max_cluster_size=max_cluster_size,
        )
        self.separator = separator

    def merge(self, texts: Sequence[str]) -> list[tuple[str, list[int]]]:
        """One ``(joined texts, indices)`` per cluster."""
        out: list[tuple[str, list[int]]] = []
        self.last_clusters_ = []
        for group in self.clusters(texts):
            picks = group[: self.max_cluster_size]
            parts = list(dict.fromkeys(texts[i].strip() for i in picks))
            parts = [p if p.endswith((".", "!", "?")) else p + "." for p in parts]
            out.append((self.separator.join(parts), picks))
            self.last_clusters_.append(picks)
        return out
