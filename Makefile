# ctxfs — build, test, benchmark, run.
GO       ?= go
BIN      := bin
ROOT     ?= /ctx
STORE    ?= /var/lib/ctxfs
# Fuzzing runs a number of inputs, not a duration: with a duration, Go 1.26's
# coordinator can report its own deadline as a failure ("context deadline
# exceeded", golang/go#75804, fixed in Go 1.27) on a loaded machine.
# 20000 inputs take about 5 s a target on 2 cores.
FUZZTIME ?= 20000x
# Each fuzz target: package and name.
FUZZ     := ./abi:FuzzCheckLogLine ./proto:FuzzParseRequest ./session/sealedlog:FuzzAppend ./agent/provider:FuzzSSE

.PHONY: build deps test unit fuzz bench run lint man clean

build:
	$(GO) build -o $(BIN)/ctxfs ./cmd/ctxfs
	$(GO) build -o $(BIN)/ctx ./cmd/ctx

# Man pages, made by each binary from its own commands (the hidden
# __man command): man/ctx.1, man/ctx-agent-send.1, … Dated by the last
# commit, so that the same source makes the same pages.
MAN := man
man: build
	rm -rf $(MAN)
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s) $(BIN)/ctx __man $(MAN)

# The test command of the README: lint, every test (FUSE mounts, real
# processes and uids included), then each fuzz target for a short while.
test: deps build lint unit fuzz

# Debian packages the tests drive (fuse3, jq, stress-ng, …) and Go modules.
deps:
	./scripts/deps.sh

unit:
	$(GO) test -count=1 -timeout 25m ./...

fuzz:
	@set -e; for t in $(FUZZ); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$name$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done

bench: build
	$(GO) test -run='^$$' -bench=. -benchtime=2s -timeout 30m ./session/... ./index/... ./server/... ./agent/... ./trajectory/... ./search/... ./integration/...

# The README's first command: mount, make a demo agent, send, show.
run: build
	./scripts/demo.sh $(ROOT) $(STORE)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf $(BIN) $(MAN)
