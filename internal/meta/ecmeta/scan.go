package ecmeta

import (
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/meta/state/verrec"
)

// ScanPage bounds the keys one step of a pass visits: the pass advances by
// at most that many keys per datanode poll, so the meta lock is never
// held for a scan of the whole namespace (a var: tests lower it).
var ScanPage = 4096

// scanPrefixes are the key records a pass reads: current versions ('K')
// and noncurrent ones ('V', S3 versioning), both prefix | bucket | 0x00 |
// ...
var scanPrefixes = []byte{state.PrefixKey, verrec.Prefix}

// scanStepLocked advances the pass over the keys by at most ScanPage keys
// (starting a new pass when none runs and the last one started ScanEvery
// ago or more); when the pass ends its map replaces m.buckets and
// m.scanned is when it started. It returns the keys visited. Under
// State.Mu and m.mu.
//
// A container is eligible for conversion only when it was seen CLOSED
// before the start of the complete pass its buckets come from (eligible):
// every key committed before it closed was then in the store when the
// pass went by, as the old whole scan saw them.
func (m *Manager) scanStepLocked(now time.Time) (int, error) {
	if m.scan == nil {
		if m.buckets != nil && now.Sub(m.scanned) < ScanEvery {
			return 0, nil
		}
		m.scan = &bucketScan{out: map[uint64][]string{}, started: now}
	}
	sc := m.scan
	visited := 0
	for sc.prefix < len(scanPrefixes) && visited < ScanPage {
		p := scanPrefixes[sc.prefix]
		lower := []byte{p}
		if sc.after != nil {
			lower = append(slices.Clone(sc.after), 0) // the first key after it
		}
		n, last, err := m.scanPage(lower, []byte{p + 1}, ScanPage-visited, sc.out)
		if err != nil {
			m.scan = nil
			return visited, fmt.Errorf("meta: the containers' buckets: %w", err)
		}
		visited += n
		if last == nil {
			sc.prefix, sc.after = sc.prefix+1, nil
		} else {
			sc.after = last
		}
	}
	if sc.prefix == len(scanPrefixes) {
		m.buckets, m.scanned, m.scan = sc.out, sc.started, nil
	}
	return visited, nil
}

// scanPage visits at most limit keys in [lower, upper), adding their
// containers' buckets to out; last is the last key visited when the limit
// stopped it (nil: the range is done).
func (m *Manager) scanPage(lower, upper []byte, limit int, out map[uint64][]string) (n int, last []byte, err error) {
	it, err := m.st.Store.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, nil, err
	}
	defer state.CloseInto(it, &err, "scan of the keys' containers")
	for ok := it.First(); ok; ok = it.Next() {
		if n == limit {
			return n, last, nil
		}
		k := it.Key()
		last = append(last[:0], k...)
		n++
		end := slices.Index(k[1:], 0)
		if end < 0 {
			continue
		}
		bucket := string(k[1 : 1+end])
		rec, err := state.DecodeKey(it.Value())
		if err != nil {
			return n, nil, err
		}
		for _, b := range rec.Blocks {
			if !slices.Contains(out[b.Container], bucket) {
				out[b.Container] = append(out[b.Container], bucket)
			}
		}
	}
	return n, nil, it.Error()
}

// eligible says whether a CLOSED container's buckets are known: it was
// seen CLOSED before the last complete pass started. Under m.mu.
func (m *Manager) eligible(cid uint64, now time.Time) bool {
	first, ok := m.closed[cid]
	if !ok {
		m.closed[cid] = now
		return false
	}
	return m.buckets != nil && first.Before(m.scanned)
}
