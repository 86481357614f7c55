"""Paired comparisons of per-query metric values between a baseline and other pipelines.

Significance tests (two-sided, paired on query):

* ``t``: paired t-test (Student 1908), :func:`scipy.stats.ttest_rel`.
* ``wilcoxon``: Wilcoxon signed-rank test (Wilcoxon 1945), :func:`scipy.stats.wilcoxon` with
  ``zero_method="wilcox"`` (zero differences are dropped).
* ``permutation``: paired sign-flip randomisation test on the mean difference (Fisher 1935;
  Smucker, Allan and Carterette, "A comparison of statistical significance tests for
  information retrieval evaluation", CIKM 2007). Exact over all ``2**n`` sign patterns when
  ``2**n <= n_resamples``, otherwise ``n_resamples`` random patterns from
  ``numpy.random.default_rng(seed)`` with the ``(1 + hits) / (1 + n_resamples)`` estimate
  (Phipson and Smyth 2010).

Every test returns p = 1.0 when all paired differences are zero.

Multiple-comparison corrections: ``holm`` (Holm 1979), ``bonferroni``, ``fdr_bh`` (Benjamini
and Hochberg 1995) and ``none``.
"""

from __future__ import annotations

import collections
import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import polars as pl

from memlab.eval.metrics import higher_is_better
from memlab.registry import Registry


def _scipy_stats() -> Any:
    """``scipy.stats``, imported on the first test (it costs a second to import, and a run of
    one pipeline tests nothing)."""
    from scipy import stats

    return stats


def load_tests() -> None:
    """Import what the paired tests need (``scipy.stats``, about half a second) ahead of the
    first test: a run hands it to its executor, which calls it while this process waits for
    the workers (:meth:`~memlab.eval.executor.Executor.map`'s ``meanwhile``)."""
    _scipy_stats()


_PER_QUERY_KEYS = ("pipeline", "qid", "metric")


class PairedTest(Protocol):
    """A two-sided paired test on non-degenerate differences."""

    def __call__(self, a: np.ndarray, b: np.ndarray, *, n_resamples: int, seed: int) -> float:
        """Return the p-value for paired samples ``a`` and ``b`` of equal length."""
        ...


class Correction(Protocol):
    """A multiple-comparison correction of finite p-values."""

    def __call__(self, pvalues: np.ndarray) -> np.ndarray:
        """Return adjusted p-values, in the input order."""
        ...


_TESTS: Registry[PairedTest] = Registry("test")
_CORRECTIONS: Registry[Correction] = Registry("correction")

register_test = _TESTS.register
"""Register a paired test under ``name`` (decorator; ``ValueError`` if the name is taken)."""

register_correction = _CORRECTIONS.register
"""Register a multiple-comparison correction under ``name`` (decorator; ``ValueError`` if the
name is taken)."""


def available_tests() -> tuple[str, ...]:
    """Names of the registered paired tests, in registration order."""
    return tuple(_TESTS)


def available_corrections() -> tuple[str, ...]:
    """Names of the registered corrections, in registration order."""
    return tuple(_CORRECTIONS)


# --------------------------------------------------------------------------- paired tests


@register_test("t")
def _t_test(a: np.ndarray, b: np.ndarray, *, n_resamples: int, seed: int) -> float:
    """Paired t-test; NaN (undefined) with a single pair, and when every difference is the same
    non-zero value: the differences then have no variance, the t statistic is infinite, and
    scipy's p of 0 would call two queries that moved alike "significant". The Wilcoxon and
    permutation tests still judge such a pair."""
    d = a - b
    if d.size > 1 and np.all(d == d[0]):
        return float("nan")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(_scipy_stats().ttest_rel(a, b).pvalue)


@register_test("wilcoxon")
def _wilcoxon(a: np.ndarray, b: np.ndarray, *, n_resamples: int, seed: int) -> float:
    """Wilcoxon signed-rank test, ``zero_method="wilcox"``, scipy's default method choice."""
    exact = _wilcoxon_sign_flips(a - b)
    if exact is not None:
        return exact
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return float(_scipy_stats().wilcoxon(a, b, zero_method="wilcox").pvalue)


