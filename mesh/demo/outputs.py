"""What the demo leaves in `.mesh/demo/`: a contact sheet of the downloaded frames, a plot of
each node's RS over the run, and `summary.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from mesh.demo.board import Node

SHEET_COLUMNS = 4
SHEET_SCALE = 3  # demo frames are small: enlarge them (nearest neighbour) to be seen
LABEL_H = 14


def contact_sheet(frames: list[Path], out: Path) -> Path:
    """The frames in a grid, each labelled with its file name."""
    if not frames:
        raise ValueError("no frames to put on a contact sheet")
    images = [Image.open(path).convert("RGB") for path in frames]
    width, height = (side * SHEET_SCALE for side in images[0].size)
    columns = min(SHEET_COLUMNS, len(images))
    rows = -(-len(images) // columns)
    sheet = Image.new("RGB", (columns * width, rows * (height + LABEL_H)), "white")
    draw = ImageDraw.Draw(sheet)
    for index, (path, image) in enumerate(zip(frames, images, strict=True)):
        left, top = (index % columns) * width, (index // columns) * (height + LABEL_H)
        sheet.paste(image.resize((width, height), Image.Resampling.NEAREST), (left, top))
        draw.text((left + 3, top + height + 1), path.stem, fill="black")
    sheet.save(out)
    return out


def rs_plot(nodes: list[Node], events: list[tuple[float, str]], out: Path) -> Path:
    """Each node's RS over the run (matplotlib, no display), the demo's events as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(11, 4.5), dpi=100)
    for node in nodes:
        if node.history:
            seconds, scores = zip(*node.history, strict=True)
            axes.plot(seconds, scores, label=f"{node.name} ({node.profile})", linewidth=1.6)
    for at, what in _merged(events):
        axes.axvline(at, color="grey", linestyle=":", linewidth=0.8)
        axes.text(at, 1.02, what, rotation=90, fontsize=7, va="bottom", ha="center",
                  transform=axes.get_xaxis_transform())
    axes.set_xlabel("seconds since the grid started")
    axes.set_ylabel("reliability score (T = 60 s)")
    axes.set_ylim(0, 1.0)
    axes.grid(alpha=0.3)
    axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    figure.tight_layout()
    figure.savefig(out, bbox_inches="tight")
    plt.close(figure)
    return out


def _merged(events: list[tuple[float, str]], share: float = 0.02) -> list[tuple[float, str]]:
    """Events closer together than `share` of the run, as one line with their labels joined:
    apart, their labels would print over each other."""
    ordered = sorted(events)
    if not ordered:
        return []
    span = max(ordered[-1][0] - ordered[0][0], 1e-9)
    merged = [ordered[0]]
    for at, what in ordered[1:]:
        last_at, last_what = merged[-1]
        if at - last_at < share * span:
            merged[-1] = (last_at, f"{last_what} · {what}")
        else:
            merged.append((at, what))
    return merged


def write_summary(summary: dict[str, Any], out: Path) -> Path:
    out.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return out
