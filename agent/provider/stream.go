package provider

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// wire is what differs between the two APIs.
type wire interface {
	url(endpoint string) string
	header(h http.Header, key string)
	body(cfg modelapi.Config, req modelapi.Request, tools offered) ([]byte, error)
	decoder(tools offered) decoder
}

// decoder reads one reply's events.
type decoder interface {
	// event handles one event: the text it carries, whether it is the
	// API's end of stream, and a malformedError or a modelapi.APIError.
	event(ev sseEvent) (text string, done bool, err error)
	// result is the usage, stop reason and tool calls seen; Text is the
	// caller's.
	result() modelapi.Result
}

func wireFor(api string) wire {
	if api == modelapi.AnthropicMessages {
		return anthropic{}
	}
	return openAI{}
}

// Stream sends req and calls delta with each piece of text as it arrives,
// from the caller's goroutine. It returns the result, or an *abi.Error
// (see the package doc for the errnos). After ctx is cancelled, delta is
// never called again and Stream returns promptly with ECANCELED, the HTTP
// request aborted; the error's message carries ctx's cause, and the caller
// asks ctx itself whether it was cancelled. Stream sends exactly one
// request: it never retries.
func Stream(ctx context.Context, cfg modelapi.Config, req modelapi.Request, delta func(text string)) (modelapi.Result, error) {
	if delta == nil {
		delta = func(string) {}
	}
	res, err := stream(ctx, cfg, req, delta)
	if err != nil {
		// The last line of defence: whatever an error quotes (a URL, a
		// library's words), the key does not leave in it.
		err.Msg = scrub(err.Msg, cfg.APIKey)
		return modelapi.Result{}, err
	}
	return res, nil
}

// stream is Stream with an error that is always an *abi.Error, so that
// Stream scrubs every message in one place.
func stream(ctx context.Context, cfg modelapi.Config, req modelapi.Request, delta func(string)) (modelapi.Result, *abi.Error) {
	if err := cfg.Validate(); err != nil {
		return modelapi.Result{}, err.(*abi.Error)
	}
	w := wireFor(cfg.API)
	tools, err := newOffered(req.Tools)
	if err != nil {
		return modelapi.Result{}, abi.Errorf(syscall.EINVAL, cfg.API, "%v", err)
	}
	body, err := w.body(cfg, req, tools)
	if err != nil {
		return modelapi.Result{}, abi.Errorf(syscall.EINVAL, cfg.API, "%v", err)
	}
	c := newCall(ctx, cfg, w.url(cfg.Endpoint), req.Owner.Uid)
	var resp *http.Response // the reply, once one came
	ended := false          // read to the API's end of stream
	defer func() { c.end(resp, ended) }()
	if ctx.Err() != nil {
		return modelapi.Result{}, c.fail(ctx.Err(), "")
	}
	var e *abi.Error
	if resp, e = c.send(w, body); e != nil {
		return modelapi.Result{}, e
	}
	if resp.StatusCode/100 != 2 {
		return modelapi.Result{}, c.httpError(resp)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		return modelapi.Result{}, c.notStream(resp)
	}
	res, e := c.read(resp.Body, w.decoder(tools), delta)
	ended = e == nil
	return res, e
}

var (
	errTimeout = errors.New("timeout")
	errIdle    = errors.New("idle timeout")
)

// call is one request in flight. Its context is cancelled with errTimeout
// when Config.Timeout passes, with errIdle after Config.IdleTimeout of
// silence, and when the caller's context is cancelled; cancelling it
// aborts the HTTP request, whatever it is waiting for.
type call struct {
	cfg      modelapi.Config
	url      string
	uid      uint32 // whose request: its connections are its own (transportFor)
	parent   context.Context
	ctx      context.Context
	cancel   context.CancelCauseFunc
	idle     *time.Timer
	deadline *time.Timer // nil without a Timeout
}

func newCall(parent context.Context, cfg modelapi.Config, target string, uid uint32) *call {
	ctx, cancel := context.WithCancelCause(parent)
	c := &call{cfg: cfg, url: target, uid: uid, parent: parent, ctx: ctx, cancel: cancel}
	c.idle = time.AfterFunc(idleBound(cfg), func() { cancel(errIdle) })
	if cfg.Timeout > 0 {
		c.deadline = time.AfterFunc(cfg.Timeout, func() { cancel(errTimeout) })
	}
	return c
}

// close stops the timers and aborts whatever is still in flight.
func (c *call) close() {
	c.idle.Stop()
	if c.deadline != nil {
		c.deadline.Stop()
	}
	c.cancel(context.Canceled)
}

func (c *call) errorf(errno syscall.Errno, format string, args ...any) *abi.Error {
	return abi.Errorf(errno, c.cfg.API, format, args...)
}

// fail turns an error from sending or reading into the errno the caller
// acts on; what says what was being done. The contexts are asked first:
// once one is done, every I/O error is only its echo.
func (c *call) fail(err error, what string) *abi.Error {
	if c.parent.Err() != nil {
		return c.errorf(syscall.ECANCELED, "cancelled: %v", context.Cause(c.parent))
	}
	switch context.Cause(c.ctx) {
	case errTimeout:
		return c.errorf(syscall.ETIMEDOUT, "no complete reply within %v (timeout)", c.cfg.Timeout)
	case errIdle:
		return c.errorf(syscall.ETIMEDOUT, "nothing received for %v (idle timeout)", idleBound(c.cfg))
	}
	if err == io.EOF || err == errCutLine {
		return c.errorf(syscall.EIO, "%s: the server closed the connection", what)
	}
	return c.errorf(transportErrno(err), "%s: %v", what, err)
}

