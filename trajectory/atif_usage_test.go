package trajectory

import (
	"math"
	"testing"
)

// TestAddPtrSaturates: the token totals of a trajectory saturate instead
// of wrapping to a negative number when the recorded counts are huge.
func TestAddPtrSaturates(t *testing.T) {
	a, b := int64(math.MaxInt64), int64(math.MaxInt64)
	if got := addPtr(&a, &b); *got != math.MaxInt64 {
		t.Fatalf("sum %d, want %d", *got, int64(math.MaxInt64))
	}
}
