#!/usr/bin/env python3
"""render_check.py - look at built chapters the way a reader does, in headless Chromium.

    render_check.py --book DIR --out DIR PAGE=WANTS [PAGE=WANTS ...]

PAGE is an HTML file of the built book; WANTS is a comma list of code, math, figure, or
"auto" (whatever the page's HTML contains). For each page:

1. Layout: a copy of the page with a probe script appended (the book itself has no
   scripts) is loaded with --dump-dom; the probe reports the page height, how many code
   blocks have a height, how many <math> elements Chromium lays out as MathML (display
   "math" or "block math", i.e. really typeset, not shown as plain text) and how many
   images decoded (naturalWidth > 0). Each wanted kind must be there; no image may be broken.
2. Pixels: the page is screenshot at its full height (half scale) to PNG, decoded with the
   standard library (zlib) and must not be blank: enough distinct colours and ink. Wanted
   code must show its background colour (#f4efe6), math its ink (#0b6e69), and the course
   map's figure its fill (#c8553d, used by no CSS rule) — see style.css.
Exit 1, naming the page and what is missing, when a check fails.
"""
import argparse
import collections
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

CODE_BG, FIGURE_FILL = (0xf4, 0xef, 0xe6), (0xc8, 0x55, 0x3d)
WIDTH, MAX_HEIGHT, SCALE = 1000, 16000, 0.5   # CSS pixels; the PNG is SCALE times that
PROBE = """<script>
window.addEventListener('load', function () {
  var all = function (q) { return Array.prototype.slice.call(document.querySelectorAll(q)); };
  var r = {
    height: document.documentElement.scrollHeight,
    code: all('pre.sourceCode').filter(function (e) { return e.getBoundingClientRect().height > 0; }).length,
    math: all('math').filter(function (e) { return /math/.test(getComputedStyle(e).display); }).length,
    math_elements: all('math').length,
    images: all('img').filter(function (i) { return i.complete && i.naturalWidth > 0; }).length,
    broken_images: all('img').filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
                             .map(function (i) { return i.getAttribute('src'); })
  };
  var p = document.createElement('pre'); p.id = 'kn-probe'; p.textContent = JSON.stringify(r);
  document.body.appendChild(p);
});
</script>"""


