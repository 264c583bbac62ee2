# The HTML report in a real browser: headless Chromium renders the report of the committed fixtures
# (tests/fixtures/report: bisect, sweep, compare) to a PNG, with and without its script, and each
# screenshot must not be blank: a PNG, much larger than the screenshot of an empty page of the same
# size (a one-colour 1200x2000 picture compresses to a few KB; the report's text, plots and grid do
# not). Skips (77) without Chromium; `scripts/install-deps.sh --browser` installs it. The PNGs stay
# in the work folder (printed below) for a person to look at.
source "$(dirname "$0")/lib.bash"
browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
done
[ -n "$browser" ] || { echo "report_browser: no chromium (scripts/install-deps.sh --browser installs it); skipped"; exit 77; }

# From the source tree, so the compare result's model folder (models/tiny-qwen35) decodes the text
# when `make models` has run; without it the token ids are shown, which renders as well.
cd "$SRC"
expect_exit 0 "$BIN" report tests/fixtures/report -o "$WORK/report.html"
printf '<!DOCTYPE html><html><head><meta charset="utf-8"><title>blank</title></head><body></body></html>\n' >"$WORK/blank.html"

shot() {  # shot HTML PNG [extra chromium flags]
  local html=$1 png=$2; shift 2
  local profile
  profile=$(mktemp -d)
  set +e
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --user-data-dir="$profile" --hide-scrollbars \
      --window-size=1200,2000 "$@" --screenshot="$png" "file://$html" >"$WORK/chromium.log" 2>&1
  local rc=$?
  set -e
  rm -rf "$profile"
  [ $rc = 0 ] && [ -s "$png" ] || { cat "$WORK/chromium.log" >&2; fail "chromium did not write $png (exit $rc)"; }
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$png is not a PNG"
}
size() { wc -c <"$1" | tr -d ' '; }

shot "$WORK/blank.html" "$WORK/blank.png"
shot "$WORK/report.html" "$WORK/report.png"
# Without JavaScript: the same page with its one <script> (table sorting) removed.
sed -z 's#<script>.*</script>##' "$WORK/report.html" >"$WORK/report-nojs.html"
grep -q '<script' "$WORK/report-nojs.html" && fail "could not strip the script"
shot "$WORK/report-nojs.html" "$WORK/report-nojs.png"
blank=$(size "$WORK/blank.png")
for png in "$WORK/report.png" "$WORK/report-nojs.png"; do
  s=$(size "$png")
  echo "report_browser: $png: $s bytes (blank page: $blank bytes)"
  [ "$s" -gt 51200 ] || fail "$png is $s bytes: the page looks blank"
  [ "$s" -gt $((blank * 8)) ] || fail "$png ($s bytes) is hardly larger than a blank page ($blank bytes)"
done
echo "report_browser: ok; look at $WORK/report.png"