WILCOXON_FLIP_LIMIT = 13
"""scipy's ``wilcoxon(method="auto")`` enumerates every sign pattern for up to this many pairs
when there are ties or zeros (2**13 < its 9,999 resamples)."""


def _wilcoxon_sign_flips(d: np.ndarray) -> float | None:
    """The p-value scipy's ``wilcoxon(method="auto")`` gets from its exhaustive permutation
    test (ties or zero differences, at most :data:`WILCOXON_FLIP_LIMIT` pairs), computed on
    all ``2**n`` sign patterns at once; ``None`` when scipy would use another method.

    Flipping signs leaves ``|d|`` and so the ranks unchanged: the null statistic of a pattern
    is the sum of the ranks it makes positive. Ranks are multiples of 1/2, so every sum is
    exact and the counts, and the p-value, are scipy's (its two-sided rule and tolerance
    ``100 eps |observed|`` included).
    """
    n = d.size
    nonzero = d != 0
    magnitude = np.abs(d[nonzero])
    ties = np.unique(magnitude).size < magnitude.size
    if n > WILCOXON_FLIP_LIMIT or not (ties or not nonzero.all()):
        return None
    ranks = np.zeros(n)
    ranks[nonzero] = _scipy_stats().rankdata(magnitude)
    positive = d > 0
    observed = float(ranks[positive].sum())
    flips = ((np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)) & 1) == 1
    null = ((positive[None, :] ^ flips) & nonzero[None, :]).astype(np.float64) @ ranks
    gamma = abs(np.finfo(np.float64).eps * 100 * observed)
    less = np.count_nonzero(null <= observed + gamma) / 2**n
    greater = np.count_nonzero(null >= observed - gamma) / 2**n
    return float(np.clip(min(less, greater) * 2, 0.0, 1.0))


def _sign_chunks(n: int, n_resamples: int, seed: int) -> Iterator[np.ndarray]:
    """The random sign matrices of the sign-flip test, in chunks of about a million signs.

    They depend on ``(n, n_resamples, seed)`` only, so every test on the same number of
    queries draws the same ones: the last few sets (up to :data:`_SIGN_CACHE_BYTES` each) are
    kept, so a report's hundreds of tests (pipelines × metrics × tags) draw them once.
    """
    key = (n, n_resamples, seed)
    hit = _SIGN_CACHE.get(key)
    if hit is not None:
        _SIGN_CACHE.move_to_end(key)
        yield from hit
        return
    keep = n * n_resamples * 8 <= _SIGN_CACHE_BYTES
    chunks: list[np.ndarray] = []
    rng = np.random.default_rng(seed)
    chunk = max(1, 1_000_000 // n)
    done = 0
    while done < n_resamples:
        size = min(chunk, n_resamples - done)
        signs = np.where(rng.random((size, n)) < 0.5, -1.0, 1.0)
        if keep:
            signs.flags.writeable = False
            chunks.append(signs)
        yield signs
        done += size
    if keep:
        _SIGN_CACHE[key] = tuple(chunks)
        while len(_SIGN_CACHE) > _SIGN_CACHE_SIZE:
            _SIGN_CACHE.popitem(last=False)


#: Sign matrices kept by :func:`_sign_chunks` (most recent last), at most this many sets of
#: at most this many bytes each.
_SIGN_CACHE: collections.OrderedDict[tuple[int, int, int], tuple[np.ndarray, ...]] = (
    collections.OrderedDict()
)
_SIGN_CACHE_SIZE = 4
_SIGN_CACHE_BYTES = 128 * 2**20


@register_test("permutation")
def _permutation(a: np.ndarray, b: np.ndarray, *, n_resamples: int, seed: int) -> float:
    """Sign-flip randomisation test on the sum of differences (two-sided)."""
    d = a - b
    n = d.size
    observed = abs(float(d.sum()))
    threshold = observed * (1.0 - 1e-9)
    if n < 63 and 2**n <= n_resamples:
        bits = (np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)) & 1
        sums = (1.0 - 2.0 * bits) @ d
        return float(np.count_nonzero(np.abs(sums) >= threshold) / 2**n)
    hits = 0
    for signs in _sign_chunks(n, n_resamples, seed):
        hits += int(np.count_nonzero(np.abs(signs @ d) >= threshold))
    return (1.0 + hits) / (1.0 + n_resamples)


