#!/bin/sh
# bench-report.sh [BENCHTIME] — run the benchmarks of `make bench` (as
# root: they mount FUSE and drop caches) and print the raw output headed by
# the date, kernel and core count, for docs/benchmarks.md. Read the ratios:
# every benchmark measures ctxfs and its native reference in the same loop.
set -eu
cd "$(dirname "$0")/.."
bt=${1:-2s}
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
echo "kernel: $(uname -r), cores: $(nproc), go: $(go env GOVERSION)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
go test -run='^$' -bench=. -benchtime="$bt" -timeout 30m ./session/... ./index/... ./server/... ./integration/...
echo "wall: $(( $(date +%s) - start )) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
