package trampoline

import (
	"io"
	"reflect"
	"testing"
)

// TestEnvFileRoundTrip: what a trampoline reads from envFile is the run's
// environment, except an entry holding a NUL, which is left out whole
// rather than split into a second variable.
func TestEnvFileRoundTrip(t *testing.T) {
	env := []string{"CTX_RUN=r1", "PATH=/bin", "EMPTY=", "EVIL=a\x00LD_PRELOAD=/x.so", "WITH=equals=sign"}
	f, err := envFile(env)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"CTX_RUN=r1", "PATH=/bin", "EMPTY=", "WITH=equals=sign"}
	if got := parseEnv(b); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
