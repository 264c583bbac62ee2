# No function of src/ or kernels/ is over 100 lines (scripts/function-lengths.py, docs/architecture.md); an
# over-long one is named with its file, line and length. The script itself is checked on a tiny
# tree with one planted 130-line function, so that a check that could never fail is caught.
source "$(dirname "$0")/lib.bash"
expect_exit 0 python3 "$SRC/scripts/function-lengths.py" "$SRC"
expect_out "none over 100 lines"
# a fake ROOT: a 130-line kernel behind __launch_bounds__, a 100-line function (at the limit, fine)
mkdir -p "$WORK/root/src/model" "$WORK/root/kernels"
{
  echo 'template <typename T>'
  echo 'static __global__ void __launch_bounds__(256)'
  echo '    planted_kernel(T* x, int n) {'
  for _ in $(seq 126); do echo '  x[0] += 1;'; done
  echo '}'
} >"$WORK/root/kernels/planted.cu"
{
  echo 'namespace degen {'
  echo 'int at_the_limit(int x) {'
  for _ in $(seq 98); do echo '  x += 1;'; done
  echo '}'
  echo '}  // namespace degen'
} >"$WORK/root/src/model/limit.cpp"
expect_exit 1 python3 "$SRC/scripts/function-lengths.py" "$WORK/root"
expect_out "kernels/planted.cu:1: planted_kernel 130 lines (limit 100)"
expect_out "function-lengths: 1 function(s) over 100 lines"
if grep -q at_the_limit "$WORK/out"; then cat "$WORK/out" >&2; fail "a 100-line function is reported"; fi
# a file whose braces do not balance cannot be measured: an error, not a pass
printf 'void open_brace() {\n' >"$WORK/root/src/model/broken.cpp"
expect_exit 128 python3 "$SRC/scripts/function-lengths.py" "$WORK/root"
expect_out "broken.cpp: 1 brace(s) left open at the end"
echo ok