def chromium(*args):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    cmd = [exe, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def probe(path):
    """Load a probed copy of the page and return what the probe found."""
    with open(path, encoding="utf-8") as f:
        page = f.read()
    copy = path[:-len(".html")] + ".probe.html"
    with open(copy, "w", encoding="utf-8") as f:
        f.write(page.replace("</body>", PROBE + "\n</body>"))
    try:
        r = chromium("--window-size=%d,1000" % WIDTH, "--dump-dom", "file://" + os.path.abspath(copy))
    finally:
        os.remove(copy)
    m = re.search(r'<pre id="kn-probe">(.*?)</pre>', r.stdout, re.S)
    if not m:
        raise SystemExit("render: %s: the probe did not run (chromium said: %s)" % (path, r.stderr[-500:]))
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def decode_png(path):
    """(width, height, bytes per pixel, pixels) of an 8-bit RGB/RGBA, non-interlaced PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat = 8, []
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise ValueError("unsupported PNG (depth %d, colour type %d)" % (depth, ctype))
        elif kind == b"IDAT":
            idat.append(body)
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), w * bpp
    prev, out = bytearray(stride), bytearray()
    for y in range(h):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                row[i] = (row[i] + row[i - bpp]) & 255
        elif f == 2:
            row = bytearray((a + b) & 255 for a, b in zip(row, prev))
        elif f == 3:
            for i in range(stride):
                row[i] = (row[i] + ((row[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif f == 4:
            for i in range(stride):
                a, b = (row[i - bpp] if i >= bpp else 0), prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += row
        prev = row
    return w, h, bpp, bytes(out)


def colours(path):
    """Counter of (r, g, b) over the screenshot, and its size."""
    w, h, bpp, px = decode_png(path)
    return collections.Counter(zip(px[0::bpp], px[1::bpp], px[2::bpp])), w, h


def math_ink(counts):
    """Pixels of the math ink #0b6e69 or its blends with the white page (anti-aliased
    glyphs): green and blue well above red and close to each other. No other ink of the
    book (the highlighting's blues and greens, the reds, the greys) is of that hue."""
    return sum(n for (r, g, b), n in counts.items() if g - r >= 25 and b - r >= 25 and abs(g - b) <= 20)


def check_page(book, out, page, wants):
    path, problems = os.path.join(book, page), []
    with open(path, encoding="utf-8") as f:
        html = f.read()
    if wants == ["auto"]:
        wants = [k for k, probe_ in (("code", '<pre class="sourceCode'), ("math", "<math"), ("figure", "<img"))
                 if probe_ in html]
    found = probe(path)
    if "code" in wants and found["code"] == 0:
        problems.append("no code block is laid out")
    if "math" in wants and found["math"] == 0:
        problems.append("no formula is typeset as MathML (%d <math> elements)" % found["math_elements"])
    if "figure" in wants and found["images"] == 0:
        problems.append("no image decoded")
    if found["broken_images"]:
        problems.append("broken images: %s" % ", ".join(found["broken_images"]))
    height = min(max(found["height"], 600), MAX_HEIGHT)
    png = os.path.join(out, page.replace(".html", ".png"))
    r = chromium("--window-size=%d,%d" % (WIDTH, height), "--force-device-scale-factor=%g" % SCALE,
                 "--screenshot=" + os.path.abspath(png), "file://" + os.path.abspath(path))
    if not os.path.exists(png):
        problems.append("no screenshot (chromium said: %s)" % r.stderr[-300:])
        return problems, found
    counts, w, h = colours(png)
    white = counts.get((255, 255, 255), 0)
    seen = {"colours": len(counts), "ink": w * h - white, "code_bg": counts.get(CODE_BG, 0),
            "math_ink": math_ink(counts), "figure_fill": counts.get(FIGURE_FILL, 0)}
    found["pixels"] = seen
    if abs(w - WIDTH * SCALE) > 1 or abs(h - height * SCALE) > 1:
        problems.append("screenshot is %dx%d, expected %dx%d" % (w, h, WIDTH * SCALE, height * SCALE))
    if seen["colours"] < 50 or seen["ink"] < 0.01 * w * h:
        problems.append("the screenshot is (nearly) blank: %d colours, %d non-white pixels" % (
            seen["colours"], seen["ink"]))
    if "code" in wants and seen["code_bg"] < 500:
        problems.append("code blocks are not visible (%d pixels of #f4efe6)" % seen["code_bg"])
    if "math" in wants and seen["math_ink"] < 30:
        problems.append("formulas are not visible (%d pixels of the hue of #0b6e69)" % seen["math_ink"])
    if page.startswith("00-") and "figure" in wants and seen["figure_fill"] < 1000:
        problems.append("the pipeline figure is not visible (%d pixels of #c8553d)" % seen["figure_fill"])
    return problems, found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--book", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("pages", nargs="+", metavar="PAGE=WANTS")
    args = ap.parse_args()
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        print("render: chromium is not installed (make deps installs it); cannot check the rendered book")
        return 1
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    for spec in args.pages:
        page, _, wants = spec.partition("=")
        wants = wants.split(",") if wants else ["auto"]
        problems, found = check_page(args.book, args.out, page, wants)
        print("render %s (wants %s): %s" % (page, ",".join(wants), json.dumps(found, sort_keys=True)))
        for p in problems:
            print("render %s: %s" % (page, p))
        failed += bool(problems)
    print("render: %d page(s) checked, %d failed; screenshots in %s" % (len(args.pages), failed, args.out))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
