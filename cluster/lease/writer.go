package lease

import (
	"context"
	"encoding/json"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Writer is the host that holds the writer key: its name, where it is
// reached, and its term's token. The zero Writer means none.
type Writer struct {
	Host  string
	Addr  string
	Token uint64
}

// writerOf reads a writer key's value; a value that does not parse names
// no host but keeps the token (a follower then knows someone writes).
func writerOf(kv *mvccpb.KeyValue) Writer {
	var v writerValue
	json.Unmarshal(kv.Value, &v)
	return Writer{Host: v.Host, Addr: v.Addr, Token: uint64(kv.CreateRevision)}
}

// Writer is the current writer, as a linearizable read sees it: an
// ENOENT-wrapping error when none, EAGAIN when etcd does not answer in
// time.
func (m *Member) Writer(ctx context.Context) (Writer, error) {
	resp, err := m.get(ctx, "writer", m.writerKey())
	if err != nil {
		return Writer{}, err
	}
	if len(resp.Kvs) == 0 {
		return Writer{}, abi.Errorf(syscall.ENOENT, "lease writer", "no host is the writer")
	}
	return writerOf(resp.Kvs[0]), nil
}

// WatchWriter sends the current writer, then each change (the zero Writer
// when there is none), until ctx ends, when the channel is closed. While
// etcd cannot be reached nothing is sent; it reads and watches again every
// TTL/3 and sends the writer then if it changed meanwhile.
func (m *Member) WatchWriter(ctx context.Context) <-chan Writer {
	out := make(chan Writer, 1)
	go func() {
		defer close(out)
		var last *Writer
		send := func(w Writer) bool {
			if last != nil && *last == w {
				return true
			}
			select {
			case out <- w:
				last = &w
				return true
			case <-ctx.Done():
				return false
			}
		}
		for ctx.Err() == nil {
			if rev, ok := m.readWriter(ctx, send); ok {
				m.followWriter(ctx, rev, send)
			}
			select {
			case <-ctx.Done():
			case <-time.After(m.cfg.TTL / 3):
			}
		}
	}()
	return out
}

// readWriter sends the writer key's current holder; the revision to watch
// from, and whether the read succeeded.
func (m *Member) readWriter(ctx context.Context, send func(Writer) bool) (int64, bool) {
	resp, err := m.get(ctx, "watch writer", m.writerKey())
	if err != nil {
		return 0, false
	}
	w := Writer{}
	if len(resp.Kvs) > 0 {
		w = writerOf(resp.Kvs[0])
	}
	return resp.Header.Revision + 1, send(w)
}

// followWriter sends each change of the writer key from revision rev on,
// until the watch breaks (no leader, compaction) or ctx ends.
func (m *Member) followWriter(ctx context.Context, rev int64, send func(Writer) bool) {
	changes, cancel := m.watch(ctx, m.writerKey(), rev)
	defer cancel()
	for w := range changes {
		if w.Err() != nil {
			return
		}
		for _, ev := range w.Events {
			next := Writer{}
			if ev.Type == mvccpb.PUT {
				next = writerOf(ev.Kv)
			}
			if !send(next) {
				return
			}
		}
	}
}
