"""The two order statistics the server and the benchmarks share (completer.stats)."""

import pytest

from completer.stats import nearest_rank, percentile


@pytest.mark.parametrize("values, q, interpolated, nearest", [
    ([], 50, None, None),
    ([7.0], 95, 7.0, 7.0),
    ([1, 2, 3, 4], 50, 2.5, 3),          # rank 1.5: interpolated halfway; nearest rounds half to even (2 -> index 2)
    ([4, 1, 3, 2], 0, 1, 1),             # unsorted input
    ([1, 2, 3, 4], 100, 4, 4),
    (list(range(21)), 95, 19.0, 19),
    ([10, 20], 5, 10.5, 10),
])
def test_percentile_and_nearest_rank(values, q, interpolated, nearest):
    assert percentile(values, q) == interpolated
    assert nearest_rank(values, q) == nearest
