// Package goldenhex holds the helpers of the golden-byte tests that pin
// on-disk formats (the engine's records, the WAL's segments and records):
// an expected encoding written as a hex table, one row per field, and the
// comparison that reports a changed encoding. Test code only.
//
// Invariants: a row may hold spaces (ignored) and hex digits only; a bad
// table fails the test, it never yields a partial value.
//
// Concurrency: stateless; safe from any goroutine a test allows.
package goldenhex

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// Decode decodes a hex table, one row per field; spaces are ignored.
func Decode(t testing.TB, rows ...string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(strings.Join(rows, ""), " ", ""))
	if err != nil {
		t.Fatalf("bad golden hex: %v", err)
	}
	return b
}

// Check fails the test when got is not want: the encoding of what changed.
func Check(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: encoding changed\n got %s\nwant %s", what, hex.EncodeToString(got), hex.EncodeToString(want))
	}
}
