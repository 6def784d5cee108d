"""The log picture as a PNG (``topics describe --plot``), drawn with matplotlib's Agg canvas.

Layout: a title and a legend of the sections on top, then one band per partition: a row of segment boxes
across the full width (see :func:`~compactlog.log_picture.box_extents`: width by the segment's share of the
partition's bytes), coloured by section, each box with its records, duplicates and tombstones written in
it when it is wide enough, the cleaner checkpoint as a dashed vertical line, and under the row a line with
the partition's size, offsets, dirty ratio and whether the next pass cleans it and why not. Every partition
gets a band, so the image is ``WIDTH_IN`` wide and grows ``ROW_IN`` a partition (:func:`figure_size_px`).

matplotlib is imported here only, and this module only when a plot is asked for, so ``import compactlog``
and every other command stay light. The figure is made without pyplot (no global state, no GUI backend).
"""

from __future__ import annotations

import os
import textwrap
from typing import Any

from ..log_picture import (
    ACTIVE,
    CLEAN,
    CLEANABLE,
    MIN_LAG,
    NOT_COMPACTED,
    OPEN_TRANSACTION,
    SECTIONS,
    UNCLEANABLE,
    PartitionPicture,
    TopicPicture,
    box_extents,
    iso_time,
    offset_position,
)
from .common import human_bytes

# One colour per section; the same ones as the HTML report. Green is done, amber is work waiting, blue
# and purple are work held back by a rule, red is a failure, grey is the active segment.
COLOURS = {
    CLEAN: "#4e9a5b",
    CLEANABLE: "#f0a830",
    MIN_LAG: "#5b8fd6",
    OPEN_TRANSACTION: "#9a6fc9",
    UNCLEANABLE: "#d6504a",
    ACTIVE: "#c9c9c9",
    NOT_COMPACTED: "#e6e6e6",
}
CHECKPOINT_COLOUR = "#111111"
DPI = 100
WIDTH_IN = 14.0
HEADER_IN = 1.3  # title and legend
ROW_IN = 1.7  # one partition: its boxes and the lines under them
FOOTER_IN = 0.2
BOX_HEIGHT = 0.48  # of a row's height, in data units (a row is 1 unit tall)
STATUS_CHARS = 165  # the status line wraps at this many characters, onto at most two lines
MIN_LABEL_PX = 70  # a box narrower than this gets no counts written in it


def figure_size_px(partition_count: int) -> tuple[int, int]:
    """``(width, height)`` in pixels of the picture of a topic with ``partition_count`` partitions."""
    height_in = HEADER_IN + ROW_IN * max(partition_count, 1) + FOOTER_IN
    return round(WIDTH_IN * DPI), round(height_in * DPI)


