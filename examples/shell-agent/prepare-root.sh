#!/usr/bin/env bash
# prepare-root.sh [--root R] UID AGENT
#
# Fills the chroot of AGENT for UID, R/home/UID/agent/AGENT/root/, through
# the ctxfs mount: bin/busybox (a copy of the static /bin/busybox of
# Debian's busybox-static), one symlink in bin/ per busybox applet,
# tmp/ (mode 1777) and proc/ (mode 0555: the jail mounts its own read-only
# /proc there; the server would make it, 0700, if it were missing). Run it as root (root may make any uid's home through
# the mount: it makes root/, then runs the rest as UID), or as UID itself. Running it again changes nothing; files of
# your own already in bin/ are left alone.
#
# R defaults to $CTX_ROOT, else /ctx. BUSYBOX names another static busybox.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
USAGE="[--root R] UID AGENT"
# shellcheck source=../lib/options.sh
. "$here/../lib/options.sh"
parse_options "$@"
[ ${#args[@]} -eq 2 ] || usage
uid=${args[0]} agent=${args[1]}
check_uid_agent "$uid" "$agent"
become_uid "$uid" "$agent" "$@"

busybox=${BUSYBOX:-/bin/busybox}
if [ ! -x "$busybox" ]; then
	die "$busybox is missing: install busybox-static (apt-get install busybox-static)"
fi
# The chroot has no libraries: a dynamically linked busybox (Debian's
# plain busybox package) would not start there.
if command -v ldd >/dev/null && ldd "$busybox" >/dev/null 2>&1; then
	die "$busybox is dynamically linked and cannot run in a chroot: install busybox-static (apt-get install busybox-static)"
fi

need_mount

dest=$root/home/$uid/agent/$agent/root
mkdir -p "$dest/bin" "$dest/tmp" "$dest/proc"
chmod 1777 "$dest/tmp"
chmod 0555 "$dest/proc"

if cmp -s "$busybox" "$dest/bin/busybox"; then
	echo "$dest/bin/busybox is up to date"
else
	tmp=$dest/bin/.busybox.new
	rm -f "$tmp"
	cp "$busybox" "$tmp"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$dest/bin/busybox"
	echo "copied $busybox to $dest/bin/busybox"
fi

made=0 kept=0
for applet in $("$busybox" --list); do
	case $applet in busybox | */* | . | ..) continue ;; esac
	link=$dest/bin/$applet
	if [ -L "$link" ] && [ "$(readlink "$link")" = busybox ]; then
		continue
	fi
	if [ -e "$link" ] || [ -L "$link" ]; then
		kept=$((kept + 1))
		echo "left your own $link as it is"
		continue
	fi
	ln -s busybox "$link"
	made=$((made + 1))
done
echo "$dest: bin/ ($made new applet links, $(find "$dest/bin" -maxdepth 1 -type l | wc -l) in all, $kept of yours kept), tmp/, proc/"
