#!/usr/bin/env python3
"""Prints what a PNG screenshot holds, for tests/browser/check_report.sh.

    png_stats.py FILE.png

Output, one `key value` per line: width, height, colors (distinct RGB colours)
and nonwhite_permille (pixels that are not near-white, per thousand).
Standard library only: the PNG is decoded here with zlib (8-bit RGB or RGBA,
non-interlaced, as Chromium writes its screenshots). Exit 1 on any other PNG.
"""
import struct
import sys
import zlib

# A pixel whose channels are all at least this is background.
NEAR_WHITE = 245


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace != 0:
        sys.exit(f"{path}: depth {depth}, colour type {color}, interlace {interlace}: unsupported")
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                line[i] = (line[i] + paeth(a, b, c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def main():
    width, height, bpp, rows = decode(sys.argv[1])
    colors, nonwhite = set(), 0
    for line in rows:
        for x in range(0, len(line), bpp):
            r, g, b = line[x], line[x + 1], line[x + 2]
            colors.add((r, g, b))
            if min(r, g, b) < NEAR_WHITE:
                nonwhite += 1
    print(f"width {width}")
    print(f"height {height}")
    print(f"colors {len(colors)}")
    print(f"nonwhite_permille {1000 * nonwhite // (width * height)}")


if __name__ == "__main__":
    main()