def write_png(picture: TopicPicture, path: str | os.PathLike[str]) -> None:
    """Draw ``picture`` and write it to ``path`` as a PNG (``figure_size_px`` pixels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = max(len(picture.partitions), 1)
    width_px, height_px = figure_size_px(len(picture.partitions))
    figure = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
    FigureCanvasAgg(figure)
    height_in = height_px / DPI
    figure.text(0.01, 1 - 0.35 / height_in, f"Topic {picture.topic}", fontsize=15, weight="bold", va="center")
    figure.text(0.99, 1 - 0.35 / height_in,
                f"cleanup.policy={picture.cleanup_policy}  ·  as of {iso_time(picture.taken_at_ms)}",
                fontsize=10, ha="right", va="center", color="#444444")
    handles = [Patch(facecolor=COLOURS[s], edgecolor="#555555", label=s) for s in SECTIONS]
    handles.append(_checkpoint_handle())
    figure.legend(handles=handles, loc="center", ncol=4, fontsize=9, frameon=False,
                  bbox_to_anchor=(0.5, 1 - 0.9 / height_in))

    # One axes for every row: x in [0, 1] across the row, y = row index (row 0 at the top).
    bottom = FOOTER_IN / height_in
    axes = figure.add_axes((0.07, bottom, 0.91, ROW_IN * rows / height_in))
    axes.set_xlim(-0.002, 1.002)
    axes.set_ylim(rows, 0)
    axes.set_axis_off()
    for row, partition in enumerate(picture.partitions):
        _draw_partition(axes, row, partition, width_px * 0.91)
    figure.savefig(os.fspath(path), format="png", dpi=DPI)


def _checkpoint_handle() -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color=CHECKPOINT_COLOUR, linestyle="--", linewidth=1.5, label="cleaner checkpoint")


def _draw_partition(axes: Any, row: int, partition: PartitionPicture, row_px: float) -> None:
    from matplotlib.patches import Rectangle

    top = row + 0.12
    axes.text(-0.01, top + BOX_HEIGHT / 2, f"P{partition.partition}", ha="right", va="center", fontsize=12,
              weight="bold", clip_on=False)
    extents = box_extents([box.size_bytes for box in partition.segments])
    for box, (left, width) in zip(partition.segments, extents, strict=True):
        # Hatching: "//" the active segment, "xx" a segment that cannot be read.
        hatch = "xx" if box.error else "//" if box.section == ACTIVE else None
        axes.add_patch(Rectangle((left, top), width, BOX_HEIGHT, facecolor=COLOURS[box.section],
                                 edgecolor="white", linewidth=1.2, hatch=hatch))
        if width * row_px >= MIN_LABEL_PX:
            # On a hatched (unreadable) box the text gets a white ground, else it drowns in the hatching.
            ground = {"facecolor": "white", "alpha": 0.85, "edgecolor": "none", "pad": 2} if box.error else None
            axes.text(left + width / 2, top + BOX_HEIGHT / 2, _box_label(box, width * row_px),
                      ha="center", va="center", fontsize=8, color="#1a1a1a", linespacing=1.25, bbox=ground)
    if partition.checkpoint is not None and partition.segments and partition.log_end_offset >= 0:
        x = offset_position(partition.segments, extents, partition.checkpoint)
        axes.plot([x, x], [top - 0.08, top + BOX_HEIGHT + 0.04], color=CHECKPOINT_COLOUR, linestyle="--",
                  linewidth=1.5)
        axes.text(x, top - 0.09, f"checkpoint {partition.checkpoint}", fontsize=7.5, va="bottom",
                  ha="left" if x < 0.85 else "right", color=CHECKPOINT_COLOUR)
    axes.text(0, top + BOX_HEIGHT + 0.08, _summary(partition), fontsize=8.5, va="top", ha="left", color="#222222")
    status = "\n".join(textwrap.wrap(partition.status, STATUS_CHARS, max_lines=2, placeholder=" ..."))
    axes.text(0, top + BOX_HEIGHT + 0.24, status, fontsize=8.5, va="top", ha="left",
              color="#1d6b2c" if partition.due else "#9c2b25", weight="bold", linespacing=1.3)


def _box_label(box: Any, width_px: float) -> str:
    if box.base_offset < 0:
        return f"log cannot be opened\n{human_bytes(box.size_bytes)}"
    head = f"{box.base_offset}..{box.next_offset - 1}" if box.next_offset > box.base_offset else f"{box.base_offset}"
    if box.error:
        return f"{head}  {human_bytes(box.size_bytes)}\ncannot be read" if width_px >= 2 * MIN_LABEL_PX else \
            f"{head}\ncannot be read"
    counts = f"{box.record_count} rec\n{box.duplicate_count} dup\n{box.tombstone_count} tomb"
    if width_px >= 2 * MIN_LABEL_PX:
        counts = (f"{box.record_count} records\n{box.duplicate_count} duplicates\n"
                  f"{box.tombstone_count} tombstones")
    return f"{head}  {human_bytes(box.size_bytes)}\n{counts}" if width_px >= 2 * MIN_LABEL_PX else f"{head}\n{counts}"


def _summary(partition: PartitionPicture) -> str:
    segments = partition.segments
    records = sum(box.record_count for box in segments)
    duplicates = sum(box.duplicate_count for box in segments)
    tombstones = sum(box.tombstone_count for box in segments)
    offsets = ("offsets unknown" if partition.log_end_offset < 0
               else f"offsets {partition.log_start_offset}..{partition.log_end_offset}")
    checkpoint = "never cleaned" if partition.checkpoint is None else f"checkpoint {partition.checkpoint}"
    files = (f"{human_bytes(partition.size_bytes)} of files" if partition.log_end_offset < 0 else
             f"{human_bytes(partition.size_bytes)} in {len(segments)} segment{'s' if len(segments) != 1 else ''}")
    return (f"{files}  ·  "
            f"{offsets}  ·  {checkpoint}  ·  dirty ratio {partition.dirty_ratio:.2f}  ·  {records} records, "
            f"{duplicates} duplicates, {tombstones} tombstones")

