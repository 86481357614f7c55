"""Tests of memlab.eval.stats: paired tests, corrections and comparison frames."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from memlab.eval.stats import (
    compare,
    compare_by_tag,
    correct_pvalues,
    paired_test,
    per_tag,
    wins_losses,
)

# --------------------------------------------------------------------------- paired tests


def test_t_test_closed_form() -> None:
    # d = [1, 2, 3]: mean 2, sd 1, t = 2 / (1 / sqrt(3)) = sqrt(12); with 2 degrees of freedom
    # the two-sided p is 1 - |t| / sqrt(t^2 + 2).
    a, b = np.array([2.0, 3.0, 5.0]), np.array([1.0, 1.0, 2.0])
    assert paired_test(a, b, test="t") == pytest.approx(1 - math.sqrt(12) / math.sqrt(12 + 2))


def test_t_test_is_undefined_when_every_difference_is_the_same() -> None:
    # d = [-1, -1]: no variance, t infinite; scipy's p = 0 would make two queries "significant"
    a, b = np.array([0.0, 0.0]), np.array([1.0, 1.0])
    assert math.isnan(paired_test(a, b, test="t"))
    assert math.isnan(paired_test(a[:1], b[:1], test="t"))  # one pair: undefined too
    assert paired_test(a, b, test="wilcoxon") == pytest.approx(2 / 4)  # all-negative of 2**2
    assert paired_test(a, a, test="t") == 1.0  # nothing moved


def test_t_test_matches_scipy() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.random(30), rng.random(30)
    assert paired_test(a, b, test="t") == sps.ttest_rel(a, b).pvalue


def test_wilcoxon_exact() -> None:
    # Differences 1, 2, 3, 4 all positive: W- = 0 is the most extreme of 2^4 sign patterns on
    # either side, so p = 2 / 16. A zero difference is dropped (zero_method="wilcox").
    a, b = np.array([2.0, 3.0, 4.0, 5.0, 1.0]), np.array([1.0, 1.0, 1.0, 1.0, 1.0])
    assert paired_test(a, b, test="wilcoxon") == pytest.approx(2 / 16)


def test_wilcoxon_with_ties_and_a_zero_enumerates_sign_flips() -> None:
    # d = 2, 2, 1, 0: ranks of |d| without the zero are 2.5, 2.5, 1; all positive, so the
    # observed rank sum is 6. Over the 2**4 sign patterns (the zero's sign changes nothing)
    # the positive rank sums are the subset sums of {2.5, 2.5, 1}: only 1 in 8 reaches 6,
    # all 8 are <= 6, so p = 2 * min(1, 1/8).
    a = np.array([3.0, 3.0, 2.0, 1.0])
    b = np.array([1.0, 1.0, 1.0, 1.0])
    assert paired_test(a, b, test="wilcoxon") == 2 * (1 / 8)
    assert paired_test(a, b, test="wilcoxon") == sps.wilcoxon(a, b, zero_method="wilcox").pvalue


def test_wilcoxon_matches_scipy_on_tied_small_samples() -> None:
    rng = np.random.default_rng(7)
    for n in (2, 5, 9, 13):
        for _ in range(3):
            a = rng.integers(0, 3, n) / 2
            b = rng.integers(0, 3, n) / 2
            if np.array_equal(a, b):
                continue
            expected = sps.wilcoxon(a, b, zero_method="wilcox").pvalue
            assert paired_test(a, b, test="wilcoxon") == expected


@pytest.mark.parametrize("test", ["t", "wilcoxon", "permutation"])
def test_identical_arrays_give_one(test: str) -> None:
    a = np.array([0.1, 0.5, 0.5, 1.0])
    assert paired_test(a, a.copy(), test=test) == 1.0


def test_permutation_exact_enumeration() -> None:
    # d = [1, 2, 3]: sign-flipped sums are ±6, ±4, ±2, 0, 0; |sum| >= 6 in 2 of 8 patterns.
    a, b = np.array([1.0, 2.0, 3.0]), np.zeros(3)
    assert paired_test(a, b, test="permutation") == 2 / 8
    # d = [1, 1, 1, 1]: |sum| >= 4 only for all-plus and all-minus, 2 of 16.
    assert paired_test(np.ones(4), np.zeros(4), test="permutation") == 2 / 16
    # d = [1, -1]: observed sum 0, every pattern is as extreme.
    assert paired_test(np.array([1.0, 0.0]), np.array([0.0, 1.0]), test="permutation") == 1.0


def test_permutation_monte_carlo_is_reproducible() -> None:
    rng = np.random.default_rng(11)
    a, b = rng.random(25), rng.random(25) + 0.1
    first = paired_test(a, b, test="permutation", n_resamples=999, seed=3)
    again = paired_test(a, b, test="permutation", n_resamples=999, seed=3)
    assert first == again
    hits = first * (999 + 1) - 1
    assert hits == pytest.approx(round(hits), abs=1e-9)
    assert 0 <= round(hits) <= 999


def test_permutation_monte_carlo_estimates_exact_p() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.normal(0.3, 1.0, 16), rng.normal(0.0, 1.0, 16)
    exact = paired_test(a, b, test="permutation", n_resamples=2**16)
    sampled = paired_test(a, b, test="permutation", n_resamples=20_000, seed=0)
    assert 0.02 < exact < 0.98
    assert sampled == pytest.approx(exact, abs=0.02)


def test_paired_test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown test 'z'; known tests: t, wilcoxon"):
        paired_test(np.ones(3), np.zeros(3), test="z")
    with pytest.raises(ValueError, match="'a' has 3 values but 'b' has 2"):
        paired_test(np.ones(3), np.zeros(2))
    with pytest.raises(ValueError, match="field 'b', index 1: not finite"):
        paired_test(np.ones(3), np.array([0.0, np.nan, 0.0]))
    with pytest.raises(ValueError, match="no pairs"):
        paired_test(np.ones(0), np.zeros(0))


# --------------------------------------------------------------------------- corrections


def test_holm_arithmetic() -> None:
    # Ascending 0.01, 0.03, 0.04 -> 3 * 0.01, max(., 2 * 0.03), max(., 1 * 0.04).
    got = correct_pvalues([0.01, 0.04, 0.03], "holm")
    np.testing.assert_allclose(got, [3 * 0.01, 2 * 0.03, 2 * 0.03], rtol=0, atol=1e-15)
    np.testing.assert_allclose(correct_pvalues([0.5, 0.6], "holm"), [1.0, 1.0])


def test_bonferroni_and_bh_arithmetic() -> None:
    p = [0.01, 0.04, 0.03]
    np.testing.assert_allclose(
        correct_pvalues(p, "bonferroni"), [3 * 0.01, 3 * 0.04, 3 * 0.03], atol=1e-15
    )
    # BH: m * p_(j) / j = 0.03, 0.045, 0.04 -> running minimum from the top: 0.03, 0.04, 0.04.
    np.testing.assert_allclose(
        correct_pvalues(p, "fdr_bh"), [3 * 0.01 / 1, 3 * 0.04 / 3, 3 * 0.04 / 3], atol=1e-15
    )
    np.testing.assert_array_equal(correct_pvalues(p, "none"), p)


def test_correction_leaves_nan_out_of_the_family() -> None:
    got = correct_pvalues([0.01, math.nan, 0.04], "holm")
    assert math.isnan(got[1])
    np.testing.assert_allclose(got[[0, 2]], [2 * 0.01, 1 * 0.04], atol=1e-15)


def test_correction_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown correction 'sidak'"):
        correct_pvalues([0.1], "sidak")
    with pytest.raises(ValueError, match="index 1"):
        correct_pvalues([0.1, 1.5])


# --------------------------------------------------------------------------- frames


def per_query_frame(data: dict[tuple[str, str], list[float | None]]) -> pl.DataFrame:
    rows = [
        (pipeline, f"q{i + 1}", metric, value)
        for (pipeline, metric), values in data.items()
        for i, value in enumerate(values)
        if value is not None
    ]
    return pl.DataFrame(
        rows,
        schema={"pipeline": pl.String, "qid": pl.String, "metric": pl.String, "value": pl.Float64},
        orient="row",
    )


FRAME = per_query_frame(
    {
        ("base", "m1"): [0.5, 0.2, 1.0, 0.0],
        ("A", "m1"): [0.7, 0.2, 0.4, 0.3],
        ("B", "m1"): [1.0, 0.6, None, None],
        ("base", "m2"): [1.0, 0.0, 1.0],
        ("A", "m2"): [1.0, 1.0, 1.0],
        ("B", "m2"): [0.0, 0.0, 0.0],
    }
)


def test_compare_counts_means_and_pairing() -> None:
    out = compare(FRAME, baseline="base", n_resamples=500)
    assert out.select("pipeline", "metric").rows() == [
        ("A", "m1"),
        ("A", "m2"),
        ("B", "m1"),
        ("B", "m2"),
    ]
    a_m1 = out.row(0, named=True)
    assert (a_m1["n"], a_m1["wins"], a_m1["losses"], a_m1["ties"]) == (4, 2, 1, 1)
    assert a_m1["baseline_mean"] == pytest.approx((0.5 + 0.2 + 1.0 + 0.0) / 4)
    assert a_m1["mean"] == pytest.approx((0.7 + 0.2 + 0.4 + 0.3) / 4)
    assert a_m1["delta"] == pytest.approx((0.7 + 0.2 + 0.4 + 0.3 - 0.5 - 0.2 - 1.0 - 0.0) / 4)
    # B has m1 values on q1 and q2 only: the baseline mean is taken over those pairs.
    b_m1 = out.row(2, named=True)
    assert (b_m1["n"], b_m1["wins"], b_m1["losses"], b_m1["ties"]) == (2, 2, 0, 0)
    assert b_m1["baseline_mean"] == pytest.approx((0.5 + 0.2) / 2)
    assert b_m1["mean"] == pytest.approx((1.0 + 0.6) / 2)
    b_m2 = out.row(3, named=True)
    assert (b_m2["wins"], b_m2["losses"], b_m2["ties"]) == (0, 2, 1)


def test_compare_pvalues_and_correction() -> None:
    out = compare(FRAME, baseline="base", n_resamples=500, seed=4)
    a = np.array([0.7, 0.2, 0.4, 0.3])
    base = np.array([0.5, 0.2, 1.0, 0.0])
    first = out.row(0, named=True)
    assert first["p_t"] == sps.ttest_rel(a, base).pvalue
    assert first["p_wilcoxon"] == sps.wilcoxon(a, base, zero_method="wilcox").pvalue
    assert first["p_permutation"] == paired_test(a, base, test="permutation", n_resamples=500)
    for test in ("t", "wilcoxon", "permutation"):
        raw = out.get_column(f"p_{test}").to_numpy()
        np.testing.assert_array_equal(
            out.get_column(f"p_{test}_adj").to_numpy(), correct_pvalues(raw, "holm")
        )
    assert out.get_column("significant").to_list() == [
        p < 0.05 for p in out.get_column("p_t_adj").to_list()
    ]


def test_compare_significant_follows_first_test() -> None:
    rng = np.random.default_rng(0)
    base = rng.random(30)
    frame = per_query_frame(
        {
            ("base", "m"): list(base),
            ("better", "m"): list(base + 0.2 + rng.random(30) * 0.01),
            ("same", "m"): list(base),
        }
    )
    out = compare(frame, baseline="base", tests=("permutation", "t"), correction="bonferroni")
    assert out.columns[-5:] == [
        "p_permutation",
        "p_t",
        "p_permutation_adj",
        "p_t_adj",
        "significant",
    ]
    better, same = out.row(0, named=True), out.row(1, named=True)
    # 2^30 patterns > 10_000: Monte Carlo, no pattern reaches the observed sum.
    assert better["p_permutation"] == 1 / (1 + 10_000)
    assert better["p_permutation_adj"] == 2 / (1 + 10_000)
    assert better["significant"] is True
    assert (same["p_permutation"], same["p_t"], same["significant"]) == (1.0, 1.0, False)


def test_compare_is_deterministic() -> None:
    shuffled = FRAME.sample(fraction=1.0, shuffle=True, seed=9)
    assert compare(FRAME, baseline="base").equals(compare(shuffled, baseline="base"))


def test_compare_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="baseline 'nope' is not among"):
        compare(FRAME, baseline="nope")
    with pytest.raises(ValueError, match=r"metrics \['m9'\] have no values"):
        compare(FRAME, baseline="base", metrics=["m9"])
    with pytest.raises(ValueError, match="unknown test 'z'"):
        compare(FRAME, baseline="base", tests=("z",))
    repeated = pl.concat([FRAME, FRAME.head(1)])  # 4 + 4 + 2 + 3 + 3 + 3 = 19 rows before
    with pytest.raises(ValueError, match=r"per_query: row 19, fields"):
        compare(repeated, baseline="base")


def test_per_tag_means() -> None:
    frame = per_query_frame({("P", "m1"): [1.0, 0.0, 0.5, 0.25], ("Q", "m1"): [0.0, 0.0, 1.0, 1.0]})
    tags = pl.DataFrame(
        {"qid": ["q1", "q2", "q3", "q4"], "tags": [["x", "y"], ["x"], [], None]},
        schema_overrides={"tags": pl.List(pl.String)},
    )
    got = per_tag(frame, tags)
    assert got.columns == ["pipeline", "metric", "tag", "mean", "n"]
    assert got.rows() == [
        ("P", "m1", "x", (1.0 + 0.0) / 2, 2),
        ("P", "m1", "y", 1.0, 1),
        ("Q", "m1", "x", (0.0 + 0.0) / 2, 2),
        ("Q", "m1", "y", 0.0, 1),
    ]


def test_wins_losses_per_query() -> None:
    got = wins_losses(FRAME, "base", "m1")
    assert got.columns == ["pipeline", "qid", "baseline_value", "value", "delta", "outcome"]
    assert got.select("pipeline", "qid", "outcome").rows() == [
        ("A", "q1", "win"),
        ("A", "q2", "tie"),
        ("A", "q3", "loss"),
        ("A", "q4", "win"),
        ("B", "q1", "win"),
        ("B", "q2", "win"),
    ]
    assert got.get_column("delta").to_list() == pytest.approx(
        [0.7 - 0.5, 0.2 - 0.2, 0.4 - 1.0, 0.3 - 0.0, 1.0 - 0.5, 0.6 - 0.2]
    )


def test_compare_by_tag_pairs_within_each_tag_and_corrects_across_rows() -> None:
    tags = pl.DataFrame(
        {"qid": ["q1", "q2", "q3", "q4"], "tags": [["x"], ["x", "y"], ["y"], ["y"]]},
        schema_overrides={"tags": pl.List(pl.String)},
    )
    out = compare_by_tag(FRAME, tags, baseline="base", metric="m1", n_resamples=500, seed=4)
    assert out.columns[:3] == ["pipeline", "tag", "metric"]
    # B has m1 values on q1 and q2 only, so its "y" row pairs q2 alone
    assert out.select("pipeline", "tag", "n", "wins", "losses", "ties").rows() == [
        ("A", "x", 2, 1, 0, 1),
        ("A", "y", 3, 1, 1, 1),
        ("B", "x", 2, 2, 0, 0),
        ("B", "y", 1, 1, 0, 0),
    ]
    a_y = out.row(1, named=True)
    assert a_y["baseline_mean"] == pytest.approx((0.2 + 1.0 + 0.0) / 3)
    assert a_y["mean"] == pytest.approx((0.2 + 0.4 + 0.3) / 3)
    assert a_y["p_t"] == sps.ttest_rel([0.2, 0.4, 0.3], [0.2, 1.0, 0.0]).pvalue
    for test in ("t", "wilcoxon", "permutation"):
        raw = out.get_column(f"p_{test}").to_numpy()
        np.testing.assert_array_equal(
            out.get_column(f"p_{test}_adj").to_numpy(), correct_pvalues(raw, "holm")
        )
    none_tagged = tags.with_columns(tags=pl.lit([], dtype=pl.List(pl.String)))
    empty = compare_by_tag(FRAME, none_tagged, baseline="base", metric="m1")
    assert empty.height == 0 and empty.columns == out.columns


def test_wins_and_losses_flip_for_a_lower_is_better_metric() -> None:
    # tokens@10 is registered lower-is-better: fewer tokens than the baseline is a win
    frame = per_query_frame(
        {("base", "tokens@10"): [100.0, 50.0, 80.0], ("A", "tokens@10"): [60.0, 70.0, 80.0]}
    )
    row = compare(frame, baseline="base", n_resamples=10).row(0, named=True)
    assert (row["wins"], row["losses"], row["ties"]) == (1, 1, 1)
    assert row["delta"] == pytest.approx((60 + 70 + 80 - 100 - 50 - 80) / 3)
    frame = per_query_frame(
        {("base", "tokens@10"): [100.0, 50.0], ("A", "tokens@10"): [60.0, 60.0]}
    )
    row = compare(frame, baseline="base", n_resamples=10).row(0, named=True)
    assert (row["wins"], row["losses"]) == (1, 1)
    got = wins_losses(frame, "base", "tokens@10")
    assert got.get_column("outcome").to_list() == ["win", "loss"]


def test_permutation_draws_its_signs_once_per_query_count(monkeypatch):
    """The sign matrices depend on (n, resamples, seed) only: kept, they give the very p-value
    a fresh draw gives, for any pair of systems; too large to keep, they are drawn anew."""
    from memlab.eval import stats

    rng = np.random.default_rng(3)
    a, b, c = (rng.random(80) for _ in range(3))
    stats._SIGN_CACHE.clear()
    first = [paired_test(x, y, test="permutation", n_resamples=2_000, seed=5)
             for x, y in ((a, b), (a, c))]
    assert list(stats._SIGN_CACHE) == [(80, 2_000, 5)]
    again = [paired_test(x, y, test="permutation", n_resamples=2_000, seed=5)
             for x, y in ((a, b), (a, c))]
    monkeypatch.setattr(stats, "_SIGN_CACHE_BYTES", 0)
    stats._SIGN_CACHE.clear()
    fresh = [paired_test(x, y, test="permutation", n_resamples=2_000, seed=5)
             for x, y in ((a, b), (a, c))]
    assert stats._SIGN_CACHE == {}
    assert first == again == fresh
    # the p-value by hand: (1 + hits) / (1 + resamples) over the same draws
    d = a - b
    signs = np.where(np.random.default_rng(5).random((2_000, 80)) < 0.5, -1.0, 1.0)
    hits = np.count_nonzero(np.abs(signs @ d) >= abs(d.sum()) * (1 - 1e-9))
    assert first[0] == (1 + hits) / (1 + 2_000)


def test_adjustment_phrase_names_unadjusted_p_values() -> None:
    from memlab.eval.stats import adjustment_phrase

    assert adjustment_phrase("none") == "unadjusted"
    assert adjustment_phrase("none", title=True) == "unadjusted"
    assert adjustment_phrase("holm") == "holm-adjusted"
    assert adjustment_phrase("bonferroni", title=True) == "Bonferroni-adjusted"
