package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// agent list loads each definition with the server's loader: an invalid
// one names its file and the reason, and the exit status is 1.
func TestAgentList(t *testing.T) {
	root := t.TempDir()
	for p, v := range map[string]string{
		"agent/coder.d/model":     "debug/echo\n",
		"agent/broken.d/abi":      "xml\n",
		"model/local/llama.d/api": "openai-chat\n",
	} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(v), 0o644)
	}
	os.MkdirAll(filepath.Join(root, "agent", "bad name.d"), 0o755) // not a name: never a definition
	out, errs, code := ctxRun(root, "", "agent", "list")
	want := "agent\tbroken\tno socket\tinvalid: " + filepath.Join(root, "agent/broken.d/abi") + ": \"xml\" is neither jsonl nor text\n" +
		"agent\tcoder\tno socket\tok\n" +
		"model\tdebug/echo\tno socket\tok\n" +
		"model\tlocal/llama\tno socket\tinvalid: " + filepath.Join(root, "model/local/llama.d/model_id") + ": model_id: empty\n"
	if out != want || errs != "" || code != 1 {
		t.Fatalf("out %q\nwant %q\nerrs %q code %d", out, want, errs, code)
	}
	out, _, _ = ctxRun(root, "", "agent", "list", "--json")
	if !strings.Contains(out, `{"kind":"agent","name":"coder","state":"ok","socket":false}`+"\n") ||
		!strings.Contains(out, `{"kind":"agent","name":"broken","state":"invalid","error":"`+filepath.Join(root, "agent/broken.d/abi")+`: \"xml\" is neither jsonl nor text","socket":false}`) {
		t.Fatalf("--json: %s", out)
	}
	os.RemoveAll(filepath.Join(root, "agent/broken.d"))
	os.RemoveAll(filepath.Join(root, "model/local"))
	if _, _, code := ctxRun(root, "", "agent", "list"); code != 0 {
		t.Fatalf("all valid: exit %d", code)
	}
}
