# The chat-template fixture tests/fixtures/chat/qwen35.json is current: tools/make_chat_fixtures.py
# renders the same conversations with jinja2 and the official Qwen3.5 template now (the C++ side is
# tests/test_chat_template.cpp). Skips (77) without python3, jinja2 or the template file (made by
# scripts/build-llama-cpp.sh, or its source distribution in build/llama-sdist or $DEGEN_LLAMA_CACHE).
# Args: BINARY SOURCE_DIR WORKDIR; exit 0 pass, 77 skip.
source "$(dirname "$0")/lib.bash"

command -v python3 >/dev/null || { echo "SKIP: no python3" >&2; exit 77; }
set +e
python3 "$SRC/tools/make_chat_fixtures.py" --check >"$WORK/out" 2>&1
rc=$?
set -e
cat "$WORK/out"
case $rc in
  0) echo "PASS" ;;
  77) echo "SKIP: the generator cannot run here (see above)" >&2 ;;
  *) fail "tests/fixtures/chat/qwen35.json is not what the official template renders now (exit $rc)" ;;
esac
exit $rc
