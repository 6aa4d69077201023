package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/trampoline"
	"github.com/ctxfs/ctxfs/proto"
)

const (
	// maxFrameBytes bounds a frame taken from the program, leaving room for
	// the run and ts the engine adds, so that every recorded line stays
	// within abi.MaxLineBytes.
	maxFrameBytes = abi.MaxLineBytes - 4096
	// maxStderr bounds the stderr kept per run: it is a diagnostic, and a
	// chatty program must not fill the session's events.
	maxStderr = 64 << 10
	// textChunk is the most a text-ABI delta carries (before JSON escaping).
	textChunk = 32 << 10
)

// programTypes are the frame types a jsonl program may write; start and
// done are the server's alone.
var programTypes = map[string]bool{
	proto.FrameDelta: true, proto.FrameMessage: true, proto.FrameToolCall: true,
	proto.FrameToolResult: true, proto.FrameUsage: true, proto.FrameError: true,
}

// startReaders reads stdout (by the definition's ABI) and stderr into
// p.frames, and closes it when both reach EOF.
func (p *program) startReaders(s Spec) {
	var wg sync.WaitGroup
	wg.Add(2)
	if p.setup != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.setupErr = trampoline.ReadSetup(p.setup)
			p.setup.Close()
			if p.setupErr != nil {
				p.frames <- proto.ErrorFrame(p.setupErr)
			}
		}()
	}
	go func() {
		defer wg.Done()
		switch {
		case s.CLI != nil:
			readCLI(p.stdout, s.CLI.parser, p.frames)
		case s.Def.ABI == def.ABIText:
			readText(p.stdout, p.frames)
		default:
			readJSONL(p.stdout, s.RunID, p.frames)
		}
	}()
	go func() {
		defer wg.Done()
		stderr := io.Reader(p.stderr)
		if s.CLI != nil {
			stderr = io.TeeReader(p.stderr, &p.stderrTail)
		}
		p.missingLib = readStderr(stderr, p.frames)
	}()
	go func() {
		wg.Wait()
		close(p.frames)
	}()
}

// readJSONL turns each stdout line into a frame, or into an EINVAL error
// frame saying why the line was dropped. Blank lines are skipped silently:
// they carry nothing, and a trailing one is a common accident of echo.
func readJSONL(r io.Reader, runID string, out chan<- *proto.Object) {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, tooLong, err := proto.ReadLine(br, maxFrameBytes)
		switch {
		case tooLong:
			out <- dropped(n, fmt.Sprintf("line is over %d bytes", maxFrameBytes))
		case len(bytes.TrimSpace(line)) > 0:
			f, why := programFrame(line, runID)
			if f == nil {
				f = dropped(n, why)
			}
			out <- f
		}
		if err != nil {
			return
		}
	}
}

// programFrame checks one line as a frame from the program; it returns the
// frame with any run and ts removed (the engine stamps its own), or nil and
// the reason it was dropped.
func programFrame(line []byte, runID string) (*proto.Object, string) {
	if err := abi.CheckLogLine(line); err != nil {
		return nil, abi.Message(err)
	}
	f, err := proto.ParseObject(line, true)
	if err != nil {
		return nil, abi.Message(err)
	}
	typ, ok := f.String("type")
	switch {
	case !ok:
		return nil, "no type"
	case typ == proto.FrameStart || typ == proto.FrameDone:
		return nil, fmt.Sprintf("only the server writes %s frames", typ)
	case !programTypes[typ]:
		return nil, fmt.Sprintf("unknown type %q", typ)
	case typ == proto.FrameMessage && f.Has("role") && f.Str("role") != "assistant":
		// The run's message is the agent's: a user's or a tool's line it
		// wrote would stand in messages.jsonl as the person's input (no
		// writer's uid marks it, as a line appended through the mount).
		return nil, fmt.Sprintf("a program's message is the assistant's, not %s", f.Raw("role"))
	}
	if f.Has("run") {
		if r, ok := f.String("run"); !ok || r != runID {
			return nil, fmt.Sprintf("it names another run (%s)", f.Raw("run"))
		}
	}
	f.Delete("run")
	f.Delete("ts")
	proto.ClampUsage(f) // a usage frame's counts within bounds: sums of them never wrap
	return f, ""
}

