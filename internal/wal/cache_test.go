package wal

import "testing"

// The cache takes back what it counted for an entry: a payload copied by
// append has more capacity than length, and counting the one when adding
// and the other when dropping made the cached bytes grow for ever.
func TestCacheCountsAnEntryAlikeInAndOut(t *testing.T) {
	var c entryCache
	g := &group{id: 1}
	for i, n := range []int{0, 1, 1000, 5000, 70000} {
		data := append([]byte{}, make([]byte, n)...)
		c.add(g, uint64(i+1), uint64(i+1), data)
		c.drop(&entryMeta{data: data})
		if c.bytes != 0 || c.entries != 0 {
			t.Fatalf("payload of %d bytes (capacity %d): %d bytes and %d entries left after its drop", n, cap(data), c.bytes, c.entries)
		}
	}
}
