import math

import pytest

from memlab.judge.agreement import agreement
from memlab.judge.judgments import Judgment

TS = "2026-03-06T12:00:00.000Z"


def test_cohen_kappa_by_hand():
    # ann: 1 1 0 0 ; bob: 1 0 0 0 on the same four pairs
    ann = [1, 1, 0, 0]
    bob = [1, 0, 0, 0]
    js = [Judgment("q", f"m{i}", g, "human", "ann", TS) for i, g in enumerate(ann)]
    js += [Judgment("q", f"m{i}", g, "human", "bob", TS) for i, g in enumerate(bob)]
    js.append(Judgment("q", "m9", 1, "human", "bob", TS))  # judged by bob only: left out
    js.append(Judgment("q", "m0", 0, "agent", "claude-code", TS))  # another source
    row = agreement(js).row(0, named=True)
    p_o = 3 / 4
    p_e = (2 / 4) * (1 / 4) + (2 / 4) * (3 / 4)  # P(both 1) + P(both 0)
    assert (row["judge_a"], row["judge_b"], row["n"]) == ("ann", "bob", 4)
    assert row["agreement"] == pytest.approx(p_o)
    assert row["kappa"] == pytest.approx((p_o - p_e) / (1 - p_e))


def test_one_judge_gives_no_rows_and_a_single_grade_gives_nan():
    js = [Judgment("q", "m", 1, "human", "ann", TS)]
    assert agreement(js).height == 0
    js += [Judgment("q", "m", 1, "human", "bob", TS), Judgment("q", "n", 1, "human", "ann", TS),
           Judgment("q", "n", 1, "human", "bob", TS)]
    row = agreement(js).row(0, named=True)
    assert row["agreement"] == 1.0 and math.isnan(row["kappa"])


def test_the_agreement_command_refuses_a_path_that_is_no_dataset(tmp_path, capsys) -> None:
    from memlab.cli import main

    assert main(["judge", "agreement", str(tmp_path / "missing")]) == 2
    assert f"{tmp_path / 'missing'}: no such dataset directory" in capsys.readouterr().err
    assert main(["judge", "agreement", str(tmp_path)]) == 2
    assert f"{tmp_path}: not a dataset (no dataset.toml)" in capsys.readouterr().err
    (tmp_path / "dataset.toml").write_text('name = "x"\n')
    assert main(["judge", "agreement", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "fewer than two judges: no agreement to report\n"
