"""The results plot (PNG), drawn without plotting libraries (no extra dependency).

    .venv/bin/python -m benchmarks.plot [benchmarks/results/benchmarks.json] [out.png]

Horizontal bar panels, one per scenario: rename rates on each emulator (largest job),
files/s with 50 ms of latency, client CPU per file, and the local job commit time against
Hadoop's committers. Text uses a built-in 5x7 pixel font (upper case); the PNG is written
with zlib.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

_GLYPHS = {
    "A": ".###. #...# #...# ##### #...# #...# #...#",
    "B": "####. #...# #...# ####. #...# #...# ####.",
    "C": ".###. #...# #.... #.... #.... #...# .###.",
    "D": "####. #...# #...# #...# #...# #...# ####.",
    "E": "##### #.... #.... ####. #.... #.... #####",
    "F": "##### #.... #.... ####. #.... #.... #....",
    "G": ".###. #...# #.... #.### #...# #...# .####",
    "H": "#...# #...# #...# ##### #...# #...# #...#",
    "I": ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
    "J": "..### ...#. ...#. ...#. ...#. #..#. .##..",
    "K": "#...# #..#. #.#.. ##... #.#.. #..#. #...#",
    "L": "#.... #.... #.... #.... #.... #.... #####",
    "M": "#...# ##.## #.#.# #.#.# #...# #...# #...#",
    "N": "#...# #...# ##..# #.#.# #..## #...# #...#",
    "O": ".###. #...# #...# #...# #...# #...# .###.",
    "P": "####. #...# #...# ####. #.... #.... #....",
    "Q": ".###. #...# #...# #...# #.#.# #..#. .##.#",
    "R": "####. #...# #...# ####. #.#.. #..#. #...#",
    "S": ".#### #.... #.... .###. ....# ....# ####.",
    "T": "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    "U": "#...# #...# #...# #...# #...# #...# .###.",
    "V": "#...# #...# #...# #...# #...# .#.#. ..#..",
    "W": "#...# #...# #...# #.#.# #.#.# #.#.# .#.#.",
    "X": "#...# #...# .#.#. ..#.. .#.#. #...# #...#",
    "Y": "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#..",
    "Z": "##### ....# ...#. ..#.. .#... #.... #####",
    "0": ".###. #...# #..## #.#.# ##..# #...# .###.",
    "1": "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.",
    "2": ".###. #...# ....# ...#. ..#.. .#... #####",
    "3": "##### ...#. ..#.. ...#. ....# #...# .###.",
    "4": "...#. ..##. .#.#. #..#. ##### ...#. ...#.",
    "5": "##### #.... ####. ....# ....# #...# .###.",
    "6": "..##. .#... #.... ####. #...# #...# .###.",
    "7": "##### ....# ...#. ..#.. .#... .#... .#...",
    "8": ".###. #...# #...# .###. #...# #...# .###.",
    "9": ".###. #...# #...# .#### ....# ...#. .##..",
    " ": "..... ..... ..... ..... ..... ..... .....",
    ".": "..... ..... ..... ..... ..... .##.. .##..",
    ",": "..... ..... ..... ..... .##.. ..#.. .#...",
    ":": "..... .##.. .##.. ..... .##.. .##.. .....",
    "%": "##... ##..# ...#. ..#.. .#... #..## ...##",
    "/": "..... ....# ...#. ..#.. .#... #.... .....",
    "(": "...#. ..#.. .#... .#... .#... ..#.. ...#.",
    ")": ".#... ..#.. ...#. ...#. ...#. ..#.. .#...",
    "-": "..... ..... ..... ##### ..... ..... .....",
    "=": "..... ..... ##### ..... ##### ..... .....",
    "+": "..... ..#.. ..#.. ##### ..#.. ..#.. .....",
    "_": "..... ..... ..... ..... ..... ..... #####",
    "'": "..#.. ..#.. .#... ..... ..... ..... .....",
    "<": "...#. ..#.. .#... #.... .#... ..#.. ...#.",
    ">": ".#... ..#.. ...#. ....# ...#. ..#.. .#...",
    "*": "..... ..#.. #.#.# .###. #.#.# ..#.. .....",
    "#": ".#.#. .#.#. ##### .#.#. ##### .#.#. .#.#.",
    "!": "..#.. ..#.. ..#.. ..#.. ..#.. ..... ..#..",
    "?": ".###. #...# ....# ...#. ..#.. ..... ..#..",
}
FONT = {ch: [row for row in rows.split()] for ch, rows in _GLYPHS.items()}

WHITE = (255, 255, 255)
BLACK = (20, 20, 20)
GREY = (150, 150, 150)
LIGHT = (232, 232, 232)
COLORS = {
    "amcommit": (31, 119, 180),
    "raw": (140, 140, 140),
    "threadpool": (255, 127, 14),
    "sequential": (214, 39, 40),
    "hadoop": (44, 160, 44),
}


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        self.px = bytearray(WHITE * (width * height))

    def rect(self, x: int, y: int, w: int, h: int, color: tuple[int, int, int]) -> None:
        x0, y0, x1, y1 = max(0, x), max(0, y), min(self.w, x + w), min(self.h, y + h)
        if x1 <= x0 or y1 <= y0:
            return
        line = bytes(color) * (x1 - x0)
        for yy in range(y0, y1):
            i = (yy * self.w + x0) * 3
            self.px[i : i + len(line)] = line

    def text(self, x: int, y: int, s: str, color: tuple[int, int, int] = BLACK, scale: int = 2) -> int:
        """Draw ``s`` with its top-left at (x, y); returns the x after the text."""
        for ch in s.upper():
            g = FONT.get(ch, FONT["?"])
            for r, row in enumerate(g):
                for c, bit in enumerate(row):
                    if bit == "#":
                        self.rect(x + c * scale, y + r * scale, scale, scale, color)
            x += 6 * scale
        return x

    @staticmethod
    def text_width(s: str, scale: int = 2) -> int:
        return len(s) * 6 * scale

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3 : (y + 1) * self.w * 3]) for y in range(self.h))

        def chunk(tag: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

        ihdr = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


Bar = tuple[str, float, str, str]  # label, value, value text, colour key


def _kind(label: str) -> str:
    lo = label.lower()
    for key in ("amcommit", "raw", "thread", "sequential", "hadoop"):
        if key in lo:
            return "threadpool" if key == "thread" else key
    return "raw"


def panels(payload: dict[str, Any]) -> list[tuple[str, list[Bar]]]:
    res = payload.get("results", {})
    out: list[tuple[str, list[Bar]]] = []
    em = res.get("emulators", {}).get("rows", [])
    if em:
        for backend in sorted({r["backend"] for r in em}):
            biggest = max(r["files"] for r in em if r["backend"] == backend)
            rs = [r for r in em if r["backend"] == backend and r["files"] == biggest]
            name = "AZURITE" if backend == "azurite" else "FAKE-GCS-SERVER"
            out.append(
                (
                    f"{name}, {biggest:,} FILES: RENAMES/S (RENAME PHASE)",
                    [
                        (
                            r["contender"],
                            r["renames_per_s"],
                            f"{r['renames_per_s']:,.0f}",
                            _kind(r["contender"]),
                        )
                        for r in rs
                    ],
                )
            )
            out.append(
                (
                    f"{name}, {biggest:,} FILES: CLIENT CPU MS PER FILE",
                    [
                        (
                            r["contender"],
                            r["cpu_ms_per_file"],
                            f"{r['cpu_ms_per_file']:.2f}",
                            _kind(r["contender"]),
                        )
                        for r in rs
                    ],
                )
            )
    lat = res.get("latency", {}).get("rows", [])
    for backend in sorted({r["backend"] for r in lat}):
        rs = [r for r in lat if r["backend"] == backend]
        name = "AZURITE" if backend == "azurite" else "FAKE-GCS-SERVER"
        out.append(
            (
                f"+50 MS PER REQUEST, {name}: FILES/S",
                [
                    (
                        r["contender"].replace("(sample: ", "(SAMPLE ").replace(" tasks)", ")"),
                        r["files_per_s"],
                        f"{r['files_per_s']:,.0f}",
                        _kind(r["contender"]),
                    )
                    for r in rs
                ],
            )
        )
    sp = res.get("spark", {}).get("job_commit", [])
    if sp:
        out.append(
            (
                f"LOCAL JOB COMMIT, {sp[0]['files']:,} FILES: MILLISECONDS (LOWER IS BETTER)",
                [
                    (r["committer"], r["job_commit_ms"], f"{r['job_commit_ms']:,.0f}", _kind(r["committer"]))
                    for r in sp
                ],
            )
        )
    return out


def plot(payload: dict[str, Any], path: str | Path) -> Path:
    """Draw the panels of ``payload`` (benchmarks.json) into ``path``."""
    ps = panels(payload)
    width, label_w, bar_w, row_h = 1100, 420, 560, 24
    height = 70 + sum(40 + row_h * len(bars) + 16 for _, bars in ps)
    cv = Canvas(width, max(height, 120))
    m = payload.get("machine", {})
    cv.text(16, 14, "AMCOMMIT BENCHMARKS", BLACK, 3)
    cv.text(
        16,
        44,
        f"{m.get('date', '')}, {m.get('cpus', '?')} CORES / {m.get('memory_gib', '?')} GIB, MODE {payload.get('mode', '')}",
        GREY,
        2,
    )
    y = 74
    for title, bars in ps:
        cv.text(16, y, title, BLACK, 2)
        y += 26
        top = max((v for _, v, _, _ in bars), default=0) or 1.0
        for label, v, vt, kind in bars:
            cv.rect(label_w, y, bar_w, row_h - 6, LIGHT)
            lw = label[: (label_w - 24) // 12]
            cv.text(label_w - 8 - cv.text_width(lw), y + 2, lw, BLACK, 2)
            n = int(bar_w * v / top) if v > 0 else 0
            cv.rect(label_w, y, n, row_h - 6, COLORS.get(kind, GREY))
            cv.text(label_w + bar_w + 10, y + 2, vt, BLACK, 2)
            y += row_h
        y += 16
    out = Path(path)
    out.write_bytes(cv.png())
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    src = Path(args[0]) if args else Path(__file__).parent / "results" / "benchmarks.json"
    dst = Path(args[1]) if len(args) > 1 else src.with_suffix(".png")
    print(plot(json.loads(src.read_text()), dst))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
