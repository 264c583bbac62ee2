# The scripts under scripts/ delete only what they made (scripts/lib/owned-dir.bash): a folder a user
# names as a script's output, without the marker the script writes when it makes one, is refused
# with what was expected and what was found, and left as it was; and a relative path a user gives is
# resolved against the folder the script is run from, not the repository root. Checked for
# seed-replay.sh (SEED_OUT), demo.sh (DEMO_OUT) and version-bisect.sh (--work's versions/).
# Nothing is built: the scripts run against a stand-in degenbisect that stops at the first command.
# The scripts run from a copy of scripts/ in a stand-in repository ($WORK/tree, with its own golden/
# and build/), so that a script that resolves a path against its repository harms the copy, never
# this checkout. A few seconds.
source "$(dirname "$0")/lib.bash"
command -v git >/dev/null || { echo "SKIP: no git"; exit 77; }
T="$WORK/tree"
mkdir -p "$T/golden/tiny-trained/smoke" "$T/build" "$WORK/caller" "$WORK/stubs"
cp -r "$SRC/scripts" "$T/"
echo committed >"$T/golden/tiny-trained/smoke/manifest.json"
echo kept >"$T/build/keep"
M=.degenbisect-made-by
# A degenbisect that stops every script at its first command (an input error, as a bad model gives).
STUB="$WORK/stubs/degenbisect"
printf '#!/bin/sh\necho "stand-in degenbisect: $*" >&2\nexit 128\n' >"$STUB"
chmod +x "$STUB"
# user_folder DIR: a folder of the user's, with files in it and in a subfolder.
user_folder() { mkdir -p "$1/src" "$1/build" "$1/seeds"; for f in keep src/keep build/keep seeds/keep; do echo mine >"$1/$f"; done; }
# intact DIR WHAT: DIR still holds every file user_folder put there.
intact() { for f in keep src/keep build/keep seeds/keep; do [ -f "$1/$f" ] || fail "$2 deleted $1/$f (a folder without $M)"; done; }
refused() { expect_out "refusing to use $1"; expect_out "expected no folder there, an empty one, or one that"; expect_out "found a folder without $M"; }
cd "$WORK/caller"

# seed-replay.sh and demo.sh: SEED_OUT and DEMO_OUT.
for s in seed-replay:SEED_OUT demo:DEMO_OUT; do
  script=${s%%:*} var=${s#*:}
  user_folder "$WORK/mine-$script"
  expect_exit 128 env "$var=$WORK/mine-$script" bash "$T/scripts/$script.sh" "$STUB"
  intact "$WORK/mine-$script" "$script.sh"
  refused "$WORK/mine-$script"
  # Relative to the caller's folder: golden here is a new folder in $WORK/caller, and the
  # repository's golden/ is not touched.
  expect_exit 128 env "$var=golden" bash "$T/scripts/$script.sh" "$STUB"
  [ -f "$T/golden/tiny-trained/smoke/manifest.json" ] || fail "$var=golden run from another folder emptied the repository's golden/"
  [ "$(cat "$WORK/caller/golden/$M" 2>/dev/null)" = "scripts/$script.sh" ] ||
    fail "$var=golden was not made in the caller's folder ($WORK/caller/golden) with the marker naming scripts/$script.sh"
  # Its own folder, from an earlier run, is replaced.
  echo old >"$WORK/caller/golden/stale"
  expect_exit 128 env "$var=golden" bash "$T/scripts/$script.sh" "$STUB"
  [ ! -e "$WORK/caller/golden/stale" ] || fail "$script.sh did not replace its own output folder"
  rm -rf "$WORK/caller/golden"
done
# A folder made by the other script is not this one's either.
expect_exit 128 env DEMO_OUT=x bash "$T/scripts/demo.sh" "$STUB"
expect_exit 128 env SEED_OUT=x bash "$T/scripts/seed-replay.sh" "$STUB"
expect_out "found a folder made by scripts/demo.sh"

# version-bisect.sh: --work's versions/ (the throwaway repository of versions) is replaced on every
# bisect; a versions/ that it did not make is refused before any step runs.
mkdir -p "$WORK/vw"
user_folder "$WORK/vw/versions"
expect_exit 2 env DEGENBISECT="$STUB" bash "$T/scripts/version-bisect.sh" --engine sglang --work "$WORK/vw" \
  --good 1.0 --bad 1.2 --versions "1.0 1.1 1.2" -- --server-cmd '@ENGINE@ --port {port}'
intact "$WORK/vw/versions" version-bisect.sh
refused "$WORK/vw/versions"

echo "script safety: ok"