// dropped is the error frame that reports a dropped stdout line.
func dropped(n int, why string) *proto.Object {
	return errorFrame(syscall.EINVAL, "dropped agent output line %d: %s", n, why)
}

// readText streams stdout as delta frames and, at EOF, sends the whole text
// as one assistant message. Chunks are cut on rune boundaries, so a
// character split across reads is not mangled.
func readText(r io.Reader, out chan<- *proto.Object) {
	buf := make([]byte, textChunk)
	var pending, all []byte
	total := 0
	for {
		n, err := r.Read(buf)
		pending = append(pending, buf[:n]...)
		cut := len(pending)
		if err == nil {
			cut = completeRunes(pending)
		}
		if cut > 0 {
			out <- proto.NewObject("type", proto.FrameDelta, "text", string(pending[:cut]))
			total += cut
			if len(all) < maxFrameBytes { // the message is cut to size at the end anyway
				all = append(all, pending[:cut]...)
			}
			pending = append(pending[:0], pending[cut:]...)
		}
		if err != nil {
			break
		}
	}
	if total == 0 {
		return
	}
	msg, kept := fitMessage(string(all))
	out <- msg
	if kept < total {
		out <- errorFrame(syscall.EMSGSIZE, "assistant text of %d bytes cut to %d in the final message; the deltas carry all of it", total, kept)
	}
}

// completeRunes is the length of the longest prefix of b that does not end
// inside an incomplete UTF-8 sequence.
func completeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// fitMessage builds the final message, cutting the text (on a rune
// boundary) until its line fits within maxFrameBytes; JSON escaping may
// make a line up to six times its text.
func fitMessage(text string) (*proto.Object, int) {
	for {
		f := messageFrame(text)
		size := len(f.Line())
		if size <= maxFrameBytes {
			return f, len(text)
		}
		cut := int(int64(len(text)) * int64(maxFrameBytes) / int64(size) * 9 / 10)
		text = text[:completeRunes([]byte(text[:cut]))]
	}
}

// readStderr keeps stderr as log frames, one per line, until maxStderr
// bytes are used; a line that does not fit is dropped with all that
// follows (keeping a later line but not an earlier one would mislead), and
// one last frame says how much was dropped.
func readStderr(r io.Reader, out chan<- *proto.Object) (missingLib string) {
	br := bufio.NewReaderSize(r, 4096) // a longer line comes as several frames
	budget, droppedBytes := maxStderr, 0
	for {
		chunk, err := br.ReadSlice('\n')
		if m := loaderMissing.FindSubmatch(chunk); m != nil && missingLib == "" {
			missingLib = string(append(m[1], m[2]...))
		}
		if n := len(chunk); n > 0 && n <= budget && droppedBytes == 0 {
			out <- logFrame(string(bytes.TrimSuffix(chunk, []byte("\n"))))
			budget -= n
		} else {
			droppedBytes += n
		}
		if err != nil && err != bufio.ErrBufferFull {
			break
		}
	}
	if droppedBytes > 0 {
		f := logFrame(fmt.Sprintf("ctxfs: %d more bytes of stderr dropped (limit %d bytes per run)", droppedBytes, maxStderr))
		f.Set("dropped", droppedBytes)
		out <- f
	}
	return missingLib
}

// loaderMissing matches the dynamic loader's words for a shared library it
// cannot find (glibc's, then musl's): the run's error then names it.
var loaderMissing = regexp.MustCompile(`error while loading shared libraries: ([^:\n]+): cannot open shared object file|Error loading shared library ([^:\n]+): No such file`)

// logFrame is one stderr line; invalid UTF-8 becomes U+FFFD when it is
// marshalled, so a binary blurt still makes a valid line.
func logFrame(text string) *proto.Object {
	return proto.NewObject("type", proto.FrameLog, "stream", "stderr", "text", text)
}
