package provider

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// BenchmarkFirstDelta compares, in one run on one server, the time from
// calling Stream to its first delta with the time from sending the same
// request with a bare http.Client to the first byte of its body. The
// "stream/bare" metric is their ratio: what this package adds on the path
// to the first token (request rendering, SSE and JSON decoding).
func BenchmarkFirstDelta(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w)
		writeEvents(w, openAICase.text("first"))
		<-r.Context().Done() // both clients hang up after the first piece
	}))
	defer srv.Close()
	cfg := configFor(modelapi.OpenAIChat, srv.URL)
	body, err := openAI{}.body(cfg, hello, offered{})
	if err != nil {
		b.Fatal(err)
	}
	bare := &http.Client{Transport: newTransport()}
	var streamTotal, bareTotal time.Duration
	b.ResetTimer()
	for range b.N {
		streamTotal += firstDelta(b, cfg)
		bareTotal += firstByte(b, bare, cfg.Endpoint+"/chat/completions", body)
	}
	b.ReportMetric(float64(streamTotal)/float64(bareTotal), "stream/bare")
	b.ReportMetric(float64(streamTotal.Nanoseconds())/float64(b.N), "ns/first-delta")
	b.ReportMetric(float64(bareTotal.Nanoseconds())/float64(b.N), "ns/first-byte")
}

// firstDelta is how long Stream takes to its first delta.
func firstDelta(b *testing.B, cfg modelapi.Config) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var took time.Duration
	start := time.Now()
	Stream(ctx, cfg, hello, func(string) {
		if took == 0 {
			took = time.Since(start)
			cancel()
		}
	})
	if took == 0 {
		b.Fatal("no delta")
	}
	return took
}

// firstByte is how long a bare client takes to the first byte of the body.
func firstByte(b *testing.B, client *http.Client, url string, body []byte) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if n, _ := resp.Body.Read(make([]byte, 1)); n != 1 {
		b.Fatal("no body")
	}
	return time.Since(start)
}

// tlsBenchUid is BenchmarkStreamsInTurn's uid.
const tlsBenchUid = 4242

// BenchmarkStreamsInTurn: whole streams one after another to a provider
// over TLS, as a session's runs are, the body's last chunk written apart
// from the last event (as a handler that returns after its last flush
// writes it). Reports the new connections a stream (0 when they are
// kept: TestStreamReusesConnection) beside the time a stream takes.
func BenchmarkStreamsInTurn(b *testing.B) {
	srv, conns := countingConns(streamOf(openAICase.stream("hel", "lo")...))
	srv.StartTLS()
	defer srv.Close()
	cfg := configFor(modelapi.OpenAIChat, srv.URL)
	req := hello
	req.Owner.Uid = tlsBenchUid // a uid of its own, whose transport trusts the test's certificate
	transportFor(tlsBenchUid).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	b.ResetTimer()
	for range b.N {
		if _, err := Stream(context.Background(), cfg, req, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(conns.Load())/float64(b.N), "conns/stream")
}
