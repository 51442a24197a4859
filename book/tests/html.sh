#!/usr/bin/env bash
# html.sh DIR — the HTML book builds into DIR from the lessons as they are (broken
# listings are the book-listings step's to report, so this builds --lenient) and has what
# a reader needs: a page per lesson in lab order with prev/next links, the contents page
# listing every chapter, the index of kn_ names, the style sheet.
set -u
cd "$(dirname "$0")/../.."
dir=$1
"${PYTHON:-python3}" book/book.py build --lenient --no-pdf --out "$dir" || { echo "FAIL: the book did not build"; exit 1; }
fail=0
check() { "$@" || { echo "FAIL: $*"; fail=1; }; }
check test -s "$dir/index.html"
check test -s "$dir/kn-index.html"
check test -s "$dir/style.css"
mapfile -t lessons < <(ls lessons/[0-9][0-9]-*.md | sort)
check test ${#lessons[@]} -gt 0
prev=
for i in "${!lessons[@]}"; do
    page=$(basename "${lessons[$i]}" .md).html
    check test -s "$dir/$page"
    check grep -q "href=\"$page\"" "$dir/index.html"
    [ -n "$prev" ] && { check grep -q "rel=\"prev\" href=\"$prev\"" "$dir/$page";
                        check grep -q "rel=\"next\" href=\"$page\"" "$dir/$prev"; }
    prev=$page
done
# The course map quotes kn_status: the index must link it to the listing.
check grep -q 'href="00-course-map.html#lst-kn_status"' "$dir/kn-index.html"
check grep -q '<math' "$dir/00-course-map.html"
check grep -q '<pre class="sourceCode' "$dir/00-course-map.html"
[ $fail -eq 0 ] && echo "html.sh: ${#lessons[@]} chapters, contents, index and navigation in $dir"
exit $fail
