#!/usr/bin/env bash
# render.sh DIR — render two chapters of the book in DIR (built by html.sh) in headless
# Chromium and check code, math and a figure as a reader sees them (render_check.py):
# the course map must show all three; the next chapter (the index page until a second
# lesson exists) must show whatever its HTML contains.
set -u
cd "$(dirname "$0")/../.."
dir=$1
command -v chromium > /dev/null || { echo "FAIL: chromium is not installed (make deps installs it)"; exit 1; }
[ -s "$dir/00-course-map.html" ] || "${PYTHON:-python3}" book/book.py build --lenient --no-pdf --out "$dir" > /dev/null
second=$(ls lessons/[0-9][0-9]-*.md | sort | sed -n 2p)
second=${second:+$(basename "$second" .md).html}
"${PYTHON:-python3}" book/render_check.py --book "$dir" --out "$dir/render" \
    00-course-map.html=code,math,figure "${second:-kn-index.html}=auto"
