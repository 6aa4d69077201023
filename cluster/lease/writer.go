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
	return watchValue(ctx, m, m.writerKey(), func(kv *mvccpb.KeyValue) Writer {
		if kv == nil {
			return Writer{}
		}
		return writerOf(kv)
	})
}

// watchValue sends what of(key's value) is now, then at each change (of
// nil when the key is missing or deleted), until ctx ends, when the
// channel is closed; a value equal to the last sent is not sent again.
// While etcd cannot be reached nothing is sent; it reads and watches
// again every TTL/3.
func watchValue[V comparable](ctx context.Context, m *Member, key string, of func(*mvccpb.KeyValue) V) <-chan V {
	out := make(chan V, 1)
	go func() {
		defer close(out)
		var last *V
		send := func(kv *mvccpb.KeyValue) bool {
			v := of(kv)
			if last != nil && *last == v {
				return true
			}
			select {
			case out <- v:
				last = &v
				return true
			case <-ctx.Done():
				return false
			}
		}
		for ctx.Err() == nil {
			if rev, ok := m.readKey(ctx, key, send); ok {
				m.followKey(ctx, key, rev, send)
			}
			select {
			case <-ctx.Done():
			case <-time.After(m.cfg.TTL / 3):
			}
		}
	}()
	return out
}

// readKey sends key's current value (nil when none); the revision to
// watch from, and whether the read succeeded.
func (m *Member) readKey(ctx context.Context, key string, send func(*mvccpb.KeyValue) bool) (int64, bool) {
	resp, err := m.get(ctx, "watch "+key, key)
	if err != nil {
		return 0, false
	}
	var kv *mvccpb.KeyValue
	if len(resp.Kvs) > 0 {
		kv = resp.Kvs[0]
	}
	return resp.Header.Revision + 1, send(kv)
}

// followKey sends each change of key from revision rev on, until the
// watch breaks (no leader, compaction) or ctx ends.
func (m *Member) followKey(ctx context.Context, key string, rev int64, send func(*mvccpb.KeyValue) bool) {
	changes, cancel := m.watch(ctx, key, rev)
	defer cancel()
	for w := range changes {
		if w.Err() != nil {
			return
		}
		for _, ev := range w.Events {
			var kv *mvccpb.KeyValue
			if ev.Type == mvccpb.PUT {
				kv = ev.Kv
			}
			if !send(kv) {
				return
			}
		}
	}
}
