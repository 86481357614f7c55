"""Tests for memlab.eval.report's charts: each validates against the Vega-Lite schema (the
writer skips validation), and the PNG is the one vl-convert renders from the spec."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import vl_convert as vlc

from memlab.embed import HashingEmbedder
from memlab.eval.report import (
    metrics_chart,
    render_specs,
    save_chart,
    stable_svg_ids,
    tag_chart,
)
from memlab.eval.sweep import heatmap_chart, run_sweep, sweep_chart, sweep_charts
from memlab.eval.tune import history_chart, importance_chart

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"

PER_QUERY = pl.DataFrame({
    "pipeline": ["a", "a", "b", "b"],
    "qid": ["q1", "q2", "q1", "q2"],
    "metric": ["R_all@10"] * 4,
    "value": [1.0, 0.0, 0.5, 0.5],
})
PER_TAG = pl.DataFrame({
    "pipeline": ["a", "b"], "metric": ["R_all@10"] * 2, "tag": ["temporal"] * 2,
    "mean": [0.5, 0.5], "n": [2, 2],
})
TRIALS = pl.DataFrame({
    "number": [0, 1, 2], "value": [0.2, 0.5, 0.4], "state": ["COMPLETE"] * 3,
})


def test_the_report_and_tuning_charts_are_valid_vega_lite() -> None:
    for chart in (
        metrics_chart(PER_QUERY, ["R_all@10"]),
        tag_chart(PER_TAG, "R_all@10"),
        history_chart(TRIALS, "R_all@10", True),
        importance_chart({"rrf__k": 0.75, "lifecycle__decay_factor": 0.25}),
    ):
        chart.to_dict(validate=True)  # raises on a spec the schema refuses


def test_the_sweep_charts_are_valid_vega_lite(tmp_path: Path) -> None:
    res = run_sweep(
        HANDMADE, "hybrid", {"rrf__k": [1, 60], "lifecycle__boost_weight": [0.0, 0.5]},
        embedder=HashingEmbedder(dim=64), out=None, progress=False,
    )
    sweep_chart(res, "rrf__k").to_dict(validate=True)
    heatmap_chart(res, "rrf__k", "lifecycle__boost_weight").to_dict(validate=True)
    # one heatmap for the one pair of varied constants; none for a constant that stays put
    grid = {"rrf__k": [1, 60], "lifecycle__boost_weight": [0.0, 0.5], "rrf__top_k": [5, 5]}
    specs = sweep_charts(res, grid)
    assert list(specs) == ["heatmap_rrf__k_lifecycle__boost_weight"]
    assert specs[next(iter(specs))] == heatmap_chart(
        res, "rrf__k", "lifecycle__boost_weight"
    ).to_json(validate=False)
    assert list(sweep_charts(res, {"rrf__k": [1, 60]})) == ["sweep_rrf__k"]


def test_save_chart_writes_the_svg_and_the_png_vl_convert_renders(tmp_path: Path) -> None:
    chart = metrics_chart(PER_QUERY, ["R_all@10"])
    assert save_chart(chart, tmp_path / "m") == ["m.png", "m.svg"]
    spec = chart.to_json()
    assert (tmp_path / "m.svg").read_text(encoding="utf-8") == stable_svg_ids(
        vlc.vegalite_to_svg(spec)
    )
    assert (tmp_path / "m.png").read_bytes() == vlc.vegalite_to_png(spec, scale=2)


def test_svg_ids_are_numbered_per_chart_in_order_of_appearance() -> None:
    svg = (
        '<linearGradient id="gradient_7"/><clipPath id="clip12"/><linearGradient '
        'id="gradient_3"/><path fill="url(#gradient_7)"/><path fill="url(#gradient_3)" '
        'clip-path="url(#clip12)"/><use href="#gradient_7"/>'
    )
    assert stable_svg_ids(svg) == (
        '<linearGradient id="gradient_0"/><clipPath id="clip0"/><linearGradient '
        'id="gradient_1"/><path fill="url(#gradient_0)"/><path fill="url(#gradient_1)" '
        'clip-path="url(#clip0)"/><use href="#gradient_0"/>'
    )
    # swapped numbers are renamed in one pass; ids already in order are left alone
    assert stable_svg_ids('<a id="g1"/><b fill="url(#g1)"/><a id="g0"/><b href="#g0"/>') == (
        '<a id="g0"/><b fill="url(#g0)"/><a id="g1"/><b href="#g1"/>'
    )
    assert stable_svg_ids('<a id="g0"/><b fill="url(#g0)"/>') == '<a id="g0"/><b fill="url(#g0)"/>'


def test_a_chart_renders_to_the_same_bytes_whatever_was_rendered_before() -> None:
    # vega numbers gradients with a counter that lives as long as the process (a worker that
    # rendered another chart first would write gradient_1 where a fresh process writes 0)
    spec = tag_chart(PER_TAG, "R_all@10").to_json(validate=False)
    first = render_specs({"t": spec})["t"]
    vlc.vegalite_to_svg(spec)  # moves vega's counter on
    again = render_specs({"t": spec})["t"]
    assert first == again
    assert 'id="gradient_0"' in first[0] and "url(#gradient_0)" in first[0]


def test_the_tag_chart_lists_its_cells_by_pipeline_then_tag_whatever_the_input_order() -> None:
    # its rows pass through a join, which keeps no order: the chart's marks, and so its SVG,
    # would differ between processes
    per_tag = pl.DataFrame({
        "pipeline": ["b", "a", "b", "a"], "metric": ["R_all@10"] * 4,
        "tag": ["x", "y", "y", "x"], "mean": [0.1, 0.2, 0.3, 0.4], "n": [3, 5, 5, 3],
    })
    spec = json.loads(tag_chart(per_tag, "R_all@10").to_json(validate=False))
    rows = next(iter(spec["datasets"].values()))
    assert [(r["pipeline"], r["tag"], r["tag_label"]) for r in rows] == [
        ("a", "x", "x (n=3)"), ("a", "y", "y (n=5)"), ("b", "x", "x (n=3)"), ("b", "y", "y (n=5)"),
    ]
    assert tag_chart(per_tag.reverse(), "R_all@10").to_json() == tag_chart(
        per_tag, "R_all@10"
    ).to_json()


def test_control_characters_in_chart_text_are_escaped():
    import json as _json

    from memlab.eval.report import sanitize_spec

    spec = {"title": "a\x00b", "data": {"values": [{"pipe\x07": "x\x1fy\ud800", "v": 1}]},
            "encoding": {"x": {"field": "pipe\x07"}}}
    clean = _json.loads(sanitize_spec(_json.dumps(spec)))
    assert clean == {"title": "a\\x00b", "data": {"values": [{"pipe\\x07": "x\\x1fy\\ud800",
                                                               "v": 1}]},
                     "encoding": {"x": {"field": "pipe\\x07"}}}


def test_a_nul_in_a_pipeline_name_does_not_crash_the_renderer():
    import subprocess
    import sys

    code = (
        "import json\n"
        "from memlab.eval.report import render_specs\n"
        "spec = {'$schema': 'https://vega.github.io/schema/vega-lite/v5.json', 'mark': 'bar',\n"
        "        'data': {'values': [{'p': 'bm\\x0025', 'v': 1}, {'p': 'a\\x07', 'v': 2}]},\n"
        "        'encoding': {'x': {'field': 'p', 'type': 'nominal'},\n"
        "                     'y': {'field': 'v', 'type': 'quantitative'}}}\n"
        "svg, png = render_specs({'c': json.dumps(spec)})['c']\n"
        "print('bm\\\\x0025' in svg, png[:4] == b'\\x89PNG')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.split() == ["True", "True"]
