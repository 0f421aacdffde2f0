"""A grouped bar chart as a standalone SVG file (no plotting library: matplotlib is not a
dependency of this project). research/studies/digest_table.py draws See et al.'s Figure 4 with it:
the share of duplicate n-grams and sentences per system, the references beside them."""

from __future__ import annotations

from xml.sax.saxutils import escape

# Distinct, colour-blind-safe fills (Okabe & Ito), cycled over the series.
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000", "#999999")


def grouped_bars(categories: list[str], series: dict[str, list[float]], title: str,
                 y_label: str, width: int = 1100, height: int = 420,
                 shared_axis: bool = True) -> str:
    """SVG text: one group of bars per category, one bar per series in each group (the
    series' values in category order), each bar labelled with its value, a legend. With
    shared_axis, one y axis from 0 to the largest value; without, each group is drawn to its
    own largest value (no axis), so that a category of small values (duplicate 3-grams beside
    duplicate words) is as legible as the largest."""
    for name, values in series.items():
        if len(values) != len(categories):
            raise ValueError(f"series {name!r} has {len(values)} values for "
                             f"{len(categories)} categories")
    left, right, top, bottom = 60, 360, 70, 50  # the legend on the right, labels above bars
    plot_w, plot_h = width - left - right, height - top - bottom

    def largest(values):
        return max(list(values) + [1e-9])

    top_value = largest(v for values in series.values() for v in values)
    scales = [plot_h / (top_value if shared_axis else largest(v[c] for v in series.values()))
              for c in range(len(categories))]
    group_w = plot_w / max(1, len(categories))
    bar_w = 0.8 * group_w / max(1, len(series))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2:.1f}" y="20" text-anchor="middle" font-size="14">'
           f'{escape(title)}</text>']
    for i in range(5 if shared_axis else 0):  # the y axis' ticks, 0 to the largest value
        value = top_value * i / 4
        y = top + plot_h - value * scales[0]
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{value:.1f}</text>')
    out.append(f'<text x="15" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 15 {top + plot_h / 2:.1f})">{escape(y_label)}</text>')
    for c, category in enumerate(categories):
        x0 = left + c * group_w + 0.1 * group_w
        for s, (name, values) in enumerate(series.items()):
            h = values[c] * scales[c]
            x, y = x0 + s * bar_w, top + plot_h - h
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                       f'fill="{COLOURS[s % len(COLOURS)]}"><title>{escape(name)}: '
                       f'{values[c]:g}</title></rect>')
            cx = x + bar_w / 2 + 3
            out.append(f'<text x="{cx:.1f}" y="{y - 3:.1f}" font-size="9" '
                       f'transform="rotate(-90 {cx:.1f} {y - 3:.1f})">{values[c]:g}</text>')
        out.append(f'<text x="{left + (c + 0.5) * group_w:.1f}" y="{top + plot_h + 18}" '
                   f'text-anchor="middle">{escape(category)}</text>')
    out.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" '
               f'y2="{top + plot_h}" stroke="black"/>')
    for s, name in enumerate(series):
        y = top + 10 + 18 * s
        out.append(f'<rect x="{left + plot_w + 15}" y="{y - 10}" width="12" height="12" '
                   f'fill="{COLOURS[s % len(COLOURS)]}"/>')
        out.append(f'<text x="{left + plot_w + 32}" y="{y}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
