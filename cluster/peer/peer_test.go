package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// cluster is a CA with the identities of hosts alpha (the writer) and
// beta, each at 127.0.0.1.
type cluster struct {
	alpha, beta *ca.Identity
	caDir       string // alpha's, where the CA is
}

func newCluster(t testing.TB) cluster {
	t.Helper()
	base := t.TempDir()
	caDir := filepath.Join(base, "alpha")
	testkit.Must(t, ca.Init(caDir, "alpha", []string{"127.0.0.1"}))
	testkit.Must(t, ca.Issue(caDir, "beta", []string{"127.0.0.1"}, filepath.Join(base, "beta")))
	a, err := ca.Load(caDir)
	testkit.Must(t, err)
	b, err := ca.Load(filepath.Join(base, "beta"))
	testkit.Must(t, err)
	return cluster{alpha: a, beta: b, caDir: caDir}
}

// served records what reached serve: the hellos, and the bytes each
// connection carried.
type served struct {
	mu     sync.Mutex
	hellos []Hello
	bytes  bytes.Buffer
}

func (s *served) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hellos) + s.bytes.Len()
}

// wantNone fails the test if anything reached serve.
func (s *served) wantNone(t *testing.T) {
	t.Helper()
	if n := s.count(); n != 0 {
		t.Fatalf("serve was reached (%d hellos and bytes)", n)
	}
}

// echoListener listens as id; serve admits each hello, records it, and
// echoes one line back.
func echoListener(t testing.TB, id *ca.Identity) (*Listener, *served) {
	t.Helper()
	rec := &served{}
	l, err := Listen("127.0.0.1:0", id, func(conn net.Conn, h Hello) {
		rec.mu.Lock()
		rec.hellos = append(rec.hellos, h)
		rec.mu.Unlock()
		if Admit(conn) != nil {
			return
		}
		line, _ := readLine(conn, 1<<20, "line")
		rec.mu.Lock()
		rec.bytes.Write(line)
		rec.mu.Unlock()
		conn.Write(append([]byte("echo "), append(line, '\n')...))
	})
	testkit.Must(t, err)
	t.Cleanup(func() { l.Close() })
	return l, rec
}

func testHello() Hello {
	return Hello{Uid: 1001, Gid: 1001, Groups: []uint32{1001, 50}, Kind: abi.KindAgent, Owner: "coder"}
}

// TestDialCarriesTheStream: beta dials alpha, alpha sees beta's hello
// (its host filled in from beta's identity) and the bytes after it,
// untouched, and beta reads the answer.
func TestDialCarriesTheStream(t *testing.T) {
	c := newCluster(t)
	l, rec := echoListener(t, c.alpha)
	conn, err := Dial(context.Background(), l.Addr().String(), c.beta, testHello())
	testkit.Must(t, err)
	defer conn.Close()
	conn.Write([]byte(`{"op":"ping"}` + "\n"))
	got, _ := io.ReadAll(conn)
	if string(got) != `echo {"op":"ping"}`+"\n" {
		t.Fatalf("reply %q", got)
	}
	if len(rec.hellos) != 1 || rec.hellos[0].Host != "beta" || rec.hellos[0].Uid != 1001 || rec.hellos[0].Caller().Pid != 0 {
		t.Fatalf("hellos %+v", rec.hellos)
	}
}

// TestOtherCARefusedBothWays: a host whose certificate another CA signed
// reaches no serve as a client, and is not taken for the writer when it
// listens.
func TestOtherCARefusedBothWays(t *testing.T) {
	c, stranger := newCluster(t), newCluster(t)
	l, rec := echoListener(t, c.alpha)
	_, err := Dial(context.Background(), l.Addr().String(), stranger.beta, testHello())
	if err == nil {
		t.Fatal("a host of another CA was admitted")
	}
	testkit.WantErrno(t, "dial with another CA's certificate", err, syscall.EAGAIN)

	fake, fakeRec := echoListener(t, stranger.alpha)
	_, err = Dial(context.Background(), fake.Addr().String(), c.beta, testHello())
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("dial to a writer of another CA: %v, want an unknown authority", err)
	}
	rec.wantNone(t)
	fakeRec.wantNone(t)
}

// TestPlainTCPRefused: a plain TCP client's request never reaches serve,
// and the connection is closed.
func TestPlainTCPRefused(t *testing.T) {
	c := newCluster(t)
	l, rec := echoListener(t, c.alpha)
	conn, err := net.Dial("tcp", l.Addr().String())
	testkit.Must(t, err)
	defer conn.Close()
	conn.Write([]byte(`{"host":"beta","uid":0,"gid":0,"kind":"agent","owner":"coder"}` + "\n" + `{"op":"send","input":"x"}` + "\n"))
	conn.SetReadDeadline(time.Now().Add(2 * HelloDeadline))
	got, _ := io.ReadAll(conn)
	if bytes.Contains(got, []byte("ok")) {
		t.Fatalf("a plain client got %q", got)
	}
	rec.wantNone(t)
}

