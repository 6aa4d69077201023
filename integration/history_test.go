package integration

// Random fault schedules against ctxfs hosts, each checked by the
// history checker (history_helpers_test.go): clients send continuously
// to private and shared sessions while faults strike, then the logs are
// read through every host's mount and, with every host stopped, in the
// store, and ctxfs fsck must be clean.
//
// The hook for several hosts (SPEC 19, issue 25): runSchedules takes the
// hosts and the fault kinds. A host is a *server (a root of its own, the
// one shared --store) in a faultHost; give it a netHost (server.wrap =
// netHost.wrap(), set before it starts) and partitions are drawn for it.
// Client c sends through server c mod the number of servers; a host that
// is no ctxfs server (an etcd member in a netHost: proc and restart) is
// struck by faults only. A kill -9 is followed,
// after its hold, by a restart of the same host (server.start, as the
// crash tests do); a pause is SIGSTOP, then SIGCONT; a partition cuts the
// host's port on the test network, then heals it. Faults strike one after
// another (each repaired before the next), so every schedule ends with
// every host up. Then one client of each session asks the first host
// for its status (recovery), each host's mount is read and checked (a
// host after the first once its view settles, up to 2 s), every host is
// stopped (SIGTERM), fsck must be clean, the store is read and checked,
// and every host starts again. scheduleOpts.clientCred gives each client
// a uid (it connects as that uid; nil: root). For a cluster:
//
//	tn := newTestNet(t)
//	var hosts []*faultHost
//	for _, name := range []string{"a", "b", "c"} {
//		nh := tn.addHost(name)
//		s := newFuseServerWith(t, func(s *server) { s.store = shared; s.wrap = nh.wrap(); s.args = []string{"--cluster", endpoints} })
//		hosts = append(hosts, &faultHost{name: name, srv: s, net: nh})
//	}
//	runSchedules(t, hosts, scheduleOpts{schedules: 20, kinds: []faultKind{faultKill, faultPause, faultPartition}, …})
//
// CTXFS_HISTORY_SEED=N replays the schedules of seed N (each failure
// names it); CTXFS_HISTORY_ONLY=K runs schedule K of it alone.

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/mountlife"
)

// faultKind is a kind of fault a schedule draws.
type faultKind int

const (
	faultKill      faultKind = iota // kill -9 the host's server, restart it after the hold
	faultPause                      // SIGSTOP it, SIGCONT after the hold
	faultPartition                  // cut its network port, heal it after the hold
)

func (k faultKind) String() string { return [...]string{"kill", "pause", "partition"}[k] }

// faultHost is one host of the schedules: a ctxfs server (srv), which
// clients send through and whose mount is read; or, with srv nil, a
// process the faults strike that no client uses (an etcd member): proc
// is its current process, restart starts it again after a kill -9.
type faultHost struct {
	name    string
	srv     *server
	net     *netHost // nil: no partition is drawn for this host
	proc    func() *exec.Cmd
	restart func()
}

// pid is the process the host's faults strike.
func (h *faultHost) pid() int {
	if h.srv != nil {
		return h.srv.cmd.Process.Pid
	}
	return h.proc().Process.Pid
}

// killAndRestart kills the host's process with SIGKILL and, after hold,
// starts it again; a server's mounts are up when it returns.
func (h *faultHost) killAndRestart(t *testing.T, hold time.Duration) {
	t.Helper()
	if h.srv == nil {
		kill9(h.proc())
		time.Sleep(hold)
		h.restart()
		return
	}
	dead := h.srv.crash()
	time.Sleep(hold)
	h.srv.start()
	waitMounted(t, h.srv)
	reaped(t, dead)
}

// ctxfsHosts are the hosts that are ctxfs servers.
func ctxfsHosts(hosts []*faultHost) []*faultHost {
	var out []*faultHost
	for _, h := range hosts {
		if h.srv != nil {
			out = append(out, h)
		}
	}
	return out
}

// socket is the host's coder socket, where its clients send.
func (h *faultHost) socket() string { return filepath.Join(h.srv.root, "agent", "coder.sock") }

