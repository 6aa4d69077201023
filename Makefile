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
# make install: where the binaries, the mount helper, the man pages and the
# systemd unit go (DESTDIR for packaging).
PREFIX   ?= /usr/local
SBINDIR  ?= /sbin
MANDIR   ?= $(PREFIX)/share/man
UNITDIR  ?= $(PREFIX)/lib/systemd/system
MAN      := man
# Each fuzz target: package and name.
FUZZ     := ./abi:FuzzCheckLogLine ./proto:FuzzParseRequest ./proto:FuzzParseObject ./proto:FuzzDecodeWire ./proto:FuzzContentText ./proto:FuzzSetString ./session/sealedlog:FuzzAppend ./agent/provider:FuzzSSE ./abi:FuzzStampWriter ./agent/cli:FuzzParseClaudeCode ./agent/cli:FuzzParseCodex ./agent/cli:FuzzParseGemini ./agent/cli:FuzzParseOpenCode ./agent/cli:FuzzReadSession ./agent/tools:FuzzParse ./trajectory:FuzzParseLine ./internal/jsonscan:FuzzObject ./internal/jsonscan:FuzzString ./cluster/peer:FuzzWire ./agent/provider:FuzzBody ./search:FuzzMayHold ./search:FuzzScanMessage

.PHONY: build deps test unit fuzz bench bench-journaled run lint clean man install uninstall

# The binaries say which source they are (--version, the server's log):
# git describe, since this machine builds with -buildvcs=false.
STAMP    := $(shell git describe --always --dirty 2>/dev/null)
LDFLAGS  := -X github.com/ctxfs/ctxfs/internal/buildinfo.stamp=$(STAMP)

build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ctxfs ./cmd/ctxfs
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ctx ./cmd/ctx
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ctx-trajectory ./cmd/ctx-trajectory

# The test command of the README: lint, every test (FUSE mounts, real
# processes and uids included), then each fuzz target for a short while.
test: deps build lint unit fuzz

# Debian packages the tests drive (fuse3, jq, stress-ng, …) and Go modules.
deps:
	./scripts/deps.sh

# Every package's tests, then the integration package's, in two processes
# at once (scripts/test-integration.sh says why).
unit:
	$(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -v '/integration$$')
	GO=$(GO) ./scripts/test-integration.sh

fuzz:
	@set -e; for t in $(FUZZ); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -list="^$$name$$" $$pkg | grep -qx "$$name" || { echo "fuzz: $$pkg has no $$name"; exit 1; }; \
		$(GO) test -run='^$$' -fuzz="^$$name$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done

# Every benchmark with the store where TMPDIR is, then the durable send and
# append rows again on an ext4 with a journal made on the same disk: their
# reference, an append and its fdatasync, costs two to three times as much
# there (scripts/bench-journaled.sh says why). As root.
bench: build
	$(GO) test -run='^$$' -bench=. -benchtime=2s -timeout 30m ./session/... ./index/... ./server/... ./agent/... ./trajectory/... ./search/... ./integration/...
	./scripts/bench-journaled.sh

bench-journaled: build
	./scripts/bench-journaled.sh

# The README's first command: mount, make a demo agent, send, show.
run: build
	./scripts/demo.sh $(ROOT) $(STORE)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet ./integration/testdata/hangfs  # a program the tests build: ./... skips testdata

# Man pages (section 1, one per command) from the command trees, with
# cobra/doc: each binary built with the tag mangen has a hidden gen-man.
man:
	rm -rf $(MAN) && mkdir -p $(MAN)
	export SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s); \
	$(GO) run -tags mangen ./cmd/ctxfs gen-man $(MAN) && \
	$(GO) run -tags mangen ./cmd/ctx gen-man $(MAN)

# The binaries, /sbin/mount.fuse.ctxfs (the fstab helper: a symlink to
# ctxfs, which knows the name), the man pages and the systemd unit, its
# paths made $(PREFIX)'s. Enabling the unit is the admin's choice:
# systemctl daemon-reload && systemctl enable --now ctxfs.
install: build man
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(SBINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(UNITDIR)
	install -m 0755 $(BIN)/ctxfs $(BIN)/ctx $(BIN)/ctx-trajectory $(DESTDIR)$(PREFIX)/bin/
	ln -sfn $(PREFIX)/bin/ctxfs $(DESTDIR)$(SBINDIR)/mount.fuse.ctxfs
	install -m 0644 $(MAN)/*.1 $(DESTDIR)$(MANDIR)/man1/
	sed 's|/usr/local/bin/|$(PREFIX)/bin/|g' contrib/systemd/ctxfs.service > $(DESTDIR)$(UNITDIR)/ctxfs.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/ctxfs.service

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/ctxfs $(DESTDIR)$(PREFIX)/bin/ctx $(DESTDIR)$(PREFIX)/bin/ctx-trajectory $(DESTDIR)$(SBINDIR)/mount.fuse.ctxfs
	rm -f $(DESTDIR)$(UNITDIR)/ctxfs.service $(DESTDIR)$(MANDIR)/man1/ctxfs.1 $(DESTDIR)$(MANDIR)/man1/ctxfs-*.1 \
		$(DESTDIR)$(MANDIR)/man1/ctx.1 $(DESTDIR)$(MANDIR)/man1/ctx-*.1

clean:
	rm -rf $(BIN) $(MAN)
