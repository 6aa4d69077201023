// Package host is one host of a cluster over one store: its role, writer
// or follower, and the move between them. It composes what other packages
// own — the writer's lease (cluster/lease), the engine (session), the
// follower's read-only view (cluster/replica), the engine switch the mounts
// serve (cluster/replica.Switch), the sockets (server) and the wire between
// hosts (cluster/peer) — and decides no rule of its own but one: a host
// writes the store only while its term is valid.
//
// One host writes the store at a time (the writer); the others follow:
// they serve the tree read-only from the shared store and relay each
// socket request to the writer. Chosen over a lease per session because a
// store has one journal, written by one process: a writer per store keeps
// the journal, its group commit and its replay exactly as they are on one
// host, and the fence at takeover (sealedlog.FenceJournal) is then the
// only new rule history needs.
//
// It must never write the store outside a term (the engine's gate is the
// term's Valid), never vouch for a caller it did not see itself (a relayed
// request names the local caller from SO_PEERCRED, server.Sockets), and
// never accept a relayed request while it is not the writer.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/cluster/engswitch"
	"github.com/ctxfs/ctxfs/cluster/lease"
	"github.com/ctxfs/ctxfs/cluster/peer"
	"github.com/ctxfs/ctxfs/cluster/replica"
	"github.com/ctxfs/ctxfs/server"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Config is what a host is made of.
type Config struct {
	Engine   session.Config // the writer's engine; Token and Gate are the term's
	Member   *lease.Member  // this host in etcd
	Identity *ca.Identity   // this host's certificate, for the peers
	Listen   string         // where this host listens for relayed requests
	Replica  *replica.Replica
	Switch   *engswitch.Switch // what the mounts serve
	Sockets  *server.Sockets
	Log      *slog.Logger
}

// Host is a running host.
type Host struct {
	cfg     Config
	writer  atomic.Pointer[lease.Writer]   // the writer as last seen in etcd
	eng     atomic.Pointer[session.Engine] // the engine while this host writes
	peers   *peer.Listener
	stopped chan struct{}
}

// dialPatience bounds a relay's connection to the writer: a writer that
// does not answer within it is as good as none (EAGAIN to the client).
const dialPatience = 3 * time.Second

// retryPause is how long a host waits before campaigning again after a
// term it could not serve (the engine refused to open).
const retryPause = time.Second

// Start listens for relayed requests and makes the host a follower; Run
// then campaigns.
func Start(cfg Config) (*Host, error) {
	h := &Host{cfg: cfg, stopped: make(chan struct{})}
	l, err := peer.Listen(cfg.Listen, cfg.Identity, h.serveRelayed)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen %s: %w", cfg.Listen, err)
	}
	h.peers = l
	cfg.Replica.SetRelay(relayer{h})
	h.follow()
	return h, nil
}

// Run serves until ctx ends: it watches who writes, campaigns, writes
// while its term lasts, and follows again when the term is lost. When ctx
// ends while it writes, it hands the store over (drain): the engine is
// closed within the term (checkpointed, nothing left in the journal) and
// the lease is resigned, so another host takes over at once.
func (h *Host) Run(ctx context.Context) {
	defer close(h.stopped)
	go h.watchWriter(ctx)
	h.sayCRL(ctx) // the list read from the certificate directory, if any
	go h.watchCRL(ctx)
	for ctx.Err() == nil {
		term, err := h.cfg.Member.Campaign(ctx)
		if err != nil {
			if ctx.Err() == nil {
				h.cfg.Log.Warn("cluster: campaign", "err", err)
				pause(ctx, retryPause)
			}
			continue
		}
		h.serveTerm(ctx, term)
	}
}

// Stopped is closed when Run has returned (the drain is over).
func (h *Host) Stopped() <-chan struct{} { return h.stopped }

// Close stops listening for relayed requests.
func (h *Host) Close() { h.peers.Close() }

// serveTerm writes the store for as long as term lasts.
func (h *Host) serveTerm(ctx context.Context, term *lease.Term) {
	log := h.cfg.Log.With("token", term.Token)
	opening := time.Now()
	cfg := h.cfg.Engine
	cfg.Token, cfg.Gate = term.Token, term.Valid
	e, err := session.Open(cfg) // fences older writers off, then replays their journal
	if err != nil {
		log.Error("cluster: cannot write the store; handing the term back", "err", err)
		term.Resign(context.Background())
		pause(ctx, retryPause)
		return
	}
	log.Info("cluster: writing the store", "took", time.Since(opening).Round(time.Millisecond).String())
	h.write(e)
	select {
	case <-term.Done():
		log.Warn("cluster: term lost; following", "err", term.Valid())
		h.follow()
		e.Abandon() // its writes are refused already (the gate); its runs die
	case <-ctx.Done():
		h.follow()
		if err := e.Close(); err != nil { // checkpointed within the term
			log.Warn("cluster: closing the store", "err", err)
		}
		if err := term.Resign(context.Background()); err != nil {
			log.Warn("cluster: resign", "err", err)
		} else {
			log.Info("cluster: handed the store over")
		}
	}
}

