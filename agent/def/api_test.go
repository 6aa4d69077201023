package def

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// writeModel writes the model definition fake/llm under root.
func writeModel(t *testing.T, root string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(root, "model", "fake", "llm.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range files {
		testkit.WriteFile(t, filepath.Join(dir, f), v+"\n", 0o644)
	}
	return dir
}

var goodAPI = map[string]string{"api": "openai-chat", "endpoint": "http://127.0.0.1:11434/v1", "model_id": "llama3.2"}

func with(base map[string]string, k, v string) map[string]string {
	m := map[string]string{}
	for a, b := range base {
		m[a] = b
	}
	if v == "" {
		delete(m, k)
	} else {
		m[k] = v
	}
	return m
}

func TestLoadModelAPI(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, with(with(with(goodAPI, "max_tokens", "512"), "temperature", "0.2"), "api_key_env", "LLM_KEY"))
	d, err := Load(root, abi.KindModel, "fake/llm")
	if err != nil {
		t.Fatal(err)
	}
	c := d.API.Config
	if c.API != modelapi.OpenAIChat || c.Endpoint != goodAPI["endpoint"] || c.ModelID != "llama3.2" || c.MaxTokens != 512 || *c.Temperature != 0.2 || d.API.KeyEnv != "LLM_KEY" {
		t.Errorf("API %+v", d.API)
	}
	// An agent without a program takes its model's API.
	testkit.WriteFile(t, filepath.Join(root, "agent", "helper.d", "model"), "fake/llm\n", 0o644)
	a, err := Load(root, abi.KindAgent, "helper")
	if err != nil || a.API == nil || a.API.Config.ModelID != "llama3.2" {
		t.Fatalf("agent: %+v %v", a, err)
	}
}

// TestLoadModelAPIRefusals: each invalid file is EINVAL naming that file.
func TestLoadModelAPIRefusals(t *testing.T) {
	cases := []struct {
		files map[string]string
		file  string
	}{
		{with(goodAPI, "api", "openai-completions"), "api"},
		{with(goodAPI, "endpoint", "ftp://host/v1"), "endpoint"},
		{with(goodAPI, "endpoint", "http://user:sk-secret@host/v1"), "endpoint"},
		{with(goodAPI, "model_id", ""), "model_id"},
		{with(goodAPI, "max_tokens", "-1"), "max_tokens"},
		{with(goodAPI, "temperature", "hot"), "temperature"},
		{with(goodAPI, "temperature", "7"), "temperature"},
		{with(with(goodAPI, "api_key_env", "K"), "api_key_file", "/etc/k"), "api_key_file"},
		{with(goodAPI, "api_key_env", "1BAD"), "api_key_env"},
		{with(goodAPI, "api_key_file", "relative/key"), "api_key_file"},
	}
	for _, c := range cases {
		root := t.TempDir()
		dir := writeModel(t, root, c.files)
		_, err := Load(root, abi.KindModel, "fake/llm")
		testkit.WantErrno(t, c.file, err, syscall.EINVAL)
		if e, ok := err.(*abi.Error); ok && e.Path != filepath.Join(dir, c.file) {
			t.Errorf("%s: error names %q: %v", c.file, e.Path, err)
		}
		if err != nil && strings.Contains(err.Error(), "sk-secret") {
			t.Errorf("the error quotes a credential: %v", err)
		}
	}
	// A model answered by both a program and an API is refused.
	root := t.TempDir()
	writeModel(t, root, goodAPI)
	testkit.WriteFile(t, filepath.Join(root, "model", "fake", "llm"), "#!/bin/sh\n", 0o755)
	_, err := Load(root, abi.KindModel, "fake/llm")
	testkit.WantErrno(t, "api and program", err, syscall.EINVAL)
	// A model in a chroot is refused too: it has no root/.
	root = t.TempDir()
	writeModel(t, root, with(goodAPI, "isolation", "chroot"))
	_, err = Load(root, abi.KindModel, "fake/llm")
	testkit.WantErrno(t, "model isolation", err, syscall.EINVAL)
}

