"""The log picture as one self-contained HTML file (``topics describe --html``).

The same content as the PNG (:mod:`.log_picture_png`): a legend, then per partition a row of segment boxes
laid out with CSS flex (widths from :func:`~compactlog.log_picture.box_extents`, in percent), coloured by
section, the counts written in each box, the cleaner checkpoint as a dashed line, a summary line and the
partition's status (whether the next pass cleans it, and why not). Every box has a tooltip (``title``) with
its offsets, bytes, counts and section; every row's title repeats why the partition is not compacted.
No script, no stylesheet or font from elsewhere: the file opens offline. Boxes carry ``data-section`` and
``data-base-offset`` so a test (or a script) can read the picture back.
"""

from __future__ import annotations

import html
import os

from ..log_picture import SECTIONS, PartitionPicture, SegmentBox, TopicPicture, box_extents, iso_time, offset_position
from .common import human_bytes
from .log_picture_png import CHECKPOINT_COLOUR, COLOURS

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
.meta { color: #555; margin-bottom: 1em; }
.legend span { display: inline-block; margin-right: 1.2em; font-size: 0.9em; }
.legend i { display: inline-block; width: 1.2em; height: 0.9em; margin-right: 0.3em; vertical-align: middle;
  border: 1px solid #555; }
.partition { margin: 1.6em 0; }
.partition h2 { font-size: 1.05em; margin: 0 0 0.3em 0; }
.row { position: relative; display: flex; height: 5.2em; margin-top: 1.2em; }
.box { box-sizing: border-box; border-right: 2px solid #fff; overflow: hidden; font-size: 0.75em;
  text-align: center; padding-top: 0.5em; line-height: 1.3; }
.box.active { background-image: repeating-linear-gradient(45deg, transparent 0 6px, rgba(255,255,255,.55) 6px 9px); }
.box.unreadable { background-image: repeating-linear-gradient(45deg, transparent 0 5px, #fff 5px 7px),
  repeating-linear-gradient(-45deg, transparent 0 5px, #fff 5px 7px); }
.checkpoint { position: absolute; top: -1.2em; bottom: -0.3em; }
.checkpoint span { position: absolute; top: 0; left: 4px; font-size: 0.7em; white-space: nowrap; }
.summary { font-size: 0.85em; margin-top: 0.4em; }
.status { font-size: 0.85em; font-weight: bold; margin-top: 0.2em; }
.status.due { color: #1d6b2c; } .status.held { color: #9c2b25; }
""" + f".checkpoint {{ border-left: 2px dashed {CHECKPOINT_COLOUR}; }}\n"


def write_html(picture: TopicPicture, path: str | os.PathLike[str]) -> None:
    """Write ``picture`` to ``path`` as a self-contained HTML page (UTF-8)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_html(picture))


def render_html(picture: TopicPicture) -> str:
    e = html.escape
    legend = "".join(f'<span><i style="background:{COLOURS[s]}"></i>{e(s)}</span>' for s in SECTIONS)
    legend += (f'<span><i style="border:none;border-left:2px dashed {CHECKPOINT_COLOUR};width:0.6em"></i>'
               "cleaner checkpoint</span>")
    rows = "\n".join(_partition(p) for p in picture.partitions)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>compactlog: topic {e(picture.topic)}</title><style>{STYLE}</style></head><body>\n"
        f"<h1>Topic {e(picture.topic)}</h1>\n"
        f'<div class="meta">cleanup.policy={e(picture.cleanup_policy)} · {len(picture.partitions)} partitions · '
        f"as of {e(iso_time(picture.taken_at_ms))}</div>\n"
        f'<div class="legend">{legend}</div>\n{rows}\n</body></html>\n')


def _partition(partition: PartitionPicture) -> str:
    e = html.escape
    extents = box_extents([box.size_bytes for box in partition.segments])
    boxes = "".join(_box(box, width) for box, (_, width) in zip(partition.segments, extents, strict=True))
    marker = ""
    if partition.checkpoint is not None and partition.log_end_offset >= 0:
        x = offset_position(partition.segments, extents, partition.checkpoint)
        marker = (f'<div class="checkpoint" style="left:{100 * x:.3f}%" title="cleaner checkpoint '
                  f'{partition.checkpoint}"><span>checkpoint {partition.checkpoint}</span></div>')
    records = sum(box.record_count for box in partition.segments)
    duplicates = sum(box.duplicate_count for box in partition.segments)
    tombstones = sum(box.tombstone_count for box in partition.segments)
    offsets = ("offsets unknown" if partition.log_end_offset < 0
               else f"offsets {partition.log_start_offset}..{partition.log_end_offset}")
    checkpoint = "never cleaned" if partition.checkpoint is None else f"checkpoint {partition.checkpoint}"
    files = (f"{human_bytes(partition.size_bytes)} of files" if partition.log_end_offset < 0 else
             f"{human_bytes(partition.size_bytes)} in {len(partition.segments)} segments")
    summary = (f"{files} · {offsets} · "
               f"{checkpoint} · dirty ratio {partition.dirty_ratio:.2f} · {records} records, {duplicates} "
               f"duplicates, {tombstones} tombstones")
    return (f'<div class="partition" id="partition-{partition.partition}" data-partition="{partition.partition}" '
            f'title="{e(partition.status)}">\n'
            f"<h2>Partition {partition.partition}</h2>\n"
            f'<div class="row">{boxes}{marker}</div>\n'
            f'<div class="summary">{e(summary)}</div>\n'
            f'<div class="status {"due" if partition.due else "held"}">{e(partition.status)}</div>\n</div>')


def _box(box: SegmentBox, width: float) -> str:
    e = html.escape
    classes = ["box", "active"] if box.section == "active" else ["box"]
    if box.error or box.base_offset < 0:
        classes.append("unreadable")
    if box.base_offset < 0:
        offsets, counts = "log cannot be opened", ""
    else:
        offsets = (f"offsets {box.base_offset}..{box.next_offset - 1}" if box.next_offset > box.base_offset
                   else f"offset {box.base_offset} (empty)")
        counts = ("cannot be read: " + box.error if box.error else
                  f"{box.record_count} records, {box.duplicate_count} duplicates, {box.tombstone_count} tombstones")
    tooltip = f"{box.section}: {offsets}, {human_bytes(box.size_bytes)}; {counts}"
    if box.error or box.base_offset < 0:
        text = f"{offsets}<br>{human_bytes(box.size_bytes)}<br>cannot be read"
    else:
        text = (f"{box.base_offset}..{max(box.next_offset - 1, box.base_offset)}<br>{human_bytes(box.size_bytes)}"
                f"<br>{box.record_count} rec · {box.duplicate_count} dup<br>{box.tombstone_count} tomb")
    return (f'<div class="{" ".join(classes)}" data-section="{e(box.section)}" data-base-offset="{box.base_offset}" '
            f'style="flex:0 0 {100 * width:.3f}%;background-color:{COLOURS[box.section]}" title="{e(tooltip)}">'
            f"{text}</div>")
