#!/usr/bin/env bash
# install.sh [--root R]
#
# Installs the shell agent: its program as R/agent/shell and its definition
# as R/agent/shell.d/ (abi jsonl, isolation chroot, AGENTS.md). R defaults
# to $CTX_ROOT, else /ctx. Running it again replaces them with these
# copies. The agent's chroot is filled per uid by prepare-root.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
USAGE="[--root R]"
# shellcheck source=../lib/options.sh
. "$here/../lib/options.sh"
parse_options "$@"
[ ${#args[@]} -eq 0 ] || usage

agents=$root/agent
mkdir -p "$agents"
[ -w "$agents" ] || die "$agents is not writable: run me as root (or as the owner of $root)"

# put $1 at $2 (mode $3) by a rename: a run never starts a half-copied file
place() {
	local tmp
	tmp=$(mktemp "$(dirname "$2")/.install.XXXXXX")
	cp "$1" "$tmp"
	chmod "$3" "$tmp"
	mv -f "$tmp" "$2"
}

# The program first: a definition without it would be answered by
# debug/echo.
place "$here/shell" "$agents/shell" 0755
if [ -d "$agents/shell.d" ]; then
	for f in "$here"/shell.d/*; do
		place "$f" "$agents/shell.d/$(basename "$f")" 0644
	done
else
	# A new definition appears whole, by one rename.
	stage=$(mktemp -d "$agents/.shell.d.XXXXXX")
	for f in "$here"/shell.d/*; do
		cp "$f" "$stage/"
	done
	chmod 0755 "$stage"
	chmod 0644 "$stage"/*
	mv "$stage" "$agents/shell.d"
fi
echo "installed $agents/shell and $agents/shell.d/"

# A running server makes the socket within half a second.
if mountpoint -q "$root/home" 2>/dev/null; then
	for _ in $(seq 40); do
		[ -S "$agents/shell.sock" ] && break
		sleep 0.05
	done
	if [ -S "$agents/shell.sock" ]; then
		echo "the server answers at $agents/shell.sock"
	else
		echo "warning: $agents/shell.sock did not appear; is the server serving $root?" >&2
	fi
fi
echo "next: prepare-root.sh --root $root UID shell, for each uid that will use it"