// TestHelloRefused: beta's certificate with a hello naming alpha is
// EACCES (a host vouches only for its own callers); a hello for no
// socket a host could have (a path for a name, a kind of none), and a
// tree change at no path of the tree or with a socket besides, is EINVAL.
func TestHelloRefused(t *testing.T) {
	c := newCluster(t)
	l, rec := echoListener(t, c.alpha)
	for _, tc := range []struct {
		what  string
		edit  func(*Hello)
		errno syscall.Errno
		says  string
	}{
		{"a hello naming another host", func(h *Hello) { h.Host = "alpha" }, syscall.EACCES, `host "beta" speaks for host "alpha"`},
		{"a hello for ../../etc", func(h *Hello) { h.Owner = "../../etc" }, syscall.EINVAL, "no socket"},
		{"a hello for kind tool", func(h *Hello) { h.Kind = "tool" }, syscall.EINVAL, "no socket"},
		{"a hello naming nothing", func(h *Hello) { h.Kind, h.Owner = "", "" }, syscall.EINVAL, "no path"},
		{"a tree change with a socket", func(h *Hello) { h.Path = "home/1001/agent/coder/session/s" }, syscall.EINVAL, "its path alone"},
		{"a tree change with a session", func(h *Hello) {
			h.Kind, h.Owner, h.Session, h.Path = "", "", "home/1001/agent/coder/session/s", "home/1001/agent/coder/session/s"
		}, syscall.EINVAL, "its path alone"},
		{"a tree change at ../", func(h *Hello) { h.Kind, h.Owner, h.Path = "", "", "home/1001/../../etc" }, syscall.EINVAL, "no path"},
		{"a tree change at an absolute path", func(h *Hello) { h.Kind, h.Owner, h.Path = "", "", "/etc/passwd" }, syscall.EINVAL, "no path"},
		{"a tree change at ..", func(h *Hello) { h.Kind, h.Owner, h.Path = "", "", ".." }, syscall.EINVAL, "no path"},
		{"a tree change at a/./b", func(h *Hello) { h.Kind, h.Owner, h.Path = "", "", "home/./1001" }, syscall.EINVAL, "no path"},
		{"a tree change outside the ABI", func(h *Hello) { h.Kind, h.Owner, h.Path = "", "", "home/1001/history" }, syscall.EINVAL, "no path"},
		{"a tree change at the store's own files", func(h *Hello) { h.Kind, h.Owner, h.Path = "", "", ".journal/x" }, syscall.EINVAL, "no path"},
	} {
		h := testHello()
		tc.edit(&h)
		_, err := Dial(context.Background(), l.Addr().String(), c.beta, h)
		testkit.WantErrno(t, tc.what, err, tc.errno, tc.says)
	}
	rec.wantNone(t)
}

// TestOldTLSRefused: a client of the cluster offering at most TLS 1.2
// does not get through the handshake.
func TestOldTLSRefused(t *testing.T) {
	c := newCluster(t)
	l, rec := echoListener(t, c.alpha)
	cfg := c.beta.ClientTLS("127.0.0.1")
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	conn, err := tls.Dial("tcp", l.Addr().String(), cfg)
	if err == nil {
		conn.Close()
		t.Fatal("a TLS 1.2 handshake succeeded")
	}
	rec.wantNone(t)
}

// TestOldTLSWriterRefused: a writer of the cluster that speaks at most
// TLS 1.2 is not dialed through.
func TestOldTLSWriterRefused(t *testing.T) {
	c := newCluster(t)
	cfg := c.alpha.ServerTLS()
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	testkit.Must(t, err)
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	_, err = Dial(context.Background(), l.Addr().String(), c.beta, testHello())
	if err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("dial a TLS 1.2 writer: %v, want a protocol version refusal", err)
	}
}

// TestOversizedHelloRefused: a hello longer than MaxHelloBytes is
// EMSGSIZE, from the listener (a raw client) and from Dial itself.
func TestOversizedHelloRefused(t *testing.T) {
	c := newCluster(t)
	l, rec := echoListener(t, c.alpha)
	conn, err := tls.Dial("tcp", l.Addr().String(), c.beta.ClientTLS("127.0.0.1"))
	testkit.Must(t, err)
	defer conn.Close()
	conn.Write([]byte(`{"host":"beta","owner":"` + strings.Repeat("a", MaxHelloBytes) + "\"}\n"))
	err = hello(context.Background(), conn, nil)
	testkit.WantErrno(t, "oversized hello", err, syscall.EMSGSIZE)

	h := testHello()
	h.Groups = make([]uint32, MaxHelloBytes/2)
	_, err = Dial(context.Background(), l.Addr().String(), c.beta, h)
	testkit.WantErrno(t, "dialing with an oversized hello", err, syscall.EMSGSIZE)
	rec.wantNone(t)
}

