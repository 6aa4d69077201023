package inspect

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/search"
)

const SearchHelp = `Finds QUERY in the user and assistant messages of every session of AGENT in
your home (--shared SPACE: in the space), or of one session (--session S).
QUERY is a substring, any case, in any script; several words are joined with
spaces. Prints one line per message that holds it: SESSION RUN ROLE and the
text around the match, most recently updated sessions first, at most 1000
lines. On a terminal the columns are aligned and the match is highlighted;
otherwise fields are tab-separated. --json prints the server's frames.
Exit status: 0 found, 1 not found, 2 bad usage or a refused request (EAGAIN:
you have as many searches under way as the server allows), or a search the
server cut at its bound on the bytes one search may read (EFBIG on stderr)
before it found anything.
`

func Search(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.ResolveLoc(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "search", err, clienv.ExitUsage)
	}
	query := strings.Join(p.Args[1:], " ")
	req := proto.NewObject("op", proto.OpSearch, "query", query, "scope", w.Scope)
	if w.Scope == abi.ScopeShared {
		req.Set("space", w.Loc.Space)
	}
	if s, given := p.Vals["session"]; given {
		if err := abi.CheckName("session", s); err != nil {
			return clienv.Fail(e, "search", err, clienv.ExitUsage)
		}
		req.Set("session", s)
	}
	tty := searchTTY(e.Stdout)
	// Lines go out in writes of many (a write each cost a thousand system
	// calls for a full reply), flushed whenever the reply pauses.
	out := bufio.NewWriterSize(e.Stdout, 64<<10)
	defer out.Flush()
	pr := &searchPrinter{e: e, out: out, errw: e.Stderr, json: p.On("json"), tty: tty, q: search.NewQuery(query)}
	stop := startSpinner(e.Stderr, tty && !pr.json && searchTTY(e.Stderr))
	code := searchStream(e, w, req, pr, func() { out.Flush() })
	stop()
	pr.flush()
	return code
}

// searchStream sends req and hands each reply frame to pr; it returns the
// exit status.
func searchStream(e *clienv.Env, w *clienv.Where, req *proto.Object, pr *searchPrinter, idle func()) int {
	ctx, cancel := e.Interrupt()
	defer cancel()
	sendErr, readErr, err := clienv.ExchangeIdle(ctx, w, req, pr.frame, idle)
	if err != nil {
		return clienv.Fail(e, "search", err, clienv.ExitUsage)
	}
	if ctx.Err() != nil {
		return clienv.ExitInterrupted
	}
	return pr.exitStatus(sendErr, readErr)
}

// searchPrinter prints a search's reply: match lines (buffered on a
// terminal, to align them), errors of single sessions on stderr.
type searchPrinter struct {
	e         *clienv.Env
	out, errw io.Writer
	json, tty bool
	q         *search.Query

	rows    [][4]string // on a terminal: session, run, role, snippet
	frames  int
	matches int
	end     *proto.Object // the searched frame
	refused *client.ServerError
}

func (p *searchPrinter) frame(f client.Frame) {
	p.frames++
	if p.json {
		p.out.Write(append(f.Line[:len(f.Line):len(f.Line)], '\n'))
	}
	switch f.Type() {
	case proto.FrameMatch:
		p.matches++
		if !p.json {
			p.row(f.Obj)
		}
	case proto.FrameSearched:
		p.end = f.Obj
	case proto.FrameError:
		p.errorFrame(f.Obj)
	}
}

// row prints one match, or keeps it for flush on a terminal.
func (p *searchPrinter) row(o *proto.Object) {
	r := [4]string{o.Str("session"), o.Str("run"), o.Str("role"), search.OneLine(o.Str("text"))}
	for i := range 3 {
		if r[i] = search.OneLine(r[i]); r[i] == "" {
			r[i] = "-" // a line appended without a run: the columns stay in place
		}
	}
	if p.tty {
		p.rows = append(p.rows, r)
		return
	}
	fmt.Fprintf(p.out, "%s\t%s\t%s\t%s\n", r[0], r[1], r[2], r[3])
}

// errorFrame: the refusal of the request when it is the first frame,
// else a session that could not be searched (the others still were).
func (p *searchPrinter) errorFrame(o *proto.Object) {
	se := client.FrameError(o)
	if p.frames == 1 && o.Str("session") == "" {
		p.refused = se
		return
	}
	if !p.json {
		fmt.Fprintf(p.errw, "ctx: search: %s: %s\n", o.Str("session"), clienv.Describe("search", se))
	}
}

// flush prints the rows kept for a terminal: columns aligned, matches
// highlighted.
func (p *searchPrinter) flush() {
	if len(p.rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(p.out, 0, 8, 2, ' ', 0)
	for _, r := range p.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r[0], r[1], r[2], highlight(r[3], p.q))
	}
	tw.Flush()
}

// highlight shows every match of q in s in bold red. Tabwriter counts the
// escapes as text, which is harmless in the last column.
func highlight(s string, q *search.Query) string {
	var b strings.Builder
	at := 0
	for {
		start, end, ok := q.FindFrom(s, at)
		if !ok || end == start {
			break
		}
		b.WriteString(s[at:start] + "\x1b[1;31m" + s[start:end] + "\x1b[0m")
		at = end
	}
	b.WriteString(s[at:])
	return b.String()
}

// exitStatus: 0 with matches, 1 without, 2 when the request was refused
// or the reply ended before its searched frame.
func (p *searchPrinter) exitStatus(sendErr, readErr error) int {
	switch {
	case p.refused != nil:
		fmt.Fprintf(p.errw, "ctx: search: %s\n", clienv.Describe("search", p.refused))
		return clienv.ExitUsage
	case p.end == nil:
		err := clienv.NoReply(sendErr, readErr)
		if p.frames > 0 {
			err = abi.Errorf(syscall.EIO, "", "the reply ended before the search did")
		}
		return clienv.Fail(p.e, "search", err, clienv.ExitUsage)
	}
	if p.end.Str("limit") == "scan" {
		return p.scanCut()
	}
	if string(p.end.Raw("truncated")) == "true" && !p.json {
		fmt.Fprintf(p.errw, "ctx: search: only the first %d matches are shown; narrow the query or use --session\n", p.matches)
	}
	if p.matches > 0 {
		return clienv.ExitOK
	}
	return clienv.ExitFailed
}

// scanCut reports a search the server stopped at its bound on the bytes
// one search may read: what was found is shown, but "not found" would be
// a guess, so without a match the status is 2, not 1.
func (p *searchPrinter) scanCut() int {
	scanned, _ := strconv.ParseInt(string(p.end.Raw("scanned")), 10, 64)
	fmt.Fprintf(p.errw, "ctx: search: EFBIG: the server stopped the search after reading %d MiB of messages, "+
		"the most one search may; the %d matches shown are from what it read. The index keeps what it built, "+
		"so searching again goes further; --session S searches one session\n", scanned>>20, p.matches)
	if p.matches > 0 {
		return clienv.ExitOK
	}
	return clienv.ExitUsage
}

// searchTTY reports whether w is a terminal.
func searchTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// startSpinner shows on stderr, once the reply has taken a second, that
// the server is working (a first search, or one after much was written,
// builds the index); stop clears the line. Off, it does nothing.
func startSpinner(w io.Writer, on bool) (stop func()) {
	if !on {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			return
		case <-time.After(time.Second):
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(w, "\r%c searching (the server is bringing the search index up to date)", []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")[i%10])
			select {
			case <-done:
				io.WriteString(w, "\r\x1b[K")
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
