package provider

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// forEachAPI runs f as a parallel subtest for each API.
func forEachAPI(t *testing.T, f func(t *testing.T, a apiCase)) {
	t.Parallel()
	for _, a := range apiCases {
		t.Run(a.api, func(t *testing.T) {
			t.Parallel()
			f(t, a)
		})
	}
}

func TestHTTPStatusErrors(t *testing.T) {
	cases := []struct {
		code int
		typ  string
		want syscall.Errno
	}{
		{400, "invalid_request_error", syscall.EINVAL},
		{401, "authentication_error", syscall.EACCES},
		{403, "permission_error", syscall.EACCES},
		{404, "not_found_error", syscall.EINVAL},
		{422, "invalid_request_error", syscall.EINVAL},
		{429, "rate_limit_error", syscall.EAGAIN},
		{500, "api_error", syscall.EIO},
		{503, "overloaded_error", syscall.EIO},
	}
	forEachAPI(t, func(t *testing.T, a apiCase) {
		for _, c := range cases {
			msg := sayf("the provider's own words for %d", c.code)
			base, _ := serve(t, replyStatus(c.code, a.errorBody(msg, c.typ)))
			_, _, err := collect(context.Background(), configFor(a.api, base), hello)
			wantRefusal(t, err, c.want, msg, strconv.Itoa(c.code))
		}
	})
}

// Error bodies that are not in the API's own format still give their words.
func TestOtherErrorBodies(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		for body, words := range map[string]string{
			`{"error":"model 'llama9' not found"}`:         "model 'llama9' not found", // Ollama
			`{"detail":"Not Found"}`:                       "Not Found",                // FastAPI servers
			"upstream connect error or disconnect\r\n":     "upstream connect error",   // a proxy's text
			`{"message":"Internal server error"}`:          "Internal server error",
			`<html><body>404 page not found</body></html>`: "404 page not found",
		} {
			base, _ := serve(t, replyStatus(404, body))
			_, _, err := collect(context.Background(), configFor(a.api, base), hello)
			wantRefusal(t, err, syscall.EINVAL, words)
		}
	})
}

// A stream cut inside an event by a chunked reply that is aborted.
func TestStreamCutChunked(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		full := a.text("second")
		base, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			writeEvents(w, a.text("first"), full[:len(full)/2])
			panic(http.ErrAbortHandler) // closes the connection without the last chunk
		})
		deltas, _, err := collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EIO, "stream ended early")
		if strings.Join(deltas, "|") != "first" {
			t.Errorf("deltas %q, want only the whole event's", deltas)
		}
	})
}

// A close-delimited reply (no length, no chunking) whose connection is
// closed: the body ends cleanly at EOF, and only the missing end event
// tells that the stream was cut.
func TestStreamCutCloseDelimited(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		full := a.stream("one", "two")
		for name, tail := range map[string]string{
			"inside an event":      strings.Join(full[:4], "") + full[4][:len(full[4])/2],
			"between events":       strings.Join(full[:4], ""),
			"without a blank line": strings.Join(full[:4], "") + strings.TrimSuffix(full[4], "\n\n"),
		} {
			base, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + tail)
				buf.Flush()
			})
			_, _, err := collect(context.Background(), configFor(a.api, base), hello)
			wantRefusal(t, err, syscall.EIO, "stream ended early")
			if t.Failed() {
				t.Fatalf("cut %s", name)
			}
		}
	})
}

func TestMalformedEvent(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		bad := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}\n\n"
		if a.api == modelapi.AnthropicMessages {
			bad = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\n\n"
		}
		base, _ := serve(t, streamOf(a.text("fine"), bad, a.text("never")))
		deltas, _, err := collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EIO, "malformed stream")
		if strings.Join(deltas, "|") != "fine" {
			t.Errorf("deltas %q", deltas)
		}
	})
}

// An error inside the stream carries the provider's words, and the errno
// its type stands for.
func TestErrorEvent(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		base, _ := serve(t, streamOf(a.text("so far"), a.errorEvent("slow down please", "rate_limit_error")))
		_, _, err := collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EAGAIN, "slow down please")

		base, _ = serve(t, streamOf(a.errorEvent("Overloaded", "overloaded_error")))
		_, _, err = collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EIO, "Overloaded")
	})
}

// A 200 JSON reply to a streaming request: an error object, or a format
// this package does not read.
func TestJSONReply(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		base, _ := serve(t, replyStatus(200, a.errorBody("quota gone", "insufficient_quota")))
		_, _, err := collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EAGAIN, "quota gone")

		base, _ = serve(t, replyStatus(200, `{"id":"x","choices":[{"message":{"content":"hi"}}]}`))
		_, _, err = collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EIO, "malformed stream")
	})
}

// silentServer accepts connections and never writes a byte.
func silentServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// timed runs Stream and says how long it took. Its context gives up after
// 10 s, so that a timeout that does not work fails the test (ECANCELED)
// instead of hanging it.
func timed(cfg modelapi.Config) (time.Duration, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	deltas, _, err := collect(ctx, cfg, hello)
	return time.Since(start), deltas, err
}

