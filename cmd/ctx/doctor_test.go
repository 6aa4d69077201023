package main

import (
	"strings"
	"testing"
)

func TestDoctorUsage(t *testing.T) {
	if out, _, code := ctxRun(t.TempDir(), "", "doctor", "--help"); code != 0 || !strings.Contains(out, "ctx doctor") || !strings.Contains(out, "--json") {
		t.Fatalf("--help: code %d out %q", code, out)
	}
	if _, errs, code := ctxRun(t.TempDir(), "", "doctor", "extra"); code != 2 || !strings.HasPrefix(errs, "ctx: doctor: ") {
		t.Fatalf("extra argument: code %d errs %q", code, errs)
	}
}
