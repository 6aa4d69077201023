package trajectory

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// TestPlainTimestampsValidate: every timestamp plainTimestamp accepts the
// schema's timestamp definition accepts, over every day of the months of
// common, leap and century years, each edge of the time and the offset,
// and the forms it leaves to the schema; and the recorded forms take the
// fast way.
func TestPlainTimestampsValidate(t *testing.T) {
	sch, err := compiled()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	check := func(ts string) {
		t.Helper()
		if plainTimestamp(ts) {
			n++
			if err := sch.timestamp.Validate(ts); err != nil {
				t.Fatalf("%q: plain, but the schema says %v", ts, err)
			}
		}
	}
	for _, year := range []string{"0000", "0001", "1900", "2000", "2023", "2024", "2100", "9999", "-001", "20x4"} {
		for month := 0; month <= 13; month++ {
			for day := 0; day <= 32; day++ {
				check(fmt.Sprintf("%s-%02d-%02dT12:00:00Z", year, month, day))
			}
		}
	}
	for _, tm := range []string{"00:00:00", "23:59:59", "23:59:60", "24:00:00", "12:60:00", "12:00:60", "1:00:00", "12:0:000", "aa:bb:cc"} {
		for _, frac := range []string{"", ".", ".0", ".123456789123", ".x", ".1.2"} {
			for _, zone := range []string{"Z", "z", "+00:00", "-00:00", "+23:59", "-23:59", "+24:00", "+12:60", "+1200", "+12:0", "12:00", "+12:00Z", "", "ZZ", " Z"} {
				for _, sep := range []string{"T", "t", " ", "_"} {
					check("2024-02-29" + sep + tm + frac + zone)
				}
			}
		}
	}
	for _, ts := range []string{"2026-01-02T03:04:05.000Z", "2026-01-02T03:04:05Z", "2026-01-02T03:04:05.5+01:00", "2024-02-29T23:59:59.999999999-23:59"} {
		if !plainTimestamp(ts) {
			t.Errorf("%q: a recorded form, not plain", ts)
		}
	}
	for _, ts := range []string{"", "2026-01-02", "2026-01-02T03:04:05", "2026/01/02T03:04:05Z", "2026-01-02T03:04:05+01", "2023-02-29T00:00:00Z", "2026-01-02T03:04:05.Z", "٢٠٢٦-01-02T03:04:05Z"} {
		check(ts)
		if plainTimestamp(ts) {
			t.Errorf("%q: plain", ts)
		}
	}
	t.Logf("%d plain timestamps validated", n)
}

func FuzzPlainTimestamp(f *testing.F) {
	f.Add("2026-01-02T03:04:05.000Z")
	f.Add("2024-02-29T23:59:59.5-23:59")
	sch, err := compiled()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ts string) {
		if plainTimestamp(ts) {
			if err := sch.timestamp.Validate(ts); err != nil {
				t.Fatalf("%q: plain, but the schema says %v", ts, err)
			}
		}
	})
}

// TestTimestampDefinitionPinned: plainTimestamp is written for this
// definition; a schema that asks more of a timestamp fails here first.
func TestTimestampDefinitionPinned(t *testing.T) {
	var sch struct {
		Defs map[string]map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(schemaJSON, &sch); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "string", "format": "date-time",
		"pattern": `^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$`}
	if got := sch.Defs["timestamp"]; !reflect.DeepEqual(got, want) {
		t.Errorf("the schema's timestamp is %v, plainTimestamp is written for %v", got, want)
	}
}