// TestAPIKeySources: a key comes from a set variable, or from a regular
// file owned by root that no one else may write; errors never quote it.
func TestAPIKeySources(t *testing.T) {
	t.Setenv("CTXFS_TEST_KEY", "sk-from-env")
	if k, err := (KeySource{KeyEnv: "CTXFS_TEST_KEY"}).Key(); k != "sk-from-env" || err != nil {
		t.Errorf("env key %q %v", k, err)
	}
	_, err := (KeySource{KeyEnv: "CTXFS_TEST_UNSET_KEY"}).Key()
	testkit.WantErrno(t, "unset variable", err, syscall.ENOKEY)

	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	testkit.WriteFile(t, good, "sk-from-file\n", 0o600)
	if k, err := (KeySource{KeyFile: good}).Key(); k != "sk-from-file" || err != nil {
		t.Errorf("file key %q %v", k, err)
	}
	writable := filepath.Join(dir, "writable")
	testkit.WriteFile(t, writable, "sk-writable\n", 0o622)
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	for p, want := range map[string]syscall.Errno{writable: syscall.EACCES, link: syscall.ELOOP, filepath.Join(dir, "none"): syscall.ENOENT} {
		_, err := (KeySource{KeyFile: p}).Key()
		testkit.WantErrno(t, p, err, want)
		if err != nil && strings.Contains(err.Error(), "sk-") {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(dir, "other")
		testkit.WriteFile(t, other, "sk-other\n", 0o600)
		os.Chown(other, 1000, 1000)
		_, err := (KeySource{KeyFile: other}).Key()
		testkit.WantErrno(t, "a file owned by another uid", err, syscall.EACCES)
	}
}

// TestLoadCLI: a cli agent reads cli, model_id, endpoint and its key's
// source; each invalid file is EINVAL naming it, an abi file is refused,
// and a cli agent never adopts a model's API.
func TestLoadCLI(t *testing.T) {
	good := map[string]string{"cli": "codex", "model_id": "gpt-5.1-codex", "endpoint": "http://127.0.0.1:9/v1", "api_key_env": "OPENAI_KEY", "model": "fake/llm"}
	root := t.TempDir()
	writeModel(t, root, goodAPI)
	dir := filepath.Join(root, "agent", "c.d")
	for f, v := range good {
		testkit.WriteFile(t, filepath.Join(dir, f), v+"\n", 0o644)
	}
	d, err := Load(root, abi.KindAgent, "c")
	if err != nil || d.CLI == nil || d.API != nil || d.CLI.Adapter.Name() != "codex" || d.CLI.Options.Model != "gpt-5.1-codex" ||
		d.CLI.Options.BaseURL != good["endpoint"] || d.CLI.KeyEnv != "OPENAI_KEY" {
		t.Fatalf("%+v %v", d, err)
	}
	for _, c := range []struct{ file, value string }{
		{"cli", "aider"}, {"abi", "jsonl"}, {"api_key_env", "1BAD"}, {"endpoint", "http://host/v1\"\n[x]"}, {"model_id", ""},
	} {
		root := t.TempDir()
		dir := filepath.Join(root, "agent", "c.d")
		for f, v := range with(good, c.file, c.value) {
			testkit.WriteFile(t, filepath.Join(dir, f), v+"\n", 0o644)
		}
		if c.value == "" {
			testkit.WriteFile(t, filepath.Join(dir, c.file), "", 0o644)
		}
		_, err := Load(root, abi.KindAgent, "c")
		testkit.WantErrno(t, c.file, err, syscall.EINVAL)
		if e, ok := err.(*abi.Error); ok && e.Path != filepath.Join(dir, c.file) {
			t.Errorf("%s: error names %q: %v", c.file, e.Path, err)
		}
	}
}
