"""The PNG's code-signature labels can be read: type of 7 points at least,
each label clear of its neighbours, and none cut off at the image's edge,
for the 40 rows the heatmap shows at most with names as long as C++ gives."""

import numpy as np
import pytest

from phasewatch.report.code_entries import LABEL_NAME_WIDTH
from phasewatch.report.figure import TOP_CODE_ENTRIES, Heatmap, PhaseFigure
from phasewatch.report.png import draw


def figure_with_code_rows(rows: int) -> PhaseFigure:
    columns = 60
    rng = np.random.default_rng(3)
    labels = [f"{'…::Accumulator<>::fold'[:LABEL_NAME_WIDTH]} +3 (#{1000 + k})"
              for k in range(rows)]
    code = Heatmap("ip", "code signature", "code", np.arange(rows, dtype=np.float64),
                   rng.random((columns, rows)), labels, f"hottest {rows} of 2048 entries")
    x = np.arange(columns)
    return PhaseFigure(columns, 1, x, x / 10.0, [code], np.full(columns, 0.1),
                       np.full(columns, 0.2), x // 20)


@pytest.mark.parametrize("rows", [5, TOP_CODE_ENTRIES])
def test_code_labels_are_readable(rows):
    import matplotlib.pyplot as plt
    figure = draw(figure_with_code_rows(rows), "phases of a C++ program")
    try:
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()
        ticks = [t for t in figure.axes[0].get_yticklabels() if t.get_text()]
        assert len(ticks) == rows
        assert min(t.get_fontsize() for t in ticks) >= 7
        boxes = sorted((t.get_window_extent(renderer) for t in ticks), key=lambda b: b.y0)
        assert all(b.x0 >= 0 for b in boxes), [b.x0 for b in boxes]
        assert all(low.y1 <= high.y0 + 0.5 for low, high in zip(boxes, boxes[1:])), \
            "labels overlap"
    finally:
        plt.close(figure)
