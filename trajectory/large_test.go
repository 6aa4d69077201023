package trajectory

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// largeExport is the SHA-256 and length of the document the export
// made of writeSession's 100,000-line session before its logs were read
// ahead in batches and its steps vouched for by their shapes (the tree
// of 2026-12-02, b35612c): the export of a session of many batches must
// stay byte for byte the same.
const (
	largeExportSum = "a012e38d7a71d48482b4d4ef616901057b7aaffba089bcf250c314e0d9eda939"
	largeExportLen = 13866826
)

// TestLargeSessionUnchanged: a session of 100,000 lines, read in many
// batches, exports to the same bytes as before, and validates.
func TestLargeSessionUnchanged(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	messages, events := writeSession(t, t.TempDir(), 100_000)
	var out bytes.Buffer
	if err := exportTo(&out, messages, events); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(out.Bytes())
	if got := hex.EncodeToString(sum[:]); got != largeExportSum || out.Len() != largeExportLen {
		t.Errorf("export of %d bytes, SHA-256 %s; want %d bytes, %s", out.Len(), got, largeExportLen, largeExportSum)
	}
	checkDocument(t, independentSchema(t), out.Bytes())
}