func TestTimeoutNoAnswer(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		cfg := configFor(a.api, silentServer(t))
		cfg.Timeout = 300 * time.Millisecond
		took, _, err := timed(cfg)
		wantRefusal(t, err, syscall.ETIMEDOUT, "300ms", "timeout")
		if took < 300*time.Millisecond || took > 3*time.Second {
			t.Errorf("took %v for a 300ms timeout", took)
		}
	})
}

func TestIdleTimeoutNoHeaders(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		cfg := configFor(a.api, silentServer(t))
		cfg.IdleTimeout = 300 * time.Millisecond
		took, _, err := timed(cfg)
		wantRefusal(t, err, syscall.ETIMEDOUT, "idle timeout")
		if took > 3*time.Second {
			t.Errorf("took %v for a 300ms idle timeout", took)
		}
	})
}

// hang sends headers and the given events, then says nothing until the
// client goes away.
func hang(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w)
		writeEvents(w, events...)
		<-r.Context().Done()
	}
}

func TestIdleTimeoutAfterHeaders(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		for _, events := range [][]string{nil, {a.text("first")}} {
			base, _ := serve(t, hang(events...))
			cfg := configFor(a.api, base)
			cfg.IdleTimeout = 300 * time.Millisecond
			took, deltas, err := timed(cfg)
			wantRefusal(t, err, syscall.ETIMEDOUT, "idle timeout")
			if took > 3*time.Second || len(deltas) != len(events) {
				t.Errorf("took %v, deltas %q", took, deltas)
			}
		}
	})
}

// The idle timer restarts with each byte: a stream slower in total than
// the idle timeout, but never silent that long, completes.
func TestIdleTimerRestarts(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		const n = 12
		pieces := make([]string, n)
		for i := range pieces {
			pieces[i] = strconv.Itoa(i)
		}
		events := a.stream(pieces...)
		base, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for _, ev := range events {
				<-tick.C
				writeEvents(w, ev)
			}
		})
		cfg := configFor(a.api, base)
		cfg.IdleTimeout = 400 * time.Millisecond // under the ~0.9 s the stream takes
		took, deltas, err := timed(cfg)
		if err != nil || len(deltas) != n {
			t.Fatalf("took %v, deltas %q, error %v", took, deltas, err)
		}
	})
}

// Timeout bounds the streaming too, not only the wait for headers.
func TestTimeoutWhileStreaming(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		base, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
					writeEvents(w, a.text("."))
				}
			}
		})
		cfg := configFor(a.api, base)
		cfg.Timeout = 300 * time.Millisecond
		took, deltas, err := timed(cfg)
		wantRefusal(t, err, syscall.ETIMEDOUT, "(timeout)")
		if took > 3*time.Second || len(deltas) == 0 {
			t.Errorf("took %v, %d deltas", took, len(deltas))
		}
	})
}

// Cancelling mid-stream: no delta after the cancel, Stream returns at
// once, and the server sees its request go away.
func TestCancelMidStream(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		gone := make(chan struct{})
		base, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			writeEvents(w, a.text("first"))
			// More events in one write: they sit in the client's buffer
			// when it cancels, so a delta after the cancel would show.
			writeEvents(w, strings.Repeat(a.text("more"), 5))
			<-r.Context().Done()
			close(gone)
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var cancelled time.Time
		after := 0
		_, err := Stream(ctx, configFor(a.api, base), hello, func(s string) {
			if !cancelled.IsZero() {
				after++
				return
			}
			cancelled = time.Now()
			cancel()
		})
		took := time.Since(cancelled)
		wantRefusal(t, err, syscall.ECANCELED, "cancelled", "context canceled")
		if after != 0 {
			t.Errorf("%d deltas after the cancel", after)
		}
		if took > time.Second {
			t.Errorf("Stream returned %v after the cancel", took)
		}
		select {
		case <-gone:
		case <-time.After(10 * time.Second):
			t.Fatal("the server never saw its request cancelled")
		}
	})
}

func TestCancelledBeforeSending(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		base, reqs := serve(t, streamOf(a.stream("x")...))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, _, err := collect(ctx, configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.ECANCELED)
		if len(reqs) != 0 {
			t.Error("a request was sent on a cancelled context")
		}
	})
}

func TestConnectionRefused(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, _, err = collect(context.Background(), configFor(a.api, "http://"+addr), hello)
		wantRefusal(t, err, syscall.ECONNREFUSED, addr)
	})
}

func TestTransportErrno(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want syscall.Errno
	}{
		{&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}}, syscall.EHOSTUNREACH},
		{&net.OpError{Op: "dial", Err: syscall.ENETUNREACH}, syscall.EHOSTUNREACH},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, syscall.ECONNREFUSED},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, syscall.EIO},
		{io.ErrUnexpectedEOF, syscall.EIO},
	}
	for _, c := range cases {
		if got := transportErrno(c.err); got != c.want {
			t.Errorf("%v: %v, want %v", c.err, got, c.want)
		}
	}
}

