"""Tests for memlab.stages.normalization (ranx's normalisations)."""

import numpy as np
import pytest

from memlab.stages.normalization import NORMALIZATIONS, get_normalization


def test_each_normalisation_by_hand() -> None:
    v = np.array([4.0, 2.0, 1.0])
    assert get_normalization("min-max")(v).tolist() == [1.0, (2 - 1) / (4 - 1), 0.0]
    assert get_normalization("max")(v).tolist() == [1.0, 2 / 4, 1 / 4]
    assert get_normalization("sum")(v).tolist() == pytest.approx(
        [3 / (3 + 1 + 0), 1 / (3 + 1 + 0), 0.0], rel=1e-15
    )
    mean, sd = 7 / 3, np.sqrt(((4 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (1 - 7 / 3) ** 2) / 3)
    assert get_normalization("zscore")(v).tolist() == pytest.approx(
        [(4 - mean) / sd, (2 - mean) / sd, (1 - mean) / sd], rel=1e-12
    )
    assert get_normalization("rank")(v).tolist() == [1 - 0 / 3, 1 - 1 / 3, 1 - 2 / 3]
    assert get_normalization("none")(v) is v


def test_constant_lists_and_aliases() -> None:
    c = np.array([5.0, 5.0])
    assert get_normalization("min-max")(c).tolist() == [0.0, 0.0]
    assert get_normalization("zscore")(c).tolist() == [0.0, 0.0]
    assert NORMALIZATIONS["minmax"] is NORMALIZATIONS["min-max"]
    assert NORMALIZATIONS["zmuv"] is NORMALIZATIONS["zscore"]
    with pytest.raises(ValueError, match="wsum: field 'normalization': unknown normalization"):
        get_normalization("l2", where="wsum")


@pytest.mark.parametrize("name", sorted(NORMALIZATIONS))
def test_an_empty_list_stays_empty_without_warnings(name: str) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "mean of empty slice" would be raised
        out = get_normalization(name)(np.zeros(0))
    assert out.tolist() == []


def test_a_nan_score_moves_no_other_value() -> None:
    # statistics over the finite scores [4, 2, 1] (as the hand values above); NaN stays NaN
    v = np.array([4.0, np.nan, 2.0, 1.0])
    mean, sd = 7 / 3, np.sqrt(((4 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (1 - 7 / 3) ** 2) / 3)
    expected = {
        "min-max": [1.0, (2 - 1) / (4 - 1), 0.0],
        "max": [1.0, 2 / 4, 1 / 4],
        "sum": [3 / 4, 1 / 4, 0.0],
        "zscore": [(4 - mean) / sd, (2 - mean) / sd, (1 - mean) / sd],
    }
    for name, values in expected.items():
        out = get_normalization(name)(v)
        assert np.isnan(out[1]), name
        assert out[[0, 2, 3]].tolist() == pytest.approx(values, rel=1e-12), name
