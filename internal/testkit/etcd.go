package testkit

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A real etcd for the tests: N members of Debian's etcd-server (/usr/bin/etcd)
// run as child processes of the test, each with its own data directory
// under t.TempDir, on loopback ports picked free or on URLs the caller
// gives, optionally inside a network namespace the caller made. Every
// member is killed by PID in t.Cleanup, paused ones included. Heartbeat
// and election timeouts are short, so a 3-member quorum forms (and a new
// leader is elected after a loss) in well under a second.

// EtcdOptions says what cluster StartEtcd starts. The zero value is one
// member on free loopback ports.
type EtcdOptions struct {
	Members int // 1 or 3; 0 means 1
	// NetNS, when not empty, holds per member the path of a network
	// namespace (/run/netns/NAME) to run it in ("" for the test's own).
	NetNS []string
	// ClientURLs and PeerURLs, when not empty, give each member's client
	// and peer URL (listened on and advertised); the test process must
	// reach the client URLs. Empty: free 127.0.0.1 ports.
	ClientURLs, PeerURLs []string
	// TLS, when set, makes the members serve their clients over https
	// (the default URLs are https too).
	TLS *EtcdTLS
}

// EtcdTLS is a cluster's client TLS: its certificate and key, the CA a
// client's certificate must chain to (--client-cert-auth), the list of
// revoked client certificates (optional), and what the health checks
// present (a client certificate the members accept).
type EtcdTLS struct {
	CertFile, KeyFile, CAFile, CRLFile string
	Client                             *tls.Config
}

func (o *EtcdTLS) args() []string {
	if o == nil {
		return nil
	}
	a := []string{"--cert-file", o.CertFile, "--key-file", o.KeyFile, "--trusted-ca-file", o.CAFile, "--client-cert-auth"}
	if o.CRLFile != "" {
		a = append(a, "--client-crl-file", o.CRLFile)
	}
	return a
}

// Etcd is a running cluster.
type Etcd struct {
	t       testing.TB
	health  *http.Client // over TLS when the members serve it
	mu      sync.Mutex   // guards members' proc
	members []*etcdMember
}

type etcdMember struct {
	name, dataDir, logPath string
	clientURL, peerURL     string
	netns                  string
	args                   []string
	proc                   *etcdProc // nil while stopped
}

// etcdProc is one run of a member's process; exited is closed once it
// has been reaped (its PID is then never signalled again).
type etcdProc struct {
	pid    int
	exited chan struct{}
}

// etcdBinary is the server Debian's etcd-server installs.
const etcdBinary = "etcd"

// RequireEtcd skips the test when the etcd server is missing; with
// CTXFS_REQUIRE_ETCD=1 (CI) it fails instead.
func RequireEtcd(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath(etcdBinary); err == nil {
		return
	}
	why := "etcd missing: scripts/deps.sh installs etcd-server"
	if os.Getenv("CTXFS_REQUIRE_ETCD") == "1" {
		t.Fatalf("%s (CTXFS_REQUIRE_ETCD=1)", why)
	}
	t.Skip(why)
}

// StartEtcd starts a cluster and returns once every member answers its
// health check (a leader is elected), within 20 s or the test fails.
func StartEtcd(t testing.TB, opt EtcdOptions) *Etcd {
	t.Helper()
	RequireEtcd(t)
	n := opt.Members
	if n == 0 {
		n = 1
	}
	e := &Etcd{t: t, health: http.DefaultClient}
	scheme := "http://"
	if opt.TLS != nil {
		scheme = "https://"
		e.health = &http.Client{Transport: &http.Transport{TLSClientConfig: opt.TLS.Client}}
	}
	t.Cleanup(e.killAll)
	dir := t.TempDir()
	free := freeLoopbackAddrs(t, 2*n)
	var initial []string
	for i := 0; i < n; i++ {
		m := &etcdMember{
			name:      fmt.Sprintf("m%d", i),
			dataDir:   filepath.Join(dir, fmt.Sprintf("m%d.etcd", i)),
			logPath:   filepath.Join(dir, fmt.Sprintf("m%d.log", i)),
			clientURL: pick(opt.ClientURLs, i),
			peerURL:   pick(opt.PeerURLs, i),
			netns:     pick(opt.NetNS, i),
		}
		if m.clientURL == "" {
			m.clientURL = scheme + free[2*i]
		}
		if m.peerURL == "" {
			m.peerURL = "http://" + free[2*i+1]
		}
		initial = append(initial, m.name+"="+m.peerURL)
		e.members = append(e.members, m)
	}
	for _, m := range e.members {
		m.args = []string{
			"--name", m.name,
			"--data-dir", m.dataDir,
			"--listen-client-urls", m.clientURL,
			"--advertise-client-urls", m.clientURL,
			"--listen-peer-urls", m.peerURL,
			"--initial-advertise-peer-urls", m.peerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", filepath.Base(dir),
			// 50 ms heartbeats, a leader lost after 500 ms: fast enough for
			// the tests, slow enough for two busy shared cores.
			"--heartbeat-interval", "50",
			"--election-timeout", "500",
			"--logger", "zap",
			"--log-level", "warn",
		}
		m.args = append(m.args, opt.TLS.args()...)
	}
	for i := range e.members {
		e.start(i)
	}
	for i := range e.members {
		e.waitHealthy(i)
	}
	return e
}

func pick(list []string, i int) string {
	if i < len(list) {
		return list[i]
	}
	return ""
}

