package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

const UsageHelp = `Prints the token usage of the agent's sessions, from their usage events:
totals per model, then per session. Without --session it reads every
session of the agent. --since DAYS counts only the events of the last DAYS
days. --json prints one object.
`

// maxSinceDays caps --since: beyond it (274 years) every event is in.
const maxSinceDays = 100000

// usageTotals is the sum of the usage events of one model (and, for
// models behind an API, one provider model id).
type usageTotals struct {
	Model        string `json:"model"`
	ModelID      string `json:"model_id,omitempty"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	Events       int64  `json:"events"`
}

// add sums saturating (proto.AddTokens): no total wraps.
func (t *usageTotals) add(in, out, events int64) {
	t.InputTokens = proto.AddTokens(t.InputTokens, in)
	t.OutputTokens = proto.AddTokens(t.OutputTokens, out)
	t.Events = proto.AddTokens(t.Events, events)
}

// usageTable sums usage by model and model id.
type usageTable map[[2]string]*usageTotals

func (t usageTable) add(model, modelID string, in, out, events int64) {
	k := [2]string{model, modelID}
	if t[k] == nil {
		t[k] = &usageTotals{Model: model, ModelID: modelID}
	}
	t[k].add(in, out, events)
}

// sorted lists the table by model, then model id, with the sum of all.
func (t usageTable) sorted() ([]*usageTotals, usageTotals) {
	var all usageTotals
	list := make([]*usageTotals, 0, len(t))
	for _, v := range t {
		list = append(list, v)
		all.add(v.InputTokens, v.OutputTokens, v.Events)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Model != list[j].Model {
			return list[i].Model < list[j].Model
		}
		return list[i].ModelID < list[j].ModelID
	})
	return list, all
}

// sessionUsage is the usage of one session.
type sessionUsage struct {
	Session      string         `json:"session"`
	InputTokens  int64          `json:"input_tokens"`
	OutputTokens int64          `json:"output_tokens"`
	Events       int64          `json:"events"`
	Models       []*usageTotals `json:"models"`
}

// usageReport is what usage prints (--json: this object).
type usageReport struct {
	Agent        string         `json:"agent"`
	SinceDays    *float64       `json:"since_days,omitempty"`
	InputTokens  int64          `json:"input_tokens"`
	OutputTokens int64          `json:"output_tokens"`
	Events       int64          `json:"events"`
	Models       []*usageTotals `json:"models"`
	Sessions     []sessionUsage `json:"sessions"` // those with usage, in name order
	Skipped      int            `json:"skipped_lines"`

	cutoff time.Time // zero: every event counts
	models usageTable
}

func Usage(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.ResolveLoc(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "usage", err, clienv.ExitFailed)
	}
	u := &usageReport{Agent: w.Loc.Agent, Models: []*usageTotals{}, Sessions: []sessionUsage{}, models: usageTable{}}
	if err := u.since(p.Str("since"), time.Now()); err != nil {
		return clienv.UsageError(e, "usage", err.Error())
	}
	names, err := usageSessions(w, p.Str("session"))
	if err != nil {
		return clienv.Fail(e, "usage", err, clienv.ExitFailed)
	}
	code := u.readAll(e, w, names, p.Str("session") != "")
	u.Models, _ = u.models.sorted()
	if u.Skipped > 0 {
		fmt.Fprintf(e.Stderr, "ctx: usage: skipped %d malformed or undated usage lines\n", u.Skipped)
	}
	if p.On("json") {
		enc := json.NewEncoder(e.Stdout)
		enc.SetEscapeHTML(false)
		enc.Encode(u)
	} else {
		printUsage(e.Stdout, u)
	}
	return code
}

// since sets the cutoff of --since DAYS (a number of days, fractions
// allowed); "" counts every event.
func (u *usageReport) since(arg string, now time.Time) error {
	if arg == "" {
		return nil
	}
	days, err := strconv.ParseFloat(arg, 64)
	if err != nil || days < 0 || math.IsNaN(days) {
		return fmt.Errorf("--since takes a number of days, not %q", arg)
	}
	u.SinceDays = &days
	if days < maxSinceDays {
		u.cutoff = now.Add(-time.Duration(days * float64(24*time.Hour)))
	}
	return nil
}

// usageSessions is the named session, or every session of the agent: the
// session/ directory without its index, in name order.
func usageSessions(w *clienv.Where, session string) ([]string, error) {
	if session != "" {
		return []string{session}, abi.CheckName("session", session)
	}
	entries, err := os.ReadDir(w.Loc.SessionsDir())
	if errors.Is(err, fs.ErrNotExist) && clienv.Located(w) == nil {
		return nil, nil
	}
	if err != nil {
		return nil, clienv.Missing(w, "", err)
	}
	var names []string
	for _, d := range entries {
		if d.IsDir() && abi.ValidSessionName(d.Name()) {
			names = append(names, d.Name())
		}
	}
	return names, nil
}

// readAll reads the sessions' events. A session that vanished while the
// agent's sessions were read (archived meanwhile) is left out; one that
// cannot be read is reported, the others still count, and the exit
// status is 1. A session named by --session must exist.
func (u *usageReport) readAll(e *clienv.Env, w *clienv.Where, names []string, named bool) int {
	code := clienv.ExitOK
	prog := clienv.NewProgress(e, "usage: reading session", len(names))
	for i, name := range names {
		prog.Show(i)
		err := u.readSession(w.Loc.SessionFile(name, abi.FileEvents), name)
		if err == nil || !named && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		prog.Clear()
		fmt.Fprintf(e.Stderr, "ctx: usage: %s\n", clienv.Describe("usage", clienv.Missing(w, name, err)))
		code = clienv.ExitFailed
	}
	prog.Clear()
	return code
}

// readSession adds the usage events of one events.jsonl, a line at a
// time: memory stays the size of one line and of the session's models.
func (u *usageReport) readSession(path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	lr := newLogReader(f)
	t := usageTable{}
	var thread proto.ThreadUsage
	for {
		line, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if !u.event(t, &thread, line) {
			u.Skipped++
		}
	}
	u.Skipped += lr.takeBad()
	u.addSession(name, t)
	return nil
}

func (u *usageReport) addSession(name string, t usageTable) {
	if len(t) == 0 {
		return
	}
	models, all := t.sorted()
	for _, m := range models {
		u.models.add(m.Model, m.ModelID, m.InputTokens, m.OutputTokens, m.Events)
	}
	u.InputTokens = proto.AddTokens(u.InputTokens, all.InputTokens)
	u.OutputTokens = proto.AddTokens(u.OutputTokens, all.OutputTokens)
	u.Events = proto.AddTokens(u.Events, all.Events)
	u.Sessions = append(u.Sessions, sessionUsage{Session: name, InputTokens: all.InputTokens,
		OutputTokens: all.OutputTokens, Events: all.Events, Models: models})
}

// usageFields are the fields of a usage event.
type usageFields struct {
	Type         string `json:"type"`
	Model        string `json:"model"`
	ModelID      string `json:"model_id"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	ThreadTotal  bool   `json:"thread_total"` // counts the CLI's thread so far (proto.ThreadUsage)
	TS           string `json:"ts"`
}

