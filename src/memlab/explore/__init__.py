"""What the marimo apps in ``notebooks/`` compute, kept out of the notebooks so it can be tested.

* :mod:`memlab.explore.session` -- datasets, embedders, replaying a dataset up to one query.
* :mod:`memlab.explore.activation` -- BFS and LIF activation step by step, the network drawing,
  rankings with and without propagation.
* :mod:`memlab.explore.tuning` -- the tunable pipeline and its metric curves against a baseline.
* :mod:`memlab.explore.runs` -- run directories, comparisons and the per-stage drill-down.
* :mod:`memlab.explore.timeline` -- one client's memory over time.

The apps set ``MEMLAB_NOTEBOOK_FAST=1`` (the tests do) to run on the model-free
:class:`~memlab.embed.HashingEmbedder` and a subset of queries.
"""