// fault is one fault of a schedule.
type fault struct {
	kind faultKind
	host int           // in the hosts given to runSchedules
	name string        // the host's name
	at   time.Duration // after the traffic began
	hold time.Duration // paused, cut off, or down before the restart
}

func (f fault) String() string {
	return fmt.Sprintf("%s %s@%v/%v", f.kind, f.name, f.at.Round(time.Millisecond), f.hold.Round(time.Millisecond))
}

// scheduleOpts shape the schedules of one run.
type scheduleOpts struct {
	schedules              int
	trafficMin, trafficMax time.Duration // of client traffic per schedule
	kinds                  []faultKind
	privateClients         int    // each sends to a private session of its own
	sharedSessions         int    // each written by clientsPerShared clients
	clientsPerShared       int    //
	space                  string // the shared space (the caller makes it)
	// retryFor: a send not acknowledged (and not refused by the server)
	// is sent again with the same id and input for up to this long (a
	// server restarted after a kill -9 answers within it): a replay
	// (SPEC 8) when the first landed, so present once either way.
	retryFor time.Duration
	// clientCred says who client c is (nil: root, dialing from this
	// process); the shared clients must be members of the space.
	clientCred func(c int) *cred
}

// clients is the number of clients of a schedule.
func (o scheduleOpts) clients() int { return o.privateClients + o.sharedSessions*o.clientsPerShared }

// schedule is one drawn schedule.
type schedule struct {
	n       int
	traffic time.Duration
	faults  []fault
}

// drawSchedule draws schedule n: its traffic time and faults one after
// another, each 100 ms to 1.2 s long, 200 to 800 ms apart, the first
// 200 to 700 ms in and the last over 500 ms before the traffic ends.
func drawSchedule(rng *rand.Rand, n int, hosts []*faultHost, o scheduleOpts) schedule {
	s := schedule{n: n, traffic: o.trafficMin + time.Duration(rng.Int63n(int64(o.trafficMax-o.trafficMin)+1))}
	at := time.Duration(200+rng.Intn(500)) * time.Millisecond
	for at < s.traffic-500*time.Millisecond {
		f := fault{kind: o.kinds[rng.Intn(len(o.kinds))], host: rng.Intn(len(hosts)), at: at,
			hold: time.Duration(100+rng.Intn(1100)) * time.Millisecond}
		if f.kind == faultPartition && hosts[f.host].net == nil {
			f.kind = faultPause // a host off the test network cannot be cut off
		}
		f.name = hosts[f.host].name
		s.faults = append(s.faults, f)
		at += f.hold + time.Duration(200+rng.Intn(600))*time.Millisecond
	}
	return s
}

// scheduleSlack bounds what a schedule may take beyond its traffic (the
// last sends, the reads, fsck, the restarts): a hang fails the test. Not
// a speed assertion: on a loaded 2-core machine a schedule takes about a
// second more than its traffic.
const scheduleSlack = 60 * time.Second

