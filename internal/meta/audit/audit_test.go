package audit

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// The file is rotated past MaxBytes with Keep files kept, each line a
// JSON event; nothing is dropped while the queue has room.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	l, err := Open(Options{Path: p, MaxBytes: 1000, Keep: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		l.Record(Event{Who: "cert:a", Action: "commit_key", Bucket: "b", Key: "k", Outcome: "done"})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l.Dropped() != 0 {
		t.Fatalf("%d dropped", l.Dropped())
	}
	lines := 0
	for _, name := range []string{"audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil || st.Size() > 1000 || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", name, st, err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var e Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Who != "cert:a" || e.Time.IsZero() {
				t.Errorf("%s: line %q: %v", name, sc.Text(), err)
			}
			lines++
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "audit.jsonl.3")); !os.IsNotExist(err) {
		t.Errorf("a fourth file kept: %v", err)
	}
	if lines == 0 || lines >= 100 {
		t.Errorf("%d lines in the files kept, want some and fewer than 100 (the oldest rotated away)", lines)
	}
}

// A file that cannot be written drops and counts its events; Record never
// blocks.
func TestFailingFileDropsAndCounts(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	l, err := Open(Options{Path: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// /dev/full: every write fails with ENOSPC (a full audit disk).
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full")
	}
	l2 := &Log{o: l.o, ch: make(chan Event, 4), done: make(chan struct{})}
	w := &writer{o: l.o, f: full}
	w.bw = bufio.NewWriterSize(full, 16)
	go l2.run(w)
	for range 1000 {
		l2.Record(Event{Who: "cert:a", Action: "x", Outcome: "done"})
	}
	if err := l2.Close(); err == nil {
		t.Error("Close after failed writes: nil error")
	}
	if l2.Dropped() == 0 {
		t.Error("nothing counted dropped on a full disk")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
