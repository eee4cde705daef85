package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A retry after a port race removes what the failed attempt created, and
// never a member directory that held data before Start (the embedded
// server on `spindle gen`'s output: every datanode's data was removed)
// nor a member that registered in the attempt.
func TestRetryRemovesOnlyWhatItCreated(t *testing.T) {
	data, logs := t.TempDir(), t.TempDir()
	cfg := Config{Members: 3, DataDir: data, LogDir: logs}
	// Member 1 has data and an identity from before; members 2 and 3 are
	// new, and member 3 registers in the failed attempt.
	for _, f := range []string{filepath.Join(data, "dn1", "containers", "x"), filepath.Join(logs, "dn1", "DATANODE.json")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("kept"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(data, "dn2"), 0o755); err != nil { // empty: as Start makes it
		t.Fatal(err)
	}
	held := heldDirs(cfg)
	var nodes []*Node
	for id := 1; id <= 3; id++ {
		n := &Node{ID: id, DataDir: filepath.Join(data, fmt.Sprintf("dn%d", id)), LogDir: filepath.Join(logs, fmt.Sprintf("dn%d", id)), readyPath: filepath.Join(data, fmt.Sprintf("dn%d.ready", id))}
		// What the failed attempt wrote.
		for _, d := range []string{n.DataDir, n.LogDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "attempt"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		nodes = append(nodes, n)
	}
	if err := os.WriteFile(filepath.Join(logs, "dn3", "DATANODE.json"), []byte("registered"), 0o644); err != nil {
		t.Fatal(err)
	}
	removeCreated(nodes, held)
	for _, f := range []string{filepath.Join(data, "dn1", "containers", "x"), filepath.Join(logs, "dn1", "DATANODE.json")} {
		if b, err := os.ReadFile(f); err != nil || string(b) != "kept" {
			t.Errorf("%s held data before the start and is gone: %v", f, err)
		}
	}
	for _, d := range []string{filepath.Join(data, "dn2"), filepath.Join(logs, "dn2")} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s was made by the failed attempt and is still there (%v)", d, err)
		}
	}
	// The member that registered keeps its identity: removed, it would
	// register again as a new node.
	if b, err := os.ReadFile(filepath.Join(logs, "dn3", "DATANODE.json")); err != nil || string(b) != "registered" {
		t.Errorf("member 3's identity is gone: %v", err)
	}
}