def _as_vector(x: object, name: str) -> np.ndarray:
    array = np.asarray(x, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"paired_test: field {name!r} must be one-dimensional, got {array.shape}")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"paired_test: field {name!r}, index {bad[0]}: not finite")
    return array


def paired_test(
    a: np.ndarray,
    b: np.ndarray,
    *,
    test: str = "t",
    n_resamples: int = 10_000,
    seed: int = 0,
) -> float:
    """Two-sided p-value of a paired test between per-query values ``a`` and ``b``.

    Args:
        a: Values of one system, one per query.
        b: Values of the other system on the same queries, same order.
        test: A registered test name: ``"t"``, ``"wilcoxon"`` or ``"permutation"``.
        n_resamples: Random sign patterns of the permutation test (exact enumeration when
            ``2**n <= n_resamples``).
        seed: Seed of ``numpy.random.default_rng`` for the permutation test.

    Returns:
        The p-value; 1.0 when every difference is zero; NaN when the test is undefined (the
        t-test with a single pair, or with every difference the same non-zero value).

    Raises:
        ValueError: On an unknown test, arrays of different length, empty or non-finite input,
            or ``n_resamples < 1``.
    """
    if test not in _TESTS:
        raise ValueError(f"unknown test {test!r}; known tests: {', '.join(_TESTS)}")
    if n_resamples < 1:
        raise ValueError(f"paired_test: field 'n_resamples' must be >= 1, got {n_resamples}")
    x, y = _as_vector(a, "a"), _as_vector(b, "b")
    if x.size != y.size:
        raise ValueError(f"paired_test: 'a' has {x.size} values but 'b' has {y.size}")
    if x.size == 0:
        raise ValueError("paired_test: no pairs")
    if np.array_equal(x, y):
        return 1.0
    return _TESTS[test](x, y, n_resamples=n_resamples, seed=seed)


# --------------------------------------------------------------------------- corrections


@register_correction("none")
def _none(p: np.ndarray) -> np.ndarray:
    """No correction."""
    return p.copy()


@register_correction("bonferroni")
def _bonferroni(p: np.ndarray) -> np.ndarray:
    """Bonferroni: ``min(1, m * p)``."""
    return np.minimum(1.0, p.size * p)


@register_correction("holm")
def _holm(p: np.ndarray) -> np.ndarray:
    """Holm step-down: ``max_{j <= i} min(1, (m - j + 1) * p_(j))`` over ascending p."""
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(1.0, stepped)
    return out


