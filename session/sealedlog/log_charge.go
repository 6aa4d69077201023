package sealedlog

import "github.com/ctxfs/ctxfs/internal/quota"

// SetCharge has c pay for every byte appended to l from now on (the
// bound on a home's or a space's history, quota.History): each unit is charged
// before anything of it is written, and refused whole (EDQUOT) when a
// record does not fit; what is taken back is given back. Called once,
// before the log takes appends; nil (the default) charges nobody.
func (l *Log) SetCharge(c quota.Charge) { l.charge = c }

// AppendOwed is Append for lines that must be recorded past the bound of
// the log's charge (the end of a run that was stopped): charged all the
// same, never refused for it.
func (l *Log) AppendOwed(data []byte) (int64, error) {
	if err := validate(data); err != nil {
		err.Path = l.name()
		return 0, err
	}
	if l.mem {
		return l.appendMemory(data), nil
	}
	j, err := l.journal()
	if err != nil {
		return 0, err
	}
	rec := l.appendRecord(data)
	rec.owed = true
	seq, err := j.enqueueAppends([]*jrec{rec})
	if err == nil {
		err = j.wait(seq)
	}
	return rec.off, err
}

// takeUnit charges a unit to its logs' charge, before anything of it is
// written: all or none. A unit's logs are one session's (BeginPair), so
// one payer is charged the whole unit at once, and its refusal names what
// the unit would add. A charge is one lock of the home's count, no system
// call.
func takeUnit(recs []*jrec) error {
	for i, r := range recs {
		c := r.log.charge
		if c == nil || i > 0 && c == recs[0].log.charge {
			continue // nobody pays, or charged with the first
		}
		n := unitCost(recs[i:], c)
		if r.owed {
			c.Owe(n)
			continue
		}
		if err := c.Take(n); err != nil {
			giveUnit(recs[:i])
			return err
		}
	}
	return nil
}

// unitCost is what the records of recs whose log c pays for add.
func unitCost(recs []*jrec, c quota.Charge) int64 {
	var n int64
	for _, r := range recs {
		if r.log.charge == c {
			n += int64(len(r.data))
		}
	}
	return n
}

// giveUnit gives back what takeUnit charged for a unit that was not
// written after all.
func giveUnit(recs []*jrec) {
	for _, r := range recs {
		if c := r.log.charge; c != nil {
			c.Give(int64(len(r.data)))
		}
	}
}
