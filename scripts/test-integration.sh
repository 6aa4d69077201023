#!/usr/bin/env bash
# The integration tests (./integration) in CTXFS_TEST_SHARDS processes at
# once, 2 by default. The package's tests run one at a time in a process,
# and most of their time is waiting (servers starting, runs, fault
# schedules, timers), not CPU: one process took 24-28 minutes on 2 cores.
# Each test makes its own servers, mounts, temp directories, network
# namespaces (named by the process's PID) and address ranges, so two
# processes share nothing but the machine. docs/benchmarks.md ("The test
# suite's time") has the measure.
#
# Tests are dealt to the shards longest first, each to the shard with the
# least time so far, by the seconds integration/testdata/durations.tsv
# gives them (a test it lacks counts as 2 s; figures gone stale only
# unbalance the shards). Once a shard ends, it prints its failed tests'
# output and the lines of no test (from test2json's events, so that
# passing tests' logs stay out of the way) and a summary; the script fails
# when any shard does. CTXFS_TEST_DURATIONS=FILE writes each test's
# seconds in this run to FILE in durations.tsv's form (how that file is
# refreshed). The shards run with SIGINT and SIGQUIT as a terminal gives
# them, whoever started the script: an asynchronous command of a shell
# without job control ignores both, and TestStopDemoOnCtrlC's Ctrl+C
# reaches programs that inherit what the test binary has.
set -euo pipefail
cd "$(dirname "$0")/.."
shards=${CTXFS_TEST_SHARDS:-2}
timeout=${CTXFS_TEST_TIMEOUT:-45m}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"${GO:-go}" test -c -o "$work/integration.test" ./integration
# test2json turns a test binary's -test.v=test2json output into events
# (go test -json's); Go no longer ships it built.
"${GO:-go}" build -o "$work/test2json" cmd/test2json
test2json=$work/test2json

# What a shard's events say, as jq definitions:
# - report($code): the output of no test (the binary's own start and end,
#   a panic's) and every line of each failed test and its subtests; all of
#   the output when the shard failed with no failed test (killed, or its
#   binary broken).
# - durations: each top-level test's seconds from its start to its end
#   (walls: go test's own Elapsed leaves out the time a test waits for its
#   parallel subtests).
# - summary: how many passed, the tests' seconds, and where the rest of
#   the shard's went (before the first test, TestMain's builds; between
#   tests; after the last, the binary's end and what still held its
#   output).
events='
def secs: .Time | capture("^(?<b>[^.]+)(\\.(?<f>[0-9]+))?Z$") | (.b + "Z" | fromdateiso8601) + ("0." + (.f // "0") | tonumber);
def top: .Test != null and (.Test | contains("/") | not);
def ended: .Action == "pass" or .Action == "fail" or .Action == "skip";
def s: . * 10 | round / 10 | tostring + " s";
def report($code): [.[] | select(.Action == "fail" and .Test != null) | .Test | split("/")[0]] as $failed
	| [.[] | select(.Action == "output")] as $out
	| if $code != 0 and ($failed | length) == 0 then $out[]
	  else $out[] | select(.Test == null or ((.Test | split("/")[0]) as $t | $failed | index($t)))
	  end
	| .Output;
def walls: reduce (.[] | select(top and (.Action == "run" or ended))) as $e ({};
	if $e.Action == "run" then .[$e.Test].run = ($e | secs) else .[$e.Test].end = ($e | secs) | .[$e.Test].how = $e.Action end)
	| with_entries(select(.value.run and .value.end) | .value.secs = .value.end - .value.run);
def durations: walls | to_entries[] | select(.value.how != "skip") | "\(.key)\t\(.value.secs * 100 | round / 100)";
def summary: ([walls[]] | sort_by(.run)) as $t
	| (map(select(.Action == "start")) | first | secs) as $start
	| (last | secs) as $fin
	| "\([$t[] | select(.how == "pass")] | length) passed, the tests'"'"' own \([$t[].secs] | add // 0 | s) (before the first \(($t[0].run // $fin) - $start | s), between them \([range(1; $t | length) | $t[.].run - $t[. - 1].end] | add // 0 | s), after the last \($fin - ($t[-1].end // $fin) | s))";
'
# The tests by their source (a -test.list would run TestMain, which builds
# the binaries the tests run).
mapfile -t tests < <(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T) {$/\1/p' integration/*_test.go)
[ "${#tests[@]}" -gt 0 ] || { echo "test-integration: no tests listed"; exit 1; }

# shard-N.names: the tests of shard N, one a line.
awk -v shards="$shards" -F'\t' '
	FNR == NR { if ($1 !~ /^#/) secs[$1] = $2; next }
	{ t[++n] = $0; s[n] = ($0 in secs) ? secs[$0] : 2 }
	END {
		for (i = 1; i <= n; i++) order[i] = i
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
			if (s[order[j]] > s[order[i]]) { k = order[i]; order[i] = order[j]; order[j] = k }
		for (i = 1; i <= n; i++) {
			best = 0
			for (k = 1; k < shards; k++) if (load[k] < load[best]) best = k
			load[best] += s[order[i]]
			print t[order[i]] > (dir "/shard-" best ".names")
		}
	}' dir="$work" integration/testdata/durations.tsv <(printf '%s\n' "${tests[@]}")

pids=()
for ((i = 0; i < shards; i++)); do
	[ -s "$work/shard-$i.names" ] || continue
	mapfile -t names < "$work/shard-$i.names"
	pattern="^($(IFS='|'; echo "${names[*]}"))\$"
	(
		start=$(date +%s)
		set +e
		cd integration && env --default-signal=INT,QUIT "$test2json" -t -p integration "$work/integration.test" -test.v=test2json -test.run "$pattern" -test.count=1 -test.timeout="$timeout" > "$work/shard-$i.json" 2> "$work/shard-$i.err"
		code=$?
		jq -rjs --argjson code "$code" "$events report(\$code)" "$work/shard-$i.json" > "$work/shard-$i.log"
		cat "$work/shard-$i.err" >> "$work/shard-$i.log"
		summary=$(jq -rs "$events summary" "$work/shard-$i.json")
		tests=tests; [ "${#names[@]}" -eq 1 ] && tests=test
		echo "integration shard $((i + 1))/$shards: ${#names[@]} $tests, $summary, exit $code, $(( $(date +%s) - start )) s" >> "$work/shard-$i.log"
		exit $code
	) &
	pids[i]=$!
done

failed=0
for i in "${!pids[@]}"; do
	wait "${pids[i]}" || failed=1
	cat "$work/shard-$i.log"
done
if [ -n "${CTXFS_TEST_DURATIONS:-}" ]; then
	{
		echo "# Seconds each integration test took from its start to its end ($(date -u +%F), $shards shards on $(nproc) cores, scripts/test-integration.sh):"
		echo "# scripts/test-integration.sh balances its shards by them. Stale figures only unbalance the shards."
		for f in "$work"/shard-*.json; do jq -rs "$events durations" "$f"; done | LC_ALL=C sort
	} > "$CTXFS_TEST_DURATIONS"
fi
exit $failed
