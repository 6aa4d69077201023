package trajectory

// Checking each step's timestamp against the schema's definition (a
// pattern and the date-time format) was a tenth of an export's time
// (docs/benchmarks.md#trajectory). plainTimestamp accepts, without the
// schema, the form every recorded timestamp has; it accepts only what
// the definition accepts (TestPlainTimestampsValidate), and anything else
// is still checked by the schema.

// plainTimestamp says whether ts is yyyy-mm-ddThh:mm:ss, then optionally
// a fraction of a second, then Z or an offset ±hh:mm, with a day that is
// in its month (of the proleptic Gregorian calendar), hours to 23,
// minutes and seconds to 59, an offset's hours to 23 and minutes to 59.
// A "t" or "z" in lower case and a leap second are left to the schema.
func plainTimestamp(ts string) bool {
	if len(ts) < 20 || ts[4] != '-' || ts[7] != '-' || ts[10] != 'T' || ts[13] != ':' || ts[16] != ':' {
		return false
	}
	year := number(ts[0:4])
	month, day := number(ts[5:7]), number(ts[8:10])
	hour, min, sec := number(ts[11:13]), number(ts[14:16]), number(ts[17:19])
	if year < 0 || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour < 0 || hour > 23 || min < 0 || min > 59 || sec < 0 || sec > 59 {
		return false
	}
	rest := ts[19:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	if rest == "Z" {
		return true
	}
	if len(rest) != 6 || rest[0] != '+' && rest[0] != '-' || rest[3] != ':' {
		return false
	}
	zh, zm := number(rest[1:3]), number(rest[4:6])
	return zh >= 0 && zh <= 23 && zm >= 0 && zm <= 59
}

// number is the decimal digits s as a number, or -1 when s holds
// anything else.
func number(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return -1
		}
		n = n*10 + int(s[i]-'0')
	}
	return n
}

// daysIn is the number of days of month in year.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
