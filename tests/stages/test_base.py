"""Tests for memlab.stages.base helpers."""

from __future__ import annotations

import numpy as np
import pytest

from memlab.stages.base import append_rows


def test_append_rows_doubles_the_buffer_and_keeps_what_was_written() -> None:
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    buf = append_rows(None, 0, a)
    assert buf.shape == (1024, 2) and buf[:3].tolist() == a.tolist()
    same = append_rows(buf, 3, a[:1])
    assert same is buf and same[:4].tolist() == [*a.tolist(), [0.0, 1.0]]
    big = np.ones((1500, 2), dtype=np.float32)
    grown = append_rows(same, 4, big)
    assert grown.shape == (2048, 2)  # max(4 + 1500, 2 · 1024)
    assert grown[:4].tolist() == same[:4].tolist() and grown[4:1504].sum() == 3000.0
    with pytest.raises(ValueError, match="rows are in use but there is no buffer"):
        append_rows(None, 2, a)
