"""Agreement between judges: Cohen's kappa (Cohen 1960) on the pairs both judged.

Kappa is :func:`sklearn.metrics.cohen_kappa_score`: ``(p_o - p_e) / (1 - p_e)`` with ``p_o`` the
observed agreement and ``p_e`` the agreement expected from each judge's grade frequencies.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterable

import polars as pl

from memlab.judge.judgments import Judgment, latest


def agreement(judgments: Iterable[Judgment], *, source: str = "human") -> pl.DataFrame:
    """Cohen's kappa for every pair of judges of ``source`` (``"all"`` for every judge).

    Returns:
        ``judge_a, judge_b, n`` (pairs both judged), ``agreement`` (share of equal grades),
        ``kappa`` (NaN when fewer than two items or when both judges used a single grade),
        sorted by judge names.
    """
    grades: dict[str, dict[tuple[str, str], int]] = {}
    for j in latest(judgments):
        if source == "all" or j.source == source:
            grades.setdefault(j.judge, {})[(j.qid, j.mem_id)] = j.grade
    rows = []
    for a, b in itertools.combinations(sorted(grades), 2):
        common = sorted(set(grades[a]) & set(grades[b]))
        x = [grades[a][k] for k in common]
        y = [grades[b][k] for k in common]
        observed = sum(u == v for u, v in zip(x, y, strict=True)) / len(x) if x else math.nan
        kappa = math.nan
        if len(x) >= 2 and len(set(x) | set(y)) > 1:
            from sklearn.metrics import cohen_kappa_score  # 1 s to import: only when needed

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                kappa = float(cohen_kappa_score(x, y))
        rows.append((a, b, len(x), observed, kappa))
    schema = {
        "judge_a": pl.String,
        "judge_b": pl.String,
        "n": pl.Int64,
        "agreement": pl.Float64,
        "kappa": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")