// freeLoopbackAddrs returns n distinct 127.0.0.1 ports free a moment ago:
// all are held until all are picked (one closed before the next was
// asked for could be handed out again, and etcd refuses a cluster that
// names a URL twice). Another process may take one before etcd binds it;
// etcd then exits and waitHealthy fails with its log.
func freeLoopbackAddrs(t testing.TB, n int) []string {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Must(t, err)
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

// Endpoints are the members' client URLs, for clientv3.Config.Endpoints.
func (e *Etcd) Endpoints() []string {
	var eps []string
	for _, m := range e.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// start runs member i (again: its data directory keeps its state).
func (e *Etcd) start(i int) {
	e.t.Helper()
	m := e.members[i]
	name, args := etcdBinary, m.args
	if m.netns != "" {
		// nsenter execs etcd, so the PID is etcd's own.
		name, args = "nsenter", append([]string{"--net=" + m.netns, etcdBinary}, m.args...)
	}
	log, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	Must(e.t, err)
	defer log.Close()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group (a ^C of the test does not reach it) and
	// killed if the test dies before its cleanup runs.
	cmd.SysProcAttr = ChildAttr()
	Must(e.t, cmd.Start())
	proc := &etcdProc{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(proc.exited) }()
	e.mu.Lock()
	m.proc = proc
	e.mu.Unlock()
}

func (e *Etcd) proc(i int) *etcdProc {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.members[i].proc
}

// waitHealthy waits until member i's /health says true (it has a leader).
func (e *Etcd) waitHealthy(i int) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := e.Healthy(ctx, i)
		cancel()
		if err == nil {
			return
		}
		exited := false
		if p := e.proc(i); p == nil {
			exited = true
		} else {
			select {
			case <-p.exited:
				exited = true
			default:
			}
		}
		if exited || time.Now().After(deadline) {
			e.t.Fatalf("etcd member %d (%s) not healthy (exited: %v): %v\n%s", i, e.members[i].clientURL, exited, err, e.logTail(i))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logTail is the end of member i's log, for a failure message.
func (e *Etcd) logTail(i int) string {
	b, _ := os.ReadFile(e.members[i].logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// signal sends sig to member i's process, which must be running.
func (e *Etcd) signal(i int, sig syscall.Signal) {
	e.t.Helper()
	p := e.proc(i)
	if p == nil {
		e.t.Fatalf("etcd member %d is not running", i)
	}
	select {
	case <-p.exited:
		e.t.Fatalf("etcd member %d has exited", i)
	default:
	}
	Must(e.t, syscall.Kill(p.pid, sig))
}

// end signals member i and reaps it (a paused member is continued too,
// so that it can handle SIGTERM); past 10 s it is killed.
func (e *Etcd) end(i int, sig syscall.Signal) {
	e.mu.Lock()
	p := e.members[i].proc
	e.members[i].proc = nil
	e.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	// Not reaped yet, so the PID is still this process's.
	syscall.Kill(p.pid, sig)
	syscall.Kill(p.pid, syscall.SIGCONT)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.exited
	}
}

// PID is member i's process id (etcd's own, also under nsenter); 0 while
// it is stopped.
func (e *Etcd) PID(i int) int {
	if p := e.proc(i); p != nil {
		return p.pid
	}
	return 0
}

// Stop ends member i cleanly (SIGTERM).
func (e *Etcd) Stop(i int) { e.end(i, syscall.SIGTERM) }

// Kill ends member i at once (SIGKILL), as a crash would.
func (e *Etcd) Kill(i int) { e.end(i, syscall.SIGKILL) }

// Pause stops member i (SIGSTOP): its connections stay open and nothing
// answers, as for a host that hangs.
func (e *Etcd) Pause(i int) {
	e.signal(i, syscall.SIGSTOP)
	waitStopped(e.PID(i), 2*time.Second)
}

// waitStopped returns once every thread of pid is stopped (a SIGSTOP is
// delivered to each thread in its own time: a thread still running may
// answer a request after Kill returned), or after limit.
func waitStopped(pid int, limit time.Duration) {
	for deadline := time.Now().Add(limit); !AllStopped(pid) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// AllStopped reports whether every thread of pid is stopped (state T).
func AllStopped(pid int) bool {
	stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	for _, p := range stats {
		b, err := os.ReadFile(p)
		// The state follows the command name, which is in parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return len(stats) > 0
}

// Resume continues a paused member i (SIGCONT).
func (e *Etcd) Resume(i int) { e.signal(i, syscall.SIGCONT) }

// Restart kills member i if it runs, starts it again on its data
// directory and waits until it is healthy (which needs a quorum).
func (e *Etcd) Restart(i int) {
	e.t.Helper()
	e.Kill(i)
	e.start(i)
	e.waitHealthy(i)
}

// killAll kills every member by PID; on a failed test it logs their ends.
func (e *Etcd) killAll() {
	for i := range e.members {
		e.Kill(i)
		if e.t.Failed() {
			e.t.Logf("etcd member %d log:\n%s", i, e.logTail(i))
		}
	}
}

// Healthy is nil when member i's /health says true (it answers and
// knows a leader) before ctx ends.
func (e *Etcd) Healthy(ctx context.Context, i int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.members[i].clientURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := e.health.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body := new(bytes.Buffer)
	body.ReadFrom(resp.Body)
	if !strings.Contains(body.String(), `"health":"true"`) {
		return fmt.Errorf("etcd member %d: %s", i, strings.TrimSpace(body.String()))
	}
	return nil
}
