"""Checks that a headless-Chromium screenshot of the attention page is not blank.

    /usr/bin/python3 tests/viz/screenshot_check.py SHOT.png

Decodes the PNG here (zlib + the PNG row filters; no imaging library) and asserts: the
size is 1200x900, more than 50 colours, more than 10% of the pixels differ from the
background, and the darkest colour of the heatmap ramp and head 0's colour are both on
screen in solid areas. Shared by test_browser.sh (qkv run) and test_translate_page.sh;
read_png, the decoder, by test_image_page.sh too.
"""
import struct, sys, zlib
from collections import Counter


def read_png(path):
    """An 8-bit RGB or RGBA PNG, not interlaced: (width, height, rows), each row the
    width·3 bytes of its pixels' RGB (alpha dropped). Also used by test_image_page.sh."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    bpp = 4 if colour_type == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * bpp
    assert len(raw) == height * (stride + 1), (len(raw), width, height)
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 255
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        else:
            assert f == 0, f"filter {f}"
        rows.append(b"".join(bytes(line[i:i + 3]) for i in range(0, stride, bpp)))
        prev = line
    return width, height, rows


if __name__ == "__main__":
    width, height, rows = read_png(sys.argv[1])
    pixels = Counter(row[i:i + 3] for row in rows for i in range(0, len(row), 3))
    total = width * height
    background, most = pixels.most_common(1)[0]
    others = 1 - most / total
    print(f"screenshot {width}x{height}: {len(pixels)} colours, background #{background.hex()}, "
          f"{others:.1%} other pixels")
    assert (width, height) == (1200, 900), (width, height)
    assert len(pixels) > 50, f"only {len(pixels)} colours: a blank page?"
    assert others > 0.10, f"only {others:.1%} of pixels differ from the background"
    # The detail heatmap's largest cell is drawn in the top of the ramp (#08306b), the head-0
    # toggle in category10's #1f77b4: both must be on screen in solid areas.
    for name, rgb in (("heatmap maximum", b"\x08\x30\x6b"), ("head 0 colour", b"\x1f\x77\xb4")):
        assert pixels[rgb] >= 50, f"{name} #{rgb.hex()} covers {pixels[rgb]} pixels"
