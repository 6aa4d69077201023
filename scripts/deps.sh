#!/usr/bin/env bash
# Installs what the tests need (Debian packages) when any is missing, and
# the Go modules. Run as root on a fresh machine; a no-op once installed.
set -euo pipefail
# MooseFS 3 (moosefs-*): the distributed filesystem the integration tests
# start in a network namespace (integration/moosefs_helpers_test.go); its
# packages ship no running service here (no systemd), the tests start it.
# GlusterFS 10 (glusterfs-server, glusterfs-client): the second one, whose
# glusterd the tests start in a namespace of their own with its state in a
# temporary directory (integration/glusterfs_helpers_test.go).
# etcd (etcd-server, 3.4): the tests start their own members
# (internal/testkit/etcd.go); the service its package enables is stopped.
need=()
for pair in fusermount3:fuse3 jq:jq stress-ng:stress-ng fio:fio setfattr:attr less:less setpriv:util-linux python3:python3 strace:strace busybox:busybox-static sqlite3:sqlite3 ip:iproute2 mfsmaster:moosefs-master mfschunkserver:moosefs-chunkserver mfsmount:moosefs-client glusterd:glusterfs-server glusterfs:glusterfs-client etcd:etcd-server; do
	cmd=${pair%%:*} pkg=${pair##*:}
	command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled etcd >/dev/null 2>&1; then
	systemctl disable --now etcd >/dev/null 2>&1 || true
fi
go mod download
# The model-API simulator that agent/provider's tests run (@copilotkit/aimock,
# pinned by its package-lock.json). Without npm the tests skip it, unless
# CTXFS_REQUIRE_AIMOCK=1 makes them fail.
aimock_dir="$(cd "$(dirname "$0")/.." && pwd)/agent/provider/testdata/aimock"
if [ ! -d "$aimock_dir/node_modules" ]; then
	if command -v npm >/dev/null 2>&1; then
		echo "deps: installing the aimock simulator"
		(cd "$aimock_dir" && npm ci --no-audit --no-fund)
	else
		echo "deps: npm missing; the aimock tests of agent/provider will be skipped" >&2
	fi
fi
# The coding-agent CLIs whose streams agent/cli maps (Claude Code, Codex,
# Gemini CLI, opencode; pinned by agent/cli/testdata/npm/package-lock.json,
# about 1.3 GB unpacked, 25-40 s to install here; their install scripts are
# not run and are not needed; the lock lists only the opencode builds the
# registry here serves, so that npm ci accepts it). Without npm the tests that run them skip,
# unless CTXFS_REQUIRE_CLIS=1 (CI) makes that a failure here and there.
clis_dir="$(cd "$(dirname "$0")/.." && pwd)/agent/cli/testdata/npm"
if [ ! -d "$clis_dir/node_modules" ]; then
	if command -v npm >/dev/null 2>&1; then
		echo "deps: installing the coding-agent CLIs"
		(cd "$clis_dir" && npm ci --no-audit --no-fund)
	elif [ "${CTXFS_REQUIRE_CLIS:-}" = 1 ]; then
		echo "deps: npm missing; the coding-agent CLIs of agent/cli cannot be installed" >&2
		exit 1
	else
		echo "deps: npm missing; the agent/cli tests that run the CLIs will be skipped" >&2
	fi
fi
