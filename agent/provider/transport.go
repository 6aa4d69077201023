package provider

import (
	"net/http"
	"sync"
)

// Each uid's requests go over connections of its own: a kept connection
// answers sooner than a new one (a TLS handshake, a round trip or two),
// so with one pool for all, a user timing their own runs could tell
// whether anyone on the host had used a provider within the last minute
// and a half (the idle timeout). A uid's transport keeps at most
// idleConnsPerUid idle connections.
const idleConnsPerUid = 8

// maxTransports bounds the uids whose transports are kept: past it, one
// kept transport is let go (its idle connections closed; a request under
// way keeps its own) before another is made, so that the server's memory
// of providers does not grow with every uid that ever ran a model.
const maxTransports = 1024

var transports = struct {
	sync.Mutex
	byUid map[uint32]*http.Transport
}{byUid: map[uint32]*http.Transport{}}

// transportFor is uid's transport, made at its first request.
func transportFor(uid uint32) *http.Transport {
	transports.Lock()
	defer transports.Unlock()
	t := transports.byUid[uid]
	if t == nil {
		if len(transports.byUid) >= maxTransports {
			for old, ot := range transports.byUid { // any one: map order
				ot.CloseIdleConnections()
				delete(transports.byUid, old)
				break
			}
		}
		t = newTransport()
		transports.byUid[uid] = t
	}
	return t
}

// newTransport is Go's default transport (HTTP/2 where the provider
// offers it, its timeouts) that takes no proxy from the environment:
// nothing about where a key goes is read from the server's environment.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConns = idleConnsPerUid
	t.MaxIdleConnsPerHost = idleConnsPerUid // a uid's runs in parallel mostly ask one provider (Go's default keeps 2)
	return t
}
