package clienv

import (
	"strings"
	"testing"
)

func TestFirstLine(t *testing.T) {
	if got := FirstLine("a\r\nb", 10); got != "a" {
		t.Errorf("%q", got)
	}
	if got := FirstLine(strings.Repeat("中", 100), 10); got != "中中中…" {
		t.Errorf("%q", got)
	}
}
