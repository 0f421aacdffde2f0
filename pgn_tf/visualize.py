"""Attention and p_gen pictures (See et al.'s visualisation): HTML, PNG and TensorBoard images."""

from __future__ import annotations

import html

import numpy as np
import tensorflow as tf


def attention_html(source: list[str], output: list[str], attn: np.ndarray,
                   p_gen: np.ndarray | None = None) -> str:
    """One row per output word: its p_gen (green = generated, red = copied) and the source
    words shaded by attention. attn: [len(output), len(source)]."""
    rows = []
    for t, word in enumerate(output):
        weights = attn[t] / max(float(attn[t].max()), 1e-9)
        cells = "".join(
            f'<span style="background: rgba(255,200,0,{w:.2f})">{html.escape(s)}</span> '
            for s, w in zip(source, weights)
        )
        if p_gen is not None:
            g = float(p_gen[t])
            color = f"rgb({int(255 * (1 - g))},{int(255 * g)},80)"
            pg = f'<td style="background:{color}">{g:.2f}</td>'
        else:
            pg = "<td></td>"
        rows.append(f"<tr><td><b>{html.escape(word)}</b></td>{pg}<td>{cells}</td></tr>")
    return (
        "<!doctype html><meta charset='utf-8'><title>pgn_tf attention</title>"
        "<style>body{font-family:sans-serif} td{padding:2px 6px;vertical-align:top}</style>"
        "<p>Each row: an output word, its generation probability p_gen (green: generated from the"
        " vocabulary, red: copied), and the article shaded by the attention it paid.</p>"
        "<table><tr><th>output</th><th>p_gen</th><th>attention over the article</th></tr>"
        + "".join(rows) + "</table>"
    )


def attention_image(attn: np.ndarray, p_gen: np.ndarray | None = None, scale: int = 6) -> np.ndarray:
    """A heatmap as uint8 [H, W, 3]: rows = output steps, columns = source tokens (white = high
    attention); a left band shows p_gen in green (generate) to red (copy)."""
    a = np.asarray(attn, np.float32)
    if a.size == 0:
        a = np.zeros((1, 1), np.float32)
    a = a / np.maximum(a.max(axis=1, keepdims=True), 1e-9)
    img = np.repeat((a * 255).astype(np.uint8)[:, :, None], 3, axis=2)
    if p_gen is not None and len(p_gen):
        g = np.asarray(p_gen, np.float32)[: a.shape[0], None]
        band = np.concatenate([(1 - g) * 255, g * 255, np.full_like(g, 80)], axis=1)
        band = np.repeat(band[:, None, :], 3, axis=1).astype(np.uint8)
        img = np.concatenate([band, np.zeros((a.shape[0], 1, 3), np.uint8), img], axis=1)
    return np.kron(img, np.ones((scale, scale, 1), np.uint8))


def write_png(path: str, image: np.ndarray) -> None:
    tf.io.write_file(path, tf.io.encode_png(image))
