#!/usr/bin/env bash
# The trained model under every fault of the catalogue: one Markdown row per fault, for docs/faults.md
# (section 4). The program is tools/fault_figures.py; this script runs it with the same options.
#
# Usage: scripts/fault-figures.sh [--bin PATH] [--fault NAME]... [--suite S] [--case ID]... [--questions N]
#                                 [--max-new-tokens N] [--no-selftest] [--json FILE]
# (--help for what each option does). Exit 0 after a run, 128 for a bad option or a missing input.
command -v python3 >/dev/null || { echo "fault-figures.sh: needs python3 (tools/fault_figures.py)" >&2; exit 128; }
DEGEN_SCRIPT_NAME=fault-figures.sh exec python3 "$(dirname "$0")/../tools/fault_figures.py" "$@"