// client is the uid's own (transportFor), made not to follow redirects:
// a redirect would turn the POST into a GET, and could carry the key's
// header to another host.
func (c *call) client() *http.Client {
	return &http.Client{
		Transport:     transportFor(c.uid),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// send posts the body and waits for the response headers; from then on
// the idle timer counts silence of the body.
func (c *call) send(w wire, body []byte) (*http.Response, *abi.Error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, c.errorf(syscall.EINVAL, "endpoint: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", "ctxfs")
	w.header(req.Header, c.cfg.APIKey)
	resp, err := c.client().Do(req)
	if err != nil {
		return nil, c.fail(unwrapURL(err), "POST "+c.url)
	}
	c.idle.Reset(idleBound(c.cfg))
	resp.Body = idleBody{resp.Body, c}
	return resp, nil
}

// unwrapURL drops the *url.Error wrapper ("Post URL: …"): fail names the
// URL itself.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// idleBody restarts the idle timer on every byte that arrives.
type idleBody struct {
	io.ReadCloser
	c *call
}

func (b idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.c.idle.Reset(idleBound(b.c.cfg))
	}
	return n, err
}

// httpError is the error for a reply that is not a 2xx: its errno from
// the status, its message from the provider's error body.
func (c *call) httpError(resp *http.Response) *abi.Error {
	if resp.StatusCode/100 == 3 {
		return c.errorf(syscall.EIO, "HTTP %s: the endpoint redirects to %s; set the endpoint to the final URL",
			resp.Status, quote([]byte(resp.Header.Get("Location")), c.cfg.APIKey))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
	if err != nil && c.ctx.Err() != nil {
		return c.fail(err, "reading the error body")
	}
	msg := quote(body, c.cfg.APIKey)
	if e, ok := modelapi.ParseAPIError(body); ok {
		msg = quote([]byte(e.Error()), c.cfg.APIKey)
	}
	if msg == "" {
		return c.errorf(modelapi.StatusErrno(resp.StatusCode), "HTTP %s", resp.Status)
	}
	return c.errorf(modelapi.StatusErrno(resp.StatusCode), "HTTP %s: %s", resp.Status, msg)
}

// notStream is the error for a 2xx JSON reply to a streaming request: an
// error object some servers send that way, or a reply in a format this
// package does not read.
func (c *call) notStream(resp *http.Response) *abi.Error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
	if err != nil && c.ctx.Err() != nil {
		return c.fail(err, "reading the reply")
	}
	if e, ok := modelapi.ParseAPIError(body); ok {
		return c.errorf(e.Errno(), "%s", quote([]byte(e.Error()), c.cfg.APIKey))
	}
	return c.errorf(syscall.EIO, "malformed stream: a JSON reply, not an event stream: %s", quote(body, c.cfg.APIKey))
}

// read decodes the event stream, passes text to delta as it comes, and
// returns the result at the API's end of stream.
func (c *call) read(body io.Reader, dec decoder, delta func(string)) (modelapi.Result, *abi.Error) {
	events := newSSEReader(&replyBound{r: body, left: MaxReplyBytes}, MaxEventBytes)
	text := redactor{key: c.cfg.APIKey}
	size := 0
	for {
		ev, err := events.next()
		if err == errLineTooLong {
			return modelapi.Result{}, c.errorf(syscall.EIO, "malformed stream: a line or event over %d bytes", MaxEventBytes)
		}
		if err == errReplyTooBig {
			return modelapi.Result{}, c.errorf(syscall.EFBIG, "the reply's stream is over %d bytes", MaxReplyBytes)
		}
		if err != nil {
			return modelapi.Result{}, c.fail(err, "stream ended early")
		}
		piece, done, err := dec.event(ev)
		if err != nil {
			return modelapi.Result{}, c.eventError(err)
		}
		if size += len(piece); size > MaxTextBytes {
			return modelapi.Result{}, c.errorf(syscall.EFBIG, "the reply is over %d bytes", MaxTextBytes)
		}
		if e := c.emit(text.add(piece), delta); e != nil {
			return modelapi.Result{}, e
		}
		if done {
			if e := c.emit(text.flush(), delta); e != nil {
				return modelapi.Result{}, e
			}
			res := dec.result()
			res.Text = text.all.String()
			res.ToolCalls = scrubCalls(res.ToolCalls, c.cfg.APIKey)
			return res, nil
		}
	}
}

var errReplyTooBig = errors.New("the reply's stream is over its bound")

// replyBound reads at most left bytes of a reply's body, then fails with
// errReplyTooBig: what a reply may cost to read is bounded, not only
// the text and tool calls it carries.
type replyBound struct {
	r    io.Reader
	left int64
}

func (b *replyBound) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errReplyTooBig
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte over the bound tells that it was passed
	}
	n, err := b.r.Read(p)
	if b.left -= int64(n); b.left < 0 {
		return n - 1, errReplyTooBig
	}
	return n, err
}

// emit passes one piece on, unless the call is over: from the moment the
// caller cancels (or a timeout passes), delta is not called again.
func (c *call) emit(piece string, delta func(string)) *abi.Error {
	if c.ctx.Err() != nil {
		return c.fail(c.ctx.Err(), "")
	}
	if piece != "" {
		delta(piece)
	}
	return nil
}

// eventError is the error for a decoder's error.
func (c *call) eventError(err error) *abi.Error {
	var api modelapi.APIError
	if errors.As(err, &api) {
		return c.errorf(api.Errno(), "error event: %s", quote([]byte(api.Error()), c.cfg.APIKey))
	}
	var big callSizeError
	if errors.As(err, &big) {
		return c.errorf(syscall.EFBIG, "%s", big.what)
	}
	return c.errorf(syscall.EIO, "malformed stream: %s", quote([]byte(err.Error()), c.cfg.APIKey))
}
