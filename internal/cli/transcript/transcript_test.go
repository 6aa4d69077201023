package transcript

import (
	"bytes"
	"strings"
	"testing"
)

func TestPrintHistory(t *testing.T) {
	log := `{"role":"user","run":"R","content":"hello","ts":"T"}
{"role":"assistant","run":"R","content":[{"type":"text","text":"reading"},{"type":"tool_call","id":"c1","name":"fs.read","arguments":{"path": "a.txt"}}],"ts":"T"}
{"role":"tool","run":"R","name":"fs.read","content":[{"type":"tool_result","tool_call_id":"c1","content":"line1\nline2","is_error":false}],"ts":"T"}
{"role":"tool","run":"R","content":[{"type":"tool_result","tool_call_id":"c2","content":{"n":1},"is_error":true}]}
{"role":"user","run":"R","content":"appended","ts":"T","uid":1001}
{"role":"assistant","content":{"odd":true}}
not json
`
	want := `user:
hello

assistant:
reading
→ tool fs.read({"path":"a.txt"})

tool:
← line1
line2

tool:
← error: {"n":1}

user:
appended

assistant:
{"odd":true}

?:
not json
`
	var b bytes.Buffer
	if err := PrintHistory(&b, strings.NewReader(log)); err != nil {
		t.Fatal(err)
	}
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
