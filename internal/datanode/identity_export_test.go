package datanode

import (
	"path/filepath"
	"testing"
)

// TestWriteIdentity: a written identity is the one the datanode loads at
// start (so it skips registration and comes up as that node); an existing
// identity is never replaced; malformed ones are refused.
func TestWriteIdentity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	uuid, err := NewUUID()
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteIdentity(dir, uuid, 7); err != nil {
		t.Fatal(err)
	}
	id, err := loadIdentity(dir)
	if err != nil || id.UUID != uuid || id.NodeID != 7 {
		t.Fatalf("loaded %+v, %v; want %s node 7", id, err, uuid)
	}
	if err := WriteIdentity(dir, uuid, 8); err == nil {
		t.Fatal("an existing identity was replaced")
	}
	other := t.TempDir()
	for _, c := range []struct {
		uuid string
		id   uint64
	}{{"abc", 1}, {"zz" + uuid[2:], 1}, {uuid, 0}, {uuid, 1 << 16}} {
		if err := WriteIdentity(other, c.uuid, c.id); err == nil {
			t.Fatalf("WriteIdentity(%q, %d) accepted", c.uuid, c.id)
		}
	}
}