// TestSilentClientDropped: a client that finishes the handshake and
// sends no hello is dropped within HelloDeadline, unserved.
func TestSilentClientDropped(t *testing.T) {
	c := newCluster(t)
	l, rec := echoListener(t, c.alpha)
	conn, err := tls.Dial("tcp", l.Addr().String(), c.beta.ClientTLS("127.0.0.1"))
	testkit.Must(t, err)
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(3 * HelloDeadline))
	_, err = io.ReadAll(conn)
	if errors.Is(err, syscall.ETIMEDOUT) || isTimeout(err) {
		t.Fatalf("not dropped within %v", 3*HelloDeadline)
	}
	rec.wantNone(t)
}

// TestWrongPeerNameRefused: a dialer that means to reach host gamma does
// not accept alpha's certificate for it.
func TestWrongPeerNameRefused(t *testing.T) {
	c := newCluster(t)
	l, rec := echoListener(t, c.alpha)
	_, err := DialHost(context.Background(), "gamma", l.Addr().String(), c.beta, testHello())
	var name x509.HostnameError
	if !errors.As(err, &name) {
		t.Fatalf("dial gamma, reached alpha: %v, want a host name error", err)
	}
	_, err = DialHost(context.Background(), "alpha", l.Addr().String(), c.beta, testHello())
	testkit.Must(t, err)
	if rec.count() != 1 {
		t.Fatalf("serve saw %d", rec.count())
	}
}

// TestConnsPerHostBounded: beyond its bound a host is refused EAGAIN,
// while another host still gets in; a connection closed gives its place
// back.
func TestConnsPerHostBounded(t *testing.T) {
	c := newCluster(t)
	l, _ := echoListener(t, c.alpha)
	l.SetMaxConnsPerHost(2)
	addr := l.Addr().String()
	var held []net.Conn
	for range 2 {
		conn, err := Dial(context.Background(), addr, c.beta, testHello())
		testkit.Must(t, err)
		held = append(held, conn)
	}
	_, err := Dial(context.Background(), addr, c.beta, testHello())
	testkit.WantErrno(t, "beta's third connection", err, syscall.EAGAIN, "beta")
	other, err := Dial(context.Background(), addr, c.alpha, testHello())
	testkit.Must(t, err)
	other.Close()
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := Dial(context.Background(), addr, c.beta, testHello())
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed connection's place was not given back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	held[1].Close()
}

// TestRefusalCarriesItsErrno: a writer that refuses (EAGAIN: not the
// writer now) gives the dialer that errno and its message.
func TestRefusalCarriesItsErrno(t *testing.T) {
	c := newCluster(t)
	l, err := Listen("127.0.0.1:0", c.alpha, func(conn net.Conn, h Hello) {
		Refuse(conn, abi.Errorf(syscall.EAGAIN, "forward", "alpha is not the writer now"))
	})
	testkit.Must(t, err)
	defer l.Close()
	_, err = Dial(context.Background(), l.Addr().String(), c.beta, testHello())
	testkit.WantErrno(t, "dial a host that is not the writer", err, syscall.EAGAIN, "not the writer now")
}

// BenchmarkDialExchange: one relayed request's connection, as a follower
// makes one for each change and each local connection it passes on: the
// TLS handshake (both certificates), the hello and its answer, one line
// each way, the close.
func BenchmarkDialExchange(b *testing.B) {
	c := newCluster(b)
	l, _ := echoListener(b, c.alpha)
	b.ResetTimer()
	for range b.N {
		conn, err := Dial(context.Background(), l.Addr().String(), c.beta, testHello())
		if err != nil {
			b.Fatal(err)
		}
		conn.Write([]byte("{}\n"))
		if _, err := io.ReadAll(conn); err != nil {
			b.Fatal(err)
		}
		conn.Close()
	}
}

// TestDialResumes: a host's second connection to a peer resumes the
// first's TLS session (no certificates sent again), and the peer still
// knows who dialed: the resumed session carries the verified chain.
func TestDialResumes(t *testing.T) {
	c := newCluster(t)
	l, rec := echoListener(t, c.alpha)
	for i := range 2 {
		conn, err := Dial(context.Background(), l.Addr().String(), c.beta, testHello())
		testkit.Must(t, err)
		conn.Write([]byte("{}\n"))
		io.ReadAll(conn)
		if resumed := conn.(*tls.Conn).ConnectionState().DidResume; resumed != (i == 1) {
			t.Errorf("connection %d resumed: %v", i, resumed)
		}
		conn.Close()
	}
	if len(rec.hellos) != 2 || rec.hellos[1].Host != "beta" {
		t.Fatalf("hellos %+v", rec.hellos)
	}
	// A stranger's identity (another CA) holds no ticket of this cluster's.
	stranger := newCluster(t)
	if _, err := Dial(context.Background(), l.Addr().String(), stranger.beta, testHello()); err == nil {
		t.Fatal("a host of another CA was admitted")
	}
}
