package provider

import (
	"errors"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/internal/quota"
)

// A reply read to the API's end of stream ([DONE], message_stop) is
// not yet read to the body's end: the chunked body's last chunk, a few
// bytes, often comes after the last event. Closed before it, the body
// takes its connection with it, and the next request to the same
// provider opens another (with a real provider, a TLS handshake: a round
// trip or two and its crypto, at every run). So the rest is read in the
// background, bounded, and the run does not wait for it.
const (
	// drainBytes and drainWait bound what is read after the end of
	// stream, and how long: a provider that sends on, or keeps the body
	// open, loses its connection and nothing else.
	drainBytes = 4 << 10
	drainWait  = 100 * time.Millisecond
	// drainsPerUid bounds the replies one uid's runs have read on at
	// once (an endpoint is the definition's, so a user can name one that
	// never ends its bodies), and drainsTotal all users' together; past
	// either a body is closed at once. Root, the reserve, is not counted.
	drainsPerUid = 8
	drainsTotal  = 256
)

var errDrained = errors.New("the reply's end was not read within its bounds")

// drains counts, per uid, the replies being read on.
var drains = newDrains()

func newDrains() *quota.Quota {
	return quota.New("replies read on after their end of stream", syscall.EAGAIN, drainsPerUid, drainsTotal)
}

// end closes the call and its reply's body (resp nil: no reply came).
// A reply read to the API's end of stream (ended) is first read on to
// its body's end in the background, within drainBytes and drainWait; at
// once when the call's uid holds its drains.
func (c *call) end(resp *http.Response, ended bool) {
	if resp == nil || !ended || drains.Take(c.uid) != nil {
		if resp != nil {
			resp.Body.Close()
		}
		c.close()
		return
	}
	go func() {
		defer drains.Give(c.uid)
		t := time.AfterFunc(drainWait, func() { c.cancel(errDrained) })
		io.CopyN(io.Discard, resp.Body, drainBytes)
		t.Stop()
		resp.Body.Close()
		c.close()
	}()
}
