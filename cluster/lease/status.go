package lease

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Status is the cluster as etcd holds it, for `ctxfs cluster status`.
type Status struct {
	Hosts     []HostStatus     // by name
	Writer    Writer           // the zero Writer when none
	Endpoints []EndpointStatus // in Config.Endpoints' order
}

// HostStatus is one registered host.
type HostStatus struct {
	Name    string
	Addr    string
	PID     int
	Started time.Time
	TTLLeft time.Duration // of its host lease, whole seconds as etcd's leader counts it; 0 when unknown or under 1 s
	CRL     string        // the number of the revocation list it holds; "" for none
}

// EndpointStatus is one etcd endpoint's health.
type EndpointStatus struct {
	Endpoint  string
	Version   string
	Member    uint64 // this member's id
	Leader    uint64 // the leader's member id as this member knows it; 0 for none
	RaftIndex uint64
	RaftTerm  uint64
	Err       error // nil when it answered
}

// Status reads the hosts, the writer and each endpoint's health. Endpoints
// are asked each on their own (a dead one is an Err, not a failure); the
// hosts and the writer need a quorum: when etcd cannot give them the
// endpoints are still filled in and the error wraps EAGAIN.
func (m *Member) Status(ctx context.Context) (Status, error) {
	var st Status
	st.Endpoints = m.endpointHealth(ctx)
	hosts, err := m.get(ctx, "status", m.hostsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return st, err
	}
	for _, kv := range hosts.Kvs {
		var v hostValue
		json.Unmarshal(kv.Value, &v)
		h := HostStatus{Name: strings.TrimPrefix(string(kv.Key), m.hostsPrefix()), Addr: v.Addr, PID: v.PID, Started: v.Started, CRL: v.CRL}
		bctx, cancel := m.bounded(ctx)
		if ttl, err := m.client.TimeToLive(bctx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL > 0 {
			h.TTLLeft = time.Duration(ttl.TTL) * time.Second
		}
		cancel()
		st.Hosts = append(st.Hosts, h)
	}
	sort.Slice(st.Hosts, func(i, j int) bool { return st.Hosts[i].Name < st.Hosts[j].Name })
	w, err := m.Writer(ctx)
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		return st, err
	}
	st.Writer = w
	return st, nil
}

// endpointHealth asks every endpoint at once, each bounded.
func (m *Member) endpointHealth(ctx context.Context) []EndpointStatus {
	out := make([]EndpointStatus, len(m.cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range m.cfg.Endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bctx, cancel := context.WithTimeout(ctx, m.cfg.callTimeout())
			defer cancel()
			out[i].Endpoint = ep
			resp, err := m.client.Status(bctx, ep)
			if err != nil {
				out[i].Err = callError(ctx, "status "+ep, err)
				return
			}
			out[i].Version = resp.Version
			out[i].Member = resp.Header.MemberId
			out[i].Leader = resp.Leader
			out[i].RaftIndex = resp.RaftIndex
			out[i].RaftTerm = resp.RaftTerm
		}()
	}
	wg.Wait()
	return out
}
