package offline

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/vfs"
)

// TestOfflineWriterIncompleteStoreRefused: records written without the
// final Close (no counters) make a store that a load refuses.
func TestOfflineWriterIncompleteStoreRefused(t *testing.T) {
	dir := t.TempDir()
	w, err := CreateOffline(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddNode(1, "offline-node-1", "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	// What an interrupted writer leaves: its batches, no final commit.
	if err := w.b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := w.b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.db.Close(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := state.OpenStore(vfs.Default, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	cfg := state.Config{Dir: dir, Logger: log}
	cfg.SetDefaults()
	s := &state.State{Cfg: cfg, Log: log, Store: &state.Store{DB: db}, Started: cfg.Now()}
	s.InitMemory()
	if err := s.Load(); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Load: %v, want ErrCorrupt", err)
	}
}