// write makes this host the writer: the mounts and sockets serve e.
func (h *Host) write(e *session.Engine) {
	h.eng.Store(e)
	h.cfg.Switch.Set(e)
	h.cfg.Sockets.SetEngine(e)
	h.cfg.Sockets.SetForward(nil)
}

// follow makes this host a follower: the mounts serve the replica, and the
// sockets relay to the writer.
func (h *Host) follow() {
	h.cfg.Sockets.SetForward(h.relay)
	h.cfg.Sockets.SetEngine(nil)
	h.cfg.Switch.Set(h.cfg.Replica)
	h.eng.Store(nil)
}

// watchWriter keeps h.writer current.
func (h *Host) watchWriter(ctx context.Context) {
	for w := range h.cfg.Member.WatchWriter(ctx) {
		if w.Host == "" {
			h.writer.Store(nil)
			continue
		}
		h.writer.Store(&w)
	}
}

// watchCRL adopts each newer revocation list the CA signed as it appears
// in etcd, and drops the connections of the hosts it names; a list the
// CA did not sign is logged and changes nothing (cluster/ca).
func (h *Host) watchCRL(ctx context.Context) {
	for crl := range h.cfg.Member.WatchCRL(ctx) {
		if crl == "" {
			continue // none yet, or deleted: the list held stands
		}
		adopted, err := h.cfg.Identity.Adopt([]byte(crl))
		switch {
		case err != nil:
			h.cfg.Log.Warn("cluster: a revocation list in etcd is refused", "err", err)
		case adopted:
			h.cfg.Log.Info("cluster: revocation list adopted", "number", h.cfg.Identity.CRLNumber().String(),
				"connections dropped", h.peers.DropRevoked())
			h.sayCRL(ctx)
		}
	}
}

// sayCRL puts the number of the list this host holds in its host key.
func (h *Host) sayCRL(ctx context.Context) {
	n := h.cfg.Identity.CRLNumber()
	if n.Sign() == 0 {
		return
	}
	if err := h.cfg.Member.SetCRL(ctx, n.String()); err != nil {
		h.cfg.Log.Warn("cluster: the list's number not put in etcd", "err", err)
	}
}

// relay connects a local caller's request to the writer (server.Sockets
// relays the bytes): EAGAIN when no other host writes now.
func (h *Host) relay(c layout.Caller, t session.Target) (net.Conn, error) {
	return h.dial(peer.HelloFor(h.cfg.Identity.Host, c, t))
}

// dial connects to the writer host with hello: EAGAIN when no other host
// writes now, or it cannot be reached within dialPatience.
func (h *Host) dial(hello peer.Hello) (net.Conn, error) {
	w := h.writer.Load()
	if w == nil || w.Host == h.cfg.Identity.Host {
		return nil, fmt.Errorf("cluster: no host writes the store now: %w", syscall.EAGAIN)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialPatience)
	defer cancel()
	conn, err := peer.DialHost(ctx, w.Host, w.Addr, h.cfg.Identity, hello)
	if err != nil {
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
			return nil, err // EACCES: one of the two hosts is revoked; waiting mends nothing
		}
		return nil, fmt.Errorf("cluster: relay to %s: %v: %w", w.Host, err, syscall.EAGAIN)
	}
	return conn, nil
}

// serveRelayed serves a request another host relayed, as its local caller
// would be served here; refused (EAGAIN) while this host does not write.
func (h *Host) serveRelayed(conn net.Conn, hello peer.Hello) {
	if h.eng.Load() == nil {
		peer.Refuse(conn, fmt.Errorf("cluster: this host does not write the store now: %w", syscall.EAGAIN))
		return
	}
	if err := peer.Admit(conn); err != nil {
		return
	}
	switch ref, ok := hello.ControlRef(); {
	case hello.Path != "":
		h.serveTreeChange(conn, hello.Caller(), hello.Path)
		return
	case ok && hello.File != "":
		h.serveFileChange(conn, hello.Caller(), ref, hello.File)
		return
	case ok:
		h.cfg.Sockets.ServeRemoteControl(conn, hello.Caller(), ref)
		return
	}
	h.cfg.Sockets.ServeRemote(conn, hello.Caller(), hello.Target())
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