@register_correction("fdr_bh")
def _fdr_bh(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg step-up: ``min_{j >= i} min(1, m * p_(j) / j)`` over ascending p."""
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = m * p[order] / np.arange(1, m + 1)
    stepped = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(1.0, stepped)
    return out


def adjustment_phrase(correction: str, *, title: bool = False) -> str:
    """How a report names p-values after ``correction``: ``"unadjusted"`` for ``"none"``,
    else ``"holm-adjusted"`` (``"Holm-adjusted"`` with ``title``)."""
    if correction == "none":
        return "unadjusted"
    return f"{correction.title() if title else correction}-adjusted"


def correct_pvalues(pvalues: Sequence[float] | np.ndarray, method: str = "holm") -> np.ndarray:
    """Adjust a family of p-values for multiple comparisons.

    NaN entries stay NaN and are left out of the family (``m`` counts finite p-values only).

    Args:
        pvalues: P-values in [0, 1] (or NaN).
        method: ``"holm"``, ``"bonferroni"``, ``"fdr_bh"`` or ``"none"``.

    Returns:
        Adjusted p-values (float64), in the input order.

    Raises:
        ValueError: On an unknown method, a non-1-D input or a value outside [0, 1].
    """
    if method not in _CORRECTIONS:
        raise ValueError(f"unknown correction {method!r}; known: {', '.join(_CORRECTIONS)}")
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"correct_pvalues: field 'pvalues' must be one-dimensional: {p.shape}")
    finite = ~np.isnan(p)
    bad = np.flatnonzero(finite & ((p < 0.0) | (p > 1.0)))
    if bad.size:
        raise ValueError(f"correct_pvalues: field 'pvalues', index {bad[0]}: {p[bad[0]]} ∉ [0, 1]")
    out = np.full(p.size, np.nan)
    if finite.any():
        out[finite] = _CORRECTIONS[method](p[finite])
    return out


# --------------------------------------------------------------------------- frames


def _check_per_query(per_query: object, *, pipeline: bool = True) -> pl.DataFrame:
    if not isinstance(per_query, pl.DataFrame):
        raise TypeError(f"per_query must be a polars DataFrame, got {type(per_query).__name__}")
    keys = [k for k in _PER_QUERY_KEYS if pipeline or k != "pipeline"]
    for column in (*keys, "value"):
        if column not in per_query.columns:
            raise ValueError(f"per_query: missing column {column!r} (has {per_query.columns})")
    if not per_query.schema["value"].is_numeric():
        raise TypeError(
            f"per_query: field 'value' must be numeric, got {per_query.schema['value']}"
        )
    frame = per_query.with_row_index("_row").with_columns(
        [pl.col(k).cast(pl.String) for k in keys] + [pl.col("value").cast(pl.Float64)]
    )
    for column in (*keys, "value"):
        nulls = frame.filter(pl.col(column).is_null())
        if not nulls.is_empty():
            raise ValueError(f"per_query: row {nulls['_row'][0]}, field {column!r}: null value")
    infinite = frame.filter(~pl.col("value").is_finite())
    if not infinite.is_empty():
        raise ValueError(f"per_query: row {infinite['_row'][0]}, field 'value': not finite")
    repeated = frame.filter(~pl.struct(keys).is_first_distinct())
    if not repeated.is_empty():
        row = repeated.row(0, named=True)
        key = ", ".join(f"{k}={row[k]!r}" for k in keys)
        raise ValueError(f"per_query: row {row['_row']}, fields {keys}: duplicate ({key})")
    return frame.drop("_row")


def _paired(frame: pl.DataFrame, baseline: str, metric: str | None = None) -> pl.DataFrame:
    """Rows ``pipeline, metric, qid, baseline_value, value`` on qids present for both."""
    base = frame.filter(pl.col("pipeline") == baseline).select(
        "metric", "qid", baseline_value="value"
    )
    others = frame.filter(pl.col("pipeline") != baseline)
    if metric is not None:
        base = base.filter(pl.col("metric") == metric)
        others = others.filter(pl.col("metric") == metric)
    return (
        others.join(base, on=["metric", "qid"], how="inner")
        .select("pipeline", "metric", "qid", "baseline_value", "value")
        .sort("pipeline", "metric", "qid")
    )


def _check_baseline(frame: pl.DataFrame, baseline: str) -> None:
    pipelines = frame.get_column("pipeline").unique().sort().to_list()
    if baseline not in pipelines:
        raise ValueError(f"baseline {baseline!r} is not among the pipelines {pipelines}")


def compare(
    per_query: pl.DataFrame,
    *,
    baseline: str,
    metrics: Sequence[str] | None = None,
    tests: Sequence[str] = ("t", "wilcoxon", "permutation"),
    correction: str = "holm",
    alpha: float = 0.05,
    seed: int = 0,
    n_resamples: int = 10_000,
) -> pl.DataFrame:
    """Compare every pipeline with ``baseline`` on every metric, paired per query.

    Only qids present for both the pipeline and the baseline are paired; both means are taken
    over those pairs. P-values of each test are corrected across all (pipeline, metric) rows.

    Args:
        per_query: ``pipeline``, ``qid``, ``metric``, ``value``.
        baseline: Pipeline every other pipeline is compared with.
        metrics: Metrics to compare; all metrics of the baseline when ``None``.
        tests: Registered test names; column ``p_<test>`` and ``p_<test>_adj`` each.
        correction: Registered correction applied per test across the rows.
        alpha: Level of ``significant``, judged on the first test's adjusted p-value.
        seed: Seed of the permutation test (the same for every row).
        n_resamples: Random sign patterns of the permutation test.

    Returns:
        One row per (pipeline ≠ baseline, metric), sorted by pipeline then metric: ``pipeline``,
        ``metric``, ``n`` (pairs), ``baseline_mean``, ``mean``, ``delta`` (mean - baseline_mean),
        ``wins``, ``losses``, ``ties`` (value better than, worse than, equal to the baseline's;
        "better" is "lower" for a lower-is-better metric such as ``tokens@10``, as registered
        with :func:`~memlab.eval.metrics.register_metric`), ``p_<test>`` for each test,
        ``p_<test>_adj`` for each test, ``significant``. With no pairs, means and p-values are
        null/NaN and ``significant`` is False.

    Raises:
        ValueError: On a missing column, null or repeated (pipeline, qid, metric), unknown
            baseline, metric, test or correction, or an empty ``tests``.
    """
    return _compare(
        _check_per_query(per_query), baseline=baseline, metrics=metrics, tests=tests,
        correction=correction, alpha=alpha, seed=seed, n_resamples=n_resamples,
    )


def _compare(
    frame: pl.DataFrame,
    *,
    baseline: str,
    metrics: Sequence[str] | None,
    tests: Sequence[str],
    correction: str,
    alpha: float,
    seed: int,
    n_resamples: int,
) -> pl.DataFrame:
    """:func:`compare` of a frame :func:`_check_per_query` has checked (and a part of one:
    :func:`compare_by_tag` checks its input once, not once per tag)."""
    _check_baseline(frame, baseline)
    tests = list(tests)
    if not tests:
        raise ValueError("compare: field 'tests' is empty")
    for test in tests:
        if test not in _TESTS:
            raise ValueError(f"unknown test {test!r}; known tests: {', '.join(_TESTS)}")
    if correction not in _CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; known: {', '.join(_CORRECTIONS)}")
    base_metrics = frame.filter(pl.col("pipeline") == baseline).get_column("metric").unique().sort()
    if metrics is None:
        metrics = base_metrics.to_list()
    else:
        metrics = list(dict.fromkeys(metrics))
        missing = [m for m in metrics if m not in base_metrics]
        if missing:
            raise ValueError(f"metrics {missing} have no values for baseline {baseline!r}")
    pipelines = frame.filter(pl.col("pipeline") != baseline).get_column("pipeline").unique().sort()
    paired = _paired(frame.filter(pl.col("metric").is_in(metrics)), baseline)
    groups = {key: group for key, group in paired.group_by(["pipeline", "metric"])}
    rows = []
    for pipeline in pipelines:
        for metric in sorted(metrics):
            group = groups.get((pipeline, metric))
            a = np.empty(0) if group is None else group.get_column("value").to_numpy()
            b = np.empty(0) if group is None else group.get_column("baseline_value").to_numpy()
            better_up = higher_is_better(metric)
            row: dict[str, object] = {
                "pipeline": pipeline,
                "metric": metric,
                "n": int(a.size),
                "baseline_mean": float(b.mean()) if a.size else None,
                "mean": float(a.mean()) if a.size else None,
                "delta": float(a.mean() - b.mean()) if a.size else None,
                "wins": int(np.count_nonzero(a > b if better_up else a < b)),
                "losses": int(np.count_nonzero(a < b if better_up else a > b)),
                "ties": int(np.count_nonzero(a == b)),
            }
            for test in tests:
                row[f"p_{test}"] = (
                    paired_test(a, b, test=test, n_resamples=n_resamples, seed=seed)
                    if a.size
                    else math.nan
                )
            rows.append(row)
    schema: dict[str, pl.DataType | type[pl.DataType]] = {
        "pipeline": pl.String,
        "metric": pl.String,
        "n": pl.Int64,
        "baseline_mean": pl.Float64,
        "mean": pl.Float64,
        "delta": pl.Float64,
        "wins": pl.Int64,
        "losses": pl.Int64,
        "ties": pl.Int64,
    } | {f"p_{test}": pl.Float64 for test in tests}
    out = pl.DataFrame(rows, schema=schema, orient="row")
    adjusted = {
        f"p_{test}_adj": correct_pvalues(out.get_column(f"p_{test}").to_numpy(), correction)
        for test in tests
    }
    out = out.with_columns(
        pl.Series(name, values, dtype=pl.Float64) for name, values in adjusted.items()
    )
    return out.with_columns(
        significant=pl.col(f"p_{tests[0]}_adj").fill_nan(None).lt(alpha).fill_null(False)
    )


def _query_tags(queries_tags: pl.DataFrame) -> pl.DataFrame:
    """Checked ``queries_tags`` as one ``(qid, tag)`` row per tag of each query."""
    if not isinstance(queries_tags, pl.DataFrame):
        raise TypeError(f"queries_tags must be a polars DataFrame, got {type(queries_tags)}")
    for column in ("qid", "tags"):
        if column not in queries_tags.columns:
            raise ValueError(f"queries_tags: missing column {column!r}")
    if not isinstance(queries_tags.schema["tags"], pl.List | pl.Null):
        raise TypeError(
            f"queries_tags: field 'tags' must be a list, got {queries_tags.schema['tags']}"
        )
    repeated = queries_tags.with_row_index("_row").filter(~pl.col("qid").is_first_distinct())
    if not repeated.is_empty():
        raise ValueError(f"queries_tags: row {repeated['_row'][0]}, field 'qid': duplicate")
    return (
        queries_tags.select(
            pl.col("qid").cast(pl.String), tag=pl.col("tags").cast(pl.List(pl.String))
        )
        .explode("tag")
        .drop_nulls("tag")
        .unique()
    )


def per_tag(per_query: pl.DataFrame, queries_tags: pl.DataFrame) -> pl.DataFrame:
    """Mean value per (pipeline, metric, tag), over queries carrying the tag.

    Args:
        per_query: ``qid``, ``metric``, ``value`` and, when comparing, ``pipeline``.
        queries_tags: ``qid``, ``tags`` (list[str]); a query may carry several tags or none.

    Returns:
        ``pipeline`` (when given), ``metric``, ``tag``, ``mean``, ``n``, sorted by those keys.

    Raises:
        ValueError: On a missing column, null or repeated key, or repeated qid in the tags.
    """
    with_pipeline = isinstance(per_query, pl.DataFrame) and "pipeline" in per_query.columns
    frame = _check_per_query(per_query, pipeline=with_pipeline)
    tags = _query_tags(queries_tags)
    keys = [*(["pipeline"] if with_pipeline else []), "metric", "tag"]
    return (
        frame.join(tags, on="qid", how="inner")
        .group_by(keys)
        .agg(mean=pl.col("value").mean(), n=pl.len().cast(pl.Int64))
        .sort(keys)
    )


def compare_by_tag(
    per_query: pl.DataFrame,
    queries_tags: pl.DataFrame,
    *,
    baseline: str,
    metric: str,
    tests: Sequence[str] = ("t", "wilcoxon", "permutation"),
    correction: str = "holm",
    alpha: float = 0.05,
    seed: int = 0,
    n_resamples: int = 10_000,
) -> pl.DataFrame:
    """:func:`compare` on one metric within each query tag.

    Each (pipeline, tag) row pairs the queries carrying the tag; p-values of each test are
    corrected across all (pipeline, tag) rows. Tags whose queries have no baseline value for
    ``metric`` (e.g. tags of unscored queries) are left out.

    Args:
        per_query: ``pipeline``, ``qid``, ``metric``, ``value``.
        queries_tags: ``qid``, ``tags`` (list[str]).
        baseline: Pipeline every other pipeline is compared with.
        metric: The metric compared.
        tests: Registered test names.
        correction: Registered correction applied per test across the rows.
        alpha: Level of ``significant`` (first test's adjusted p-value).
        seed: Seed of the permutation test.
        n_resamples: Random sign patterns of the permutation test.

    Returns:
        :func:`compare`'s columns with ``tag`` after ``pipeline``, sorted by pipeline then tag.
    """
    frame = _check_per_query(per_query)
    _check_baseline(frame, baseline)
    if correction not in _CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; known: {', '.join(_CORRECTIONS)}")
    scored = frame.filter(pl.col("metric") == metric)
    exploded = _query_tags(queries_tags)
    base_qids = scored.filter(pl.col("pipeline") == baseline).get_column("qid").implode()
    tags = (
        exploded.filter(pl.col("qid").is_in(base_qids)).get_column("tag").unique().sort().to_list()
    )
    parts = []
    for tag in tags:
        qids = exploded.filter(pl.col("tag") == tag).get_column("qid")
        part = _compare(
            scored.filter(pl.col("qid").is_in(qids.implode())),
            baseline=baseline,
            metrics=[metric],
            tests=tests,
            correction="none",
            alpha=alpha,
            seed=seed,
            n_resamples=n_resamples,
        )
        parts.append(part.with_columns(tag=pl.lit(tag, dtype=pl.String)))
    if not parts:  # no tagged query is scored: the right columns, no rows
        empty = _compare(
            frame.filter(pl.col("metric") == metric),
            baseline=baseline,
            metrics=[metric],
            tests=tests,
            correction="none",
            alpha=alpha,
            seed=seed,
            n_resamples=n_resamples,
        ).head(0)
        parts = [empty.with_columns(tag=pl.lit(None, dtype=pl.String))]
    out = pl.concat(parts).sort(["pipeline", "tag"])
    out = out.with_columns(
        pl.Series(
            f"p_{test}_adj",
            correct_pvalues(out.get_column(f"p_{test}").to_numpy(), correction),
            dtype=pl.Float64,
        )
        for test in tests
    )
    out = out.with_columns(
        significant=pl.col(f"p_{list(tests)[0]}_adj").fill_nan(None).lt(alpha).fill_null(False)
    )
    columns = out.columns
    return out.select("pipeline", "tag", *[c for c in columns if c not in ("pipeline", "tag")])


COMPARISON_KEYS = ("pipeline", "metric", "baseline_mean", "mean", "delta", "wins", "losses")
"""Columns of :func:`compare` worth showing, besides adjusted p-values and ``significant``."""

TAG_COMPARISON_KEYS = ("pipeline", "tag", "n", "baseline_mean", "mean", "wins", "losses")
"""Columns of :func:`compare_by_tag` worth showing, besides adjusted p-values and
``significant``."""


def comparison_view(frame: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """``frame``'s columns among ``keys``, its adjusted p-values and ``significant``, in order."""
    return frame.select(
        [c for c in frame.columns if c in keys or c.endswith("_adj") or c == "significant"]
    )


def wins_losses(per_query: pl.DataFrame, baseline: str, metric: str) -> pl.DataFrame:
    """Per-query deltas of every pipeline against ``baseline`` on one metric.

    Returns:
        ``pipeline``, ``qid``, ``baseline_value``, ``value``, ``delta`` (value - baseline_value),
        ``outcome`` (``"win"``, ``"loss"`` or ``"tie"``; a win is a lower value for a
        lower-is-better metric) on qids present for both, sorted by pipeline then qid.

    Raises:
        ValueError: On a missing column, null or repeated key, or unknown baseline or metric.
    """
    frame = _check_per_query(per_query)
    _check_baseline(frame, baseline)
    known = frame.filter(pl.col("pipeline") == baseline).get_column("metric").unique().sort()
    if metric not in known:
        raise ValueError(f"metric {metric!r} has no values for baseline {baseline!r}: {known}")
    delta = pl.col("value") - pl.col("baseline_value")
    better = delta > 0 if higher_is_better(metric) else delta < 0
    worse = delta < 0 if higher_is_better(metric) else delta > 0
    return (
        _paired(frame, baseline, metric)
        .select("pipeline", "qid", "baseline_value", "value", delta=delta)
        .with_columns(
            outcome=pl.when(better)
            .then(pl.lit("win"))
            .when(worse)
            .then(pl.lit("loss"))
            .otherwise(pl.lit("tie"))
        )
    )
