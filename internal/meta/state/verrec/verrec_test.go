package verrec

import (
	"encoding/hex"
	"errors"
	"testing"
)

// TestLayoutBytes pins docs/FORMAT.md's example and the section's bytes.
func TestLayoutBytes(t *testing.T) {
	id := uint64(0x18eecd64221af6e8)
	if got := hex.EncodeToString(Key("bkt", "a", id)); got != "56626b74006100e711329bdde50917" {
		t.Fatalf("key %s", got)
	}
	v := Version{ID: id, Marker: true}
	b := v.Append(nil)
	if got := hex.EncodeToString(b); got != "5602e8f61a2264cdee18" {
		t.Fatalf("section %s", got)
	}
	back, rest, err := Decode(b)
	if err != nil || back != v || len(rest) != 0 || back.String() != "18eecd64221af6e8" {
		t.Fatalf("decoded %+v, %d bytes left, %v", back, len(rest), err)
	}
	if name, got, ok := Split(KeyPrefix("bkt"), Key("bkt", "a/b", id)); !ok || name != "a/b" || got != id {
		t.Fatalf("split: %q %x %v", name, got, ok)
	}
	if (Version{}).Append(nil) != nil || (Version{}).String() != "null" {
		t.Fatal("the zero version has a section or an ID")
	}
	for _, bad := range [][]byte{{Tag, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {Tag, 4, 1, 0, 0, 0, 0, 0, 0, 0}, {Tag, 0, 1}} {
		if _, _, err := Decode(bad); !errors.Is(err, ErrSection) {
			t.Fatalf("section % x decoded: %v", bad, err)
		}
	}
	for s, want := range map[string]error{"18eecd64221af6e8": nil, "null": nil, "01G65Z755AFWAKHE12NY0CQ9FH": ErrForeignID, "bad_id": nil, "": nil} {
		_, _, err := ParseID(s)
		switch {
		case s == "bad_id" || s == "":
			if err == nil || errors.Is(err, ErrForeignID) {
				t.Errorf("ParseID(%q): %v, want malformed", s, err)
			}
		case !errors.Is(err, want):
			t.Errorf("ParseID(%q): %v, want %v", s, err, want)
		}
	}
}