// Whatever a server echoes, the key does not come back: not in an error
// (even one cut to length), not in a delta, not in the result.
func TestKeyNeverEchoed(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		echo := func(r *http.Request) string {
			return r.Header.Get("Authorization") + " " + r.Header.Get("X-Api-Key")
		}
		base, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
			replyStatus(401, a.errorBody("Incorrect API key provided: "+echo(r), "authentication_error"))(w, r)
		})
		_, _, err := collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EACCES, "Incorrect API key provided", redacted)

		// The key straddles where a long message is cut.
		base, _ = serve(t, func(w http.ResponseWriter, r *http.Request) {
			replyStatus(400, strings.Repeat("x", maxMessage-4)+testKey)(w, r)
		})
		_, _, err = collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EINVAL)
		if strings.Contains(err.Error(), testKey[:4]) {
			t.Errorf("a piece of the key is in %q", err.Error()[len(err.Error())-40:])
		}

		base, _ = serve(t, func(w http.ResponseWriter, r *http.Request) {
			streamOf(a.text("ok"), a.errorEvent("bad key "+testKey, "authentication_error"))(w, r)
		})
		_, _, err = collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EACCES, "bad key "+redacted)

		base, _ = serve(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere?key="+testKey, http.StatusTemporaryRedirect)
		})
		_, _, err = collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EIO, "redirect")

		// In text, split across deltas.
		split := len("your key is ") + 5
		line := "your key is " + testKey + "!"
		base, _ = serve(t, streamOf(a.stream(line[:split], line[split:], " bye")...))
		deltas, res, err := collect(context.Background(), configFor(a.api, base), hello)
		if err != nil {
			t.Fatal(err)
		}
		if want := "your key is " + redacted + "! bye"; res.Text != want || strings.Join(deltas, "") != want {
			t.Errorf("text %q, deltas %q, want %q", res.Text, deltas, want)
		}
	})
}

// A redirect is not followed: the key's header would go along, and the
// POST would become a GET.
func TestRedirectNotFollowed(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		target, reqs := serve(t, streamOf(a.stream("x")...))
		base, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target+r.URL.Path, http.StatusPermanentRedirect)
		})
		_, _, err := collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EIO, "308", target)
		if len(reqs) != 0 {
			t.Error("the redirect was followed")
		}
	})
}

func TestEventTooLarge(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		base, _ := serve(t, streamOf(a.text("ok"), a.text(strings.Repeat("x", MaxEventBytes))))
		deltas, _, err := collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EIO, "malformed stream", strconv.Itoa(MaxEventBytes))
		if len(deltas) != 1 {
			t.Errorf("%d deltas", len(deltas))
		}
	})
}

func TestReplyTooLarge(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		piece := a.text(strings.Repeat("y", 1<<20))
		base, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			bw := bufio.NewWriter(w)
			for i := 0; i <= MaxTextBytes>>20 && r.Context().Err() == nil; i++ {
				bw.WriteString(piece)
			}
			bw.Flush()
		})
		total := 0
		_, err := Stream(context.Background(), configFor(a.api, base), hello, func(s string) { total += len(s) })
		wantRefusal(t, err, syscall.EFBIG)
		if total > MaxTextBytes {
			t.Errorf("%d bytes passed on", total)
		}
	})
}

// A request that cannot be valid is refused before anything is sent.
func TestInvalidRequest(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		base, reqs := serve(t, streamOf(a.stream("x")...))
		cfg := configFor(a.api, base)
		_, _, err := collect(context.Background(), cfg, modelapi.Request{})
		wantRefusal(t, err, syscall.EINVAL, "no turns")
		_, _, err = collect(context.Background(), cfg, modelapi.Request{Turns: []modelapi.Turn{{Role: "system", Text: "x"}}})
		wantRefusal(t, err, syscall.EINVAL, `"system"`)
		cfg.ModelID = ""
		_, _, err = collect(context.Background(), cfg, hello)
		wantRefusal(t, err, syscall.EINVAL, "model_id")
		if len(reqs) != 0 {
			t.Error("an invalid request was sent")
		}
	})
}

// A reply that streams on without end but carries no text (empty chunks
// the decoders accept): what is read of it is bounded, and it fails with
// EFBIG, not only when someone cancels the run.
func TestReplyStreamBoundWithoutText(t *testing.T) {
	forEachAPI(t, func(t *testing.T, a apiCase) {
		empty := strings.Repeat(a.text("")+": ping\n\n", 1000)
		sent := 0
		base, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			bw := bufio.NewWriterSize(w, 1<<20)
			for r.Context().Err() == nil && sent < 2*MaxReplyBytes {
				bw.WriteString(empty)
				sent += len(empty)
			}
			bw.WriteString(strings.Join(a.stream("ok"), ""))
			bw.Flush()
		})
		deltas, _, err := collect(context.Background(), configFor(a.api, base), hello)
		wantRefusal(t, err, syscall.EFBIG, strconv.Itoa(MaxReplyBytes))
		if len(deltas) != 0 {
			t.Errorf("deltas %q", deltas)
		}
	})
}