// runSchedules runs o.schedules schedules against hosts, each checked;
// a violation fails the test, naming the seed that replays it. It
// returns every op of every schedule run.
func runSchedules(t *testing.T, hosts []*faultHost, o scheduleOpts) (all []histOp) {
	t.Helper()
	servers := ctxfsHosts(hosts)
	if len(servers) == 0 {
		t.Fatal("runSchedules: no host is a ctxfs server")
	}
	seed := time.Now().UnixNano() % 1_000_000_000
	if v := os.Getenv("CTXFS_HISTORY_SEED"); v != "" {
		seed, _ = strconv.ParseInt(v, 10, 64)
	}
	only := -1
	if v := os.Getenv("CTXFS_HISTORY_ONLY"); v != "" {
		only, _ = strconv.Atoi(v)
	}
	t.Logf("seed %d (CTXFS_HISTORY_SEED=%d replays these schedules)", seed, seed)
	clients := make([]*histClient, o.clients())
	for c := range clients {
		clients[c] = &histClient{}
		if o.clientCred != nil && o.clientCred(c) != nil {
			clients[c] = &histClient{cred: o.clientCred(c), dialer: newUIDDialer(t, o.clientCred(c))}
		}
	}
	for n := 0; n < o.schedules && !t.Failed(); n++ {
		if only >= 0 && n != only {
			continue
		}
		sch := drawSchedule(rand.New(rand.NewSource(seed+int64(n))), n, hosts, o)
		began := time.Now()
		ops, vs := runSchedule(t, hosts, clients, sch, o, fmt.Sprintf("h%d-s%d-", seed, n))
		took := time.Since(began)
		t.Logf("schedule %d: %v traffic, faults %v: %s; %d violations, %v in all",
			n, sch.traffic.Round(time.Millisecond), sch.faults, historySummary(ops), len(vs), took.Round(time.Millisecond))
		if took > sch.traffic+scheduleSlack {
			t.Errorf("schedule %d of seed %d took %v, over its traffic %v and %v", n, seed, took, sch.traffic, scheduleSlack)
		}
		all = append(all, ops...)
		if len(vs) > 0 {
			prefix := fmt.Sprintf("h%d-s%d-", seed, n)
			sessions, _ := scheduleSessions(prefix, o, clients)
			t.Errorf("schedule %d of seed %d (CTXFS_HISTORY_SEED=%d CTXFS_HISTORY_ONLY=%d) breaks the history (kept in %s):\n%s",
				n, seed, seed, n, keepFailedSchedule(t, prefix, ops, servers[0].srv.store, sessions), violationList(vs, 20))
		}
	}
	t.Logf("all schedules: %s", historySummary(all))
	return all
}

// keepFailedSchedule copies a failed schedule's history (one op a line)
// and its sessions' logs in the store to a directory that outlives the
// test, and returns its path.
func keepFailedSchedule(t *testing.T, prefix string, ops []histOp, store string, sessions []histSession) string {
	dir, err := os.MkdirTemp("", "ctxfs-history-"+prefix)
	if err != nil {
		return fmt.Sprintf("nowhere: %v", err)
	}
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "%s client=%d seq=%d session=%s host=%s outcome=%s done=%v errno=%q run=%s invoked=%s acked=%s\n",
			op.tag, op.client, op.seq, op.session, op.host, op.outcome, op.done, op.errno, op.run,
			op.invoked.Format(time.RFC3339Nano), op.acked.Format(time.RFC3339Nano))
	}
	os.WriteFile(filepath.Join(dir, "history.txt"), []byte(b.String()), 0o644)
	logs, err := readSessionLogs(store, sessions)
	if err != nil {
		t.Logf("keep the failed schedule's logs: %v", err)
	}
	for s, l := range logs {
		name := strings.NewReplacer("/", "_", ":", "_").Replace(s.String())
		os.WriteFile(filepath.Join(dir, name+".messages.jsonl"), []byte(l.messages), 0o644)
		os.WriteFile(filepath.Join(dir, name+".events.jsonl"), []byte(l.events), 0o644)
	}
	return dir
}

