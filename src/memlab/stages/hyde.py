"""HyDE: Hypothetical Document Embeddings (Gao, Ma, Lin & Callan, "Precise Zero-Shot Dense
Retrieval without Relevance Labels", ACL 2023, arXiv:2212.10496, 2022).

A generator writes ``n_documents`` passages that *would* answer the query; the query vector
becomes the mean of their embeddings and, with ``include_query``, the query's own embedding
(the paper's ``v = 1/(N+1) · [Σ f(d_i) + f(q)]``), L2-normalised here because the store searches
by cosine. Design §D2.1 runs HyDE "before the query ever touches the vector store". The default
prompt is the paper's web-search template; its reference code samples 8 documents at temperature
0.7, the defaults here are 4 shorter ones so that small local models stay quick.

Document ``i`` is generated with ``seed + i``, so a recorded generator replays the same request
every time (temperature > 0 is reproducible with seeds). :meth:`HyDE.prompts` lists the
``(prompt, seed)`` requests of a query so that a recording command can generate them ahead of an
evaluation. Blank generations are skipped. The stage sets ``ctx.query_vector`` (read by
``dense`` through ``ctx.vector()``) and passes the candidates through unchanged.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.stages.base import QueryContext, Stage, register_stage
from memlab.stages.constraints import Integral, Interval, Predicate, Real


@register_stage("hyde")
class HyDE(Stage):
    """Replace the query vector by the normalised mean of hypothetical-document embeddings.

    Args:
        n_documents: How many hypothetical documents to generate.
        prompt_template: Prompt with a ``{query}`` placeholder.
        max_new_tokens: Generation length of each document.
        temperature: Sampling temperature.
        include_query: Average the query's own embedding in as well.
        seed: Seed of the first document (document ``i`` uses ``seed + i``).
    """

    cacheable = True

    @property
    def needs_generator(self) -> bool:
        """HyDE asks ``ctx.generator`` for its hypothetical documents."""
        return True

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "n_documents": [Interval(Integral, 0, None, closed="left")],
        "prompt_template": [Predicate(str, lambda v: "{query}" in v, "a str containing {query}")],
        "max_new_tokens": [Interval(Integral, 1, None, closed="left")],
        "temperature": [Interval(Real, 0, None, closed="left")],
        "include_query": [bool],
        "seed": [Interval(Integral, 0, 2**32 - 1, closed="both")],
    }

    def __init__(
        self,
        n_documents: int = 4,
        prompt_template: str = (
            "Please write a passage to answer the question.\nQuestion: {query}\nPassage:"
        ),
        max_new_tokens: int = 96,
        temperature: float = 0.7,
        include_query: bool = True,
        seed: int = 0,
    ) -> None:
        self.n_documents = n_documents
        self.prompt_template = prompt_template
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.include_query = include_query
        self.seed = seed

    def prompts(self, query_text: str) -> list[tuple[str, int]]:
        """The ``(prompt, seed)`` generation requests this stage makes for ``query_text``."""
        if "{query}" not in self.prompt_template:
            raise ValueError("hyde: prompt_template must contain the placeholder {query}")
        prompt = self.prompt_template.replace("{query}", query_text)
        return [(prompt, self.seed + i) for i in range(self.n_documents)]

    def documents(self, ctx: QueryContext) -> list[str]:
        """Generate (or fetch from ``ctx.cache``) the hypothetical documents of ``ctx.text``."""
        gen = ctx.generator
        if gen is None:
            raise ValueError(
                "hyde: the query context has no generator; give the experiment one "
                "(a model, or a RecordedGenerator replaying recorded generations)"
            )
        model = getattr(gen, "model_id", type(gen).__name__)
        docs = []
        for prompt, seed in self.prompts(ctx.text):
            key = ("hyde", model, prompt, self.max_new_tokens, self.temperature, seed)
            if key not in ctx.cache:
                ctx.cache[key] = gen.generate(
                    prompt,
                    max_new_tokens=self.max_new_tokens,
                    temperature=self.temperature,
                    seed=seed,
                )
            docs.append(ctx.cache[key])
        return docs

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        docs = [d for d in self.documents(ctx) if d.strip()]
        texts = docs + ([ctx.text] if self.include_query else [])
        ctx.trace["hyde_documents"] = docs
        if not texts:
            raise ValueError(
                f"hyde: query {ctx.qid!r}: every generated document is blank and "
                "include_query is false, so there is nothing to embed"
            )
        mean = ctx.embed(texts).astype(np.float64).mean(axis=0)
        norm = float(np.linalg.norm(mean))
        ctx.query_vector = (mean / norm if norm > 0 else mean).astype(np.float32)
        return frame
