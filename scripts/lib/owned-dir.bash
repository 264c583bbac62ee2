# Sourced by the scripts that replace or empty a folder whose name a user can give. The rule: a
# script deletes only what it made. When a script makes such a folder it writes a marker file in it,
# .degenbisect-made-by, whose first line names the script (scripts/NAME); before it deletes the
# folder, or anything in it, it checks that the marker is there and names it. A folder without the
# marker (the user's own, a committed one such as golden/) is refused with a message that says what
# was expected and what was found, and nothing in it is touched. An empty folder has nothing to lose:
# it is taken (the marker written into it).

DEGEN_MARKER=.degenbisect-made-by

# owned_abs PATH: PATH made absolute against the current folder. The scripts call it before they
# change folder, so that a relative path a user gives means what it means where the user is.
owned_abs() {
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$PWD/$1" ;;
  esac
}

# owned_check DIR WHO [LEGACY]: 0 when WHO (scripts/NAME) may use DIR and delete what is in it: DIR
# is absent, an empty folder, a folder with WHO's marker, or a folder that the function LEGACY (when
# given) accepts as one WHO made before the marker existed. Otherwise prints why on stderr and
# returns 1.
owned_check() {
  local dir=$1 who=$2 legacy=${3:-} found made entries
  [ -e "$dir" ] || [ -L "$dir" ] || return 0
  if [ ! -d "$dir" ]; then
    found="something that is not a folder"
  elif [ -f "$dir/$DEGEN_MARKER" ]; then
    made=$(head -n 1 "$dir/$DEGEN_MARKER")
    [ "$made" = "$who" ] && return 0
    found="a folder made by ${made:-something else} (its $DEGEN_MARKER says so)"
  elif [ -z "$(ls -A "$dir" 2>/dev/null)" ]; then
    return 0
  elif [ -n "$legacy" ] && "$legacy" "$dir"; then
    return 0
  else
    entries=$(ls -A "$dir" 2>/dev/null | head -n 4 | paste -sd ' ' -)
    found="a folder without $DEGEN_MARKER, holding: $entries$([ "$(ls -A "$dir" | wc -l)" -gt 4 ] && echo ' ...')"
  fi
  echo "${who##*/}: refusing to use $dir as its output folder: expected no folder there, an empty one," \
    "or one that $who made (with a $DEGEN_MARKER file naming it); found $found. Nothing in it was" \
    "touched: name another folder, or remove this one yourself if it is yours to remove." >&2
  return 1
}

# owned_mark DIR WHO: makes DIR where absent and writes WHO's marker in it (call after owned_check).
owned_mark() {
  mkdir -p "$1" && printf '%s\n' "$2" >"$1/$DEGEN_MARKER"
}

# owned_fresh DIR WHO [LEGACY]: DIR as a new, empty folder of WHO's (its marker in it): an earlier
# one of WHO's is deleted first. Returns 1, nothing touched, when owned_check refuses DIR.
owned_fresh() {
  owned_check "$1" "$2" "${3:-}" || return 1
  if [ -d "$1" ] && [ -n "$(ls -A "$1" 2>/dev/null)" ]; then rm -rf "$1"; fi
  owned_mark "$1" "$2"
}