// violationList lists at most max violations, one a line.
func violationList(vs []violation, max int) string {
	var b strings.Builder
	for i, v := range vs {
		if i == max {
			fmt.Fprintf(&b, "  … and %d more\n", len(vs)-max)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return b.String()
}

// runSchedule runs one schedule and checks it: the traffic with its
// faults, then the logs through every host's mount, then with every host
// stopped fsck and the store; it leaves every host running.
func runSchedule(t *testing.T, hosts []*faultHost, clients []*histClient, sch schedule, o scheduleOpts, prefix string) ([]histOp, []violation) {
	t.Helper()
	h := &history{prefix: prefix}
	sessions, clientSession := scheduleSessions(prefix, o, clients)
	servers := ctxfsHosts(hosts)
	stop, cancel := make(chan struct{}), make(chan struct{})
	var running sync.WaitGroup
	for c, s := range clientSession {
		host := servers[c%len(servers)]
		running.Add(1)
		go func() {
			defer running.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				op := h.invoke(c, seq, s, host.name)
				h.sendOp(clients[c], host.socket(), op, cancel)
				for first := time.Now(); op.retryable() && time.Since(first) < o.retryFor; {
					time.Sleep(50 * time.Millisecond) // the server may be down: do not spin
					h.sendOp(clients[c], host.socket(), op, cancel)
				}
				if op.outcome != opAcked {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	began := time.Now()
	for _, f := range sch.faults {
		time.Sleep(time.Until(began.Add(f.at)))
		applyFault(t, hosts[f.host], f)
	}
	time.Sleep(time.Until(began.Add(sch.traffic)))
	close(stop)
	if !waitGroupWithin(&running, opLimit+5*time.Second) {
		close(cancel) // a send still open: cut it (indeterminate)
		if !waitGroupWithin(&running, 5*time.Second) {
			t.Fatalf("schedule %d: clients still running %v after the traffic stopped", sch.n, opLimit+10*time.Second)
		}
	}
	ops := h.snapshot()
	return ops, checkAfterSchedule(t, servers, ops, sessions, sessionClients(clientSession, clients))
}

// sessionClients maps each session to one of its clients (who may ask
// for its status).
func sessionClients(clientSession []histSession, clients []*histClient) map[histSession]*histClient {
	out := map[histSession]*histClient{}
	for c, s := range clientSession {
		if out[s] == nil {
			out[s] = clients[c]
		}
	}
	return out
}

// scheduleSessions names a schedule's sessions, and gives each client
// its session: a private one of its own (in its uid's home) for the
// first privateClients, then clientsPerShared clients per shared session.
func scheduleSessions(prefix string, o scheduleOpts, clients []*histClient) (all, byClient []histSession) {
	for c := 0; c < o.privateClients; c++ {
		s := histSession{name: fmt.Sprintf("%sp%d", prefix, c)}
		if clients[c].cred != nil {
			s.uid = clients[c].cred.uid
		}
		all, byClient = append(all, s), append(byClient, s)
	}
	for k := 0; k < o.sharedSessions; k++ {
		s := histSession{name: fmt.Sprintf("%ssh%d", prefix, k), space: o.space}
		all = append(all, s)
		for range o.clientsPerShared {
			byClient = append(byClient, s)
		}
	}
	return all, byClient
}

// applyFault strikes one fault and repairs it after its hold (the repair
// is deferred: a failing test still resumes and heals).
func applyFault(t *testing.T, h *faultHost, f fault) {
	t.Helper()
	switch f.kind {
	case faultKill:
		h.killAndRestart(t, f.hold)
	case faultPause:
		pid := h.pid()
		if err := pause(pid); err != nil {
			t.Fatalf("pause %s: %v", h.name, err)
		}
		defer resume(pid)
		time.Sleep(f.hold)
	case faultPartition:
		h.net.partition()
		defer h.net.heal()
		time.Sleep(f.hold)
	}
}

// waitMounted waits until a started server's mounts are up (its sockets
// answer first).
func waitMounted(t testing.TB, s *server) {
	t.Helper()
	eventually(t, 10*time.Second, "one live mount each at home and shared", func() bool {
		return mountsAt(s.mnt("home")) == 1 && mountsAt(s.mnt("shared")) == 1
	})
}

// waitGroupWithin waits for wg up to limit.
func waitGroupWithin(wg *sync.WaitGroup, limit time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return waitDone(done, limit)
}

// checkAfterSchedule checks the history against the logs read through
// every server's mount (after a status request by one of its clients
// has made the first server recover each session), then stops every
// server, requires fsck clean, checks the store's logs, and starts every
// server again.
func checkAfterSchedule(t *testing.T, hosts []*faultHost, ops []histOp, sessions []histSession, askers map[histSession]*histClient) []violation {
	t.Helper()
	var vs []violation
	for _, s := range sessions {
		line := fmt.Sprintf(`{"op":"status","session":%q%s}`, s.name, s.scopeFields())
		if frames, err := askers[s].request(hosts[0].socket(), line); err != nil || len(frames) != 1 || frames[0]["type"] != "status" {
			t.Fatalf("%s: %v %v\nserver log:\n%s", line, frames, err, lastLines(hosts[0].srv.logText(), 20))
		}
	}
	// A reader on another host sees new lines within a second (SPEC 5):
	// its view is judged once it holds no violation, or after 2 s.
	check := func(where, root string, settle time.Duration) {
		var found []violation
		for deadline := time.Now().Add(settle); ; time.Sleep(100 * time.Millisecond) {
			logs, err := readSessionLogs(root, sessions)
			if err != nil {
				found = []violation{{"read", err.Error()}}
			} else {
				found = checkHistory(ops, logs)
			}
			if len(found) == 0 || time.Now().After(deadline) {
				break
			}
		}
		for _, v := range found {
			vs = append(vs, violation{v.kind, where + ": " + v.msg})
		}
	}
	for i, h := range hosts {
		settle := 2 * time.Second
		if i == 0 { // the host whose status requests recovered the sessions
			settle = 0
		}
		check("through "+h.name+"'s mount", h.srv.root, settle)
	}
	for _, h := range hosts {
		h.srv.kill(h.srv.cmd, syscall.SIGTERM)
	}
	if out, code := hosts[0].srv.fsck(); code != 0 || out != "clean\n" {
		vs = append(vs, violation{"fsck", fmt.Sprintf("exit %d: %s", code, strings.TrimSpace(out))})
	}
	check("in the store", hosts[0].srv.store, 0)
	for _, h := range hosts {
		h.srv.start()
		waitMounted(t, h.srv)
	}
	return vs
}

// TestHistoryFaultSchedules: 8 random schedules of 4 to 6 s of sends by
// three clients to private sessions of their own and four clients to two
// shared sessions (each client a uid of its own, connecting as it), against one ctxfs server hit by kill -9 (then a
// restart) and SIGSTOP (then SIGCONT); after each, every acknowledged
// send is present exactly once in its session, nothing else is, no line
// is torn, each client's acknowledged sends keep their order, every run
// is closed, and fsck is clean.
func TestHistoryFaultSchedules(t *testing.T) {
	s := newHistoryServer(t, nil)
	o := historyOpts(8, faultKill, faultPause)                               // the cluster runs 20 (TestClusterSchedules)
	o.clientCred = func(c int) *cred { return member(uint32(2001+c), 1234) } // each its own uid, all in team's group
	ops := runSchedules(t, []*faultHost{{name: "one", srv: s}}, o)
	// The faults must have struck sends: a kill that cut a send after its
	// start frame, and sends sent again after a kill cut them before it
	// or while no server listened. (Over 20 schedules every run so far
	// had dozens of each.)
	cut, retried := 0, 0
	for _, op := range ops {
		if op.outcome == opIndeterminate || op.outcome == opAcked && !op.done {
			cut++
		}
		if op.attempts > 1 {
			retried++
		}
	}
	if !t.Failed() && os.Getenv("CTXFS_HISTORY_ONLY") == "" && (cut == 0 || retried == 0) {
		t.Errorf("the faults struck no send: %d cut by a kill, %d sent again after a kill", cut, retried)
	}
}

// TestHistoryPartitionSchedules runs the schedules' third kind of fault
// on one server in a host network namespace of its own: partitions (which
// a lone server, reached over Unix sockets, does not notice), with kills
// and pauses, so the runner's path for the cluster hosts is exercised
// today: a server restarted after a kill is in its host's namespace
// again, and every cut is healed. A second host runs no ctxfs, only a
// process the faults strike too (where a cluster has an etcd member): it
// is restarted after a kill, in its namespace. Clients are root, dialing
// from the test process.
func TestHistoryPartitionSchedules(t *testing.T) {
	tn := newTestNet(t)
	nh, eh := tn.addHost("one"), tn.addHost("etcd")
	s := newHistoryServer(t, func(s *server) { s.wrap = nh.wrap() })
	var standIn *exec.Cmd
	startStandIn := func() {
		standIn = exec.Command("/usr/bin/python3", "-c", tcpListener, eh.addr, probePort)
		startInNetns(t, eh, standIn)
	}
	startStandIn()
	hosts := []*faultHost{
		{name: "one", srv: s, net: nh},
		{name: "etcd", net: eh, proc: func() *exec.Cmd { return standIn }, restart: startStandIn},
	}
	runSchedules(t, hosts, historyOpts(3, faultKill, faultPause, faultPartition))
	if got, want := netnsOf(t, s.cmd.Process.Pid), netnsOfPath(t, "/run/netns/"+nh.ns); got != want {
		t.Errorf("the server after the schedules runs in network namespace %s, not its host's %s", got, want)
	}
	if got, want := netnsOf(t, standIn.Process.Pid), netnsOfPath(t, "/run/netns/"+eh.ns); got != want {
		t.Errorf("the stand-in after the schedules runs in network namespace %s, not its host's %s", got, want)
	}
	if !dialFrom(t, nil, eh.addr) {
		t.Errorf("the stand-in host is not reachable after the schedules (a partition left, or it was not restarted)")
	}
}

// newHistoryServer starts a server for the schedules, with a shared
// space "team"; it leaves no dead mount behind.
func newHistoryServer(t *testing.T, configure func(*server)) *server {
	s := newFuseServerWith(t, configure)
	keepFusectlAsIs(t)
	umountLeftovers(t, s.root)
	t.Cleanup(func() { // never leave a dead connection behind
		mountlife.AbortDead(s.mnt("home"))
		mountlife.AbortDead(s.mnt("shared"))
	})
	s.spaceAdd("team", 1234)
	return s
}

// historyOpts are the schedules of these tests: n of 4 to 6 s, three
// private clients and two shared sessions of two clients each.
func historyOpts(n int, kinds ...faultKind) scheduleOpts {
	return scheduleOpts{
		schedules:  n,
		trafficMin: 4 * time.Second, trafficMax: 6 * time.Second,
		kinds:          kinds,
		privateClients: 3, sharedSessions: 2, clientsPerShared: 2,
		retryFor: 3 * time.Second,
		space:    "team",
	}
}

// TestHistoryCheckerFindsViolations: the checker, fed hand-made
// histories and logs, reports each kind of violation exactly where it
// is, and nothing in a history every op of which is as the contract
// allows (an acknowledged send once; a failed or indeterminate one absent
// or once; a refused one absent; each run closed by one done; assistant
// lines and other events beside them).
func TestHistoryCheckerFindsViolations(t *testing.T) {
	p, q := histSession{name: "p"}, histSession{name: "q", space: "team"}
	t0 := time.Unix(1000, 0)
	op := func(tag string, s histSession, o opOutcome, invoked, acked int) histOp {
		return histOp{tag: tag, session: s, outcome: o, invoked: t0.Add(time.Duration(invoked) * time.Second), acked: t0.Add(time.Duration(acked) * time.Second)}
	}
	// sent is what a send leaves in a session's logs: its start event
	// and user message, an assistant echo and a done.
	sent := func(tags ...string) sessionLogs {
		var l sessionLogs
		for i, tag := range tags {
			run := fmt.Sprintf("r%d", i)
			l.events += fmt.Sprintf(`{"type":"start","id":%q,"run":%q,"client_id":%q,"session":"s"}`+"\n", run, run, tag) +
				fmt.Sprintf(`{"type":"done","run":%q,"status":"ok"}`+"\n", run)
			l.messages += fmt.Sprintf(`{"role":"user","run":%q,"content":%q}`+"\n", run, tag) +
				fmt.Sprintf(`{"role":"assistant","run":%q,"content":[{"type":"text","text":%q}]}`+"\n", run, tag)
		}
		return l
	}
	good := []histOp{
		op("a1", p, opAcked, 0, 1), op("a2", p, opAcked, 2, 3),
		op("f-absent", p, opFailed, 4, 0), op("f-present", p, opFailed, 5, 0),
		op("i-absent", q, opIndeterminate, 0, 0), op("i-present", q, opIndeterminate, 0, 0),
		op("r-absent", q, opRefused, 0, 0), op("b1", q, opAcked, 1, 2),
	}
	goodLogs := map[histSession]sessionLogs{p: sent("a1", "a2", "f-present"), q: sent("i-present", "b1")}
	if vs := checkHistory(good, goodLogs); len(vs) > 0 {
		t.Errorf("a history within the contract: violations\n%s", violationList(vs, 20))
	}
	tornLogs := sent("a1", "a2", "f-present")
	tornLogs.messages += `{"role":"user","content":"half`
	badLine := sent("i-present", "b1")
	badLine.events = `{"type":"state"` + "\n" + badLine.events
	for _, c := range []struct {
		name string
		ops  []histOp
		logs map[histSession]sessionLogs
		want []string // the kinds reported, sorted
	}{
		{"an acknowledged send lost", good, map[histSession]sessionLogs{p: sent("a1", "f-present"), q: sent("i-present", "b1")}, []string{vLost}},
		{"an acknowledged send twice", good, map[histSession]sessionLogs{p: sent("a1", "a2", "a2", "f-present"), q: sent("i-present", "b1")}, []string{vDuplicate}},
		{"an indeterminate send twice", good, map[histSession]sessionLogs{p: sent("a1", "a2", "f-present"), q: sent("i-present", "b1", "i-present")}, []string{vDuplicate}},
		{"a refused send present", good, map[histSession]sessionLogs{p: sent("a1", "a2", "f-present"), q: sent("i-present", "b1", "r-absent")}, []string{vRefusedHere}},
		{"a message never sent", good, map[histSession]sessionLogs{p: sent("a1", "a2", "f-present", "ghost"), q: sent("i-present", "b1")}, []string{vNeverSent}},
		{"a send in another session", good, map[histSession]sessionLogs{p: sent("a1", "f-present"), q: sent("i-present", "b1", "a2")}, []string{vLost, vMisplaced}},
		{"acknowledged sends out of order", good, map[histSession]sessionLogs{p: sent("a2", "a1", "f-present"), q: sent("i-present", "b1")}, []string{vOrder}},
		{"a torn last line", good, map[histSession]sessionLogs{p: tornLogs, q: sent("i-present", "b1")}, []string{vTorn}},
		{"an unparseable line", good, map[histSession]sessionLogs{p: sent("a1", "a2", "f-present"), q: badLine}, []string{vUnparseable}},
		{"a run never closed", good, map[histSession]sessionLogs{p: sent("a1", "a2", "f-present"), q: {messages: sent("i-present", "b1").messages, events: strings.Replace(sent("i-present", "b1").events, `{"type":"done","run":"r1","status":"ok"}`+"\n", "", 1)}}, []string{vDoneEvents}},
		{"a user message without its start event", good, map[histSession]sessionLogs{p: {messages: sent("a1", "a2", "f-present").messages, events: sent("a1", "f-present").events}, q: sent("i-present", "b1")}, []string{vStartEvents}},
		{"a start frame naming another run than the log", append([]histOp{{tag: "a1", session: p, outcome: opAcked, run: "r9", invoked: t0, acked: t0}}, good[1:]...), goodLogs, []string{vStartEvents}},
		{"a run closed twice", good, map[histSession]sessionLogs{p: {messages: sent("a1", "a2", "f-present").messages, events: sent("a1", "a2", "f-present").events + `{"type":"done","run":"r0","status":"error"}` + "\n"}, q: sent("i-present", "b1")}, []string{vDoneEvents}},
	} {
		var got []string
		for _, v := range checkHistory(c.ops, c.logs) {
			got = append(got, v.kind)
		}
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: violations %v, want %v:\n%s", c.name, got, c.want, violationList(checkHistory(c.ops, c.logs), 20))
		}
	}
}