// event adds one events.jsonl line to t when it is a usage event within
// the cutoff (a thread total as the run's own part of it, thread); false
// when the line is malformed, or is a usage event with negative counts,
// or without a time while --since needs one.
func (u *usageReport) event(t usageTable, thread *proto.ThreadUsage, line []byte) bool {
	var ev usageFields
	if !decodeLine(line, &ev, func() bool { return ev.Type == proto.FrameUsage }) {
		return false
	}
	if ev.Type != proto.FrameUsage {
		return true
	}
	if ev.InputTokens < 0 || ev.OutputTokens < 0 {
		return false
	}
	// Clamped as the server clamps what it records, for lines it wrote before.
	ev.InputTokens, ev.OutputTokens = proto.ClampTokens(ev.InputTokens), proto.ClampTokens(ev.OutputTokens)
	ev.InputTokens, ev.OutputTokens = thread.Own(ev.InputTokens, ev.OutputTokens, ev.ThreadTotal)
	if !u.cutoff.IsZero() {
		ts, err := time.Parse(time.RFC3339Nano, ev.TS)
		if err != nil {
			return false
		}
		if ts.Before(u.cutoff) {
			return true
		}
	}
	t.add(ev.Model, ev.ModelID, ev.InputTokens, ev.OutputTokens, 1)
	return true
}

// printUsage writes the totals per model, then per session and model.
func printUsage(w io.Writer, u *usageReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tINPUT\tOUTPUT\tEVENTS")
	for _, m := range u.Models {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", modelName(m), m.InputTokens, m.OutputTokens, m.Events)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\n", u.InputTokens, u.OutputTokens, u.Events)
	tw.Flush()
	if len(u.Sessions) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tMODEL\tINPUT\tOUTPUT\tEVENTS")
	for _, s := range u.Sessions {
		for _, m := range s.Models {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", s.Session, modelName(m), m.InputTokens, m.OutputTokens, m.Events)
		}
	}
	tw.Flush()
}

// modelName shows a model as "provider/model (model id)"; "-" when an
// event named none.
func modelName(m *usageTotals) string {
	s := orDash(clienv.Printable(m.Model))
	if m.ModelID != "" {
		s += " (" + clienv.Printable(m.ModelID) + ")"
	}
	return s
}
