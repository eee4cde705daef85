package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// TestCrashDuringImport crashes the filesystem before the k-th mutating
// operation of an import (staging, every block, Commit) and of what follows
// it, for k = 1, 2, … until the run ends before the k-th, reopens the engine
// on what the crash left, and checks the import's all-or-nothing promise:
//
//   - the container is either absent, with no staging directory and no
//     container directory left, or present, CLOSED, with every block equal
//     to the source's and reading back byte-for-byte (checksums verified);
//   - it is present only if the crash came after Commit started the Pebble
//     commit (the commit point), and always if Commit had returned;
//   - the recovered engine can import it (again, when absent) and survives
//     another crash.
//
// Strict model (unsynced state all lost) and a journaled power-loss model
// (unsynced file writes kept at random, an in-order prefix of unsynced
// namespace operations kept).
func TestCrashDuringImport(t *testing.T) {
	skipCrashLoopIfShort(t)
	src := openMem(t, vfs.NewMem())
	defer closeT(t, src)
	buildClosed(t, src, 9)

	// A formatted target, copied afresh (all of it durable) for each k, so
	// that the crashes fall in the import rather than in the format.
	base := vfs.NewMem()
	e0 := openMem(t, base)
	mustNo(t, e0.CreateContainer(1))
	mustNo(t, e0.Close())

	for _, mode := range []struct {
		name    string
		keepPct int
	}{
		{"strict", 0},
		{"journaled-keep-50%", 50},
	} {
		t.Run(mode.name, func(t *testing.T) {
			const kMax = 1000 // bound: an import of testBlocks is a few dozen operations
			k := int64(1)
			for ; k <= kMax; k++ {
				fs := base.CrashClone(100, nil)
				e := openMem(t, fs, func(c *Config) { c.SyncWorkers = 2 })
				armedAt := fs.OpCount()
				fs.CrashAtOp(k, mode.keepPct, k)
				metaAt := int64(-1) // operations done when the Pebble commit started
				x, err := src.ExportContainer(9)
				mustNo(t, err)
				im, err := e.ImportContainer(9, 0, x.Info().BCSID)
				mustNo(t, err)
				im.hookBeforeMetaCommit = func() { metaAt = fs.OpCount() - armedAt }
				err = feedImport(x, im)
				closeT(t, x)
				if err != nil {
					t.Fatalf("k=%d: import: %v", k, err)
				}
				committedBeforeCrash := fs.Crashed() == nil
				// Work after the commit, so that crashes fall there too.
				mustNo(t, e.CreateContainer(2))
				mustNo(t, e.Close())
				img := fs.Crashed()
				if img == nil {
					break // the run ended before the k-th operation
				}
				if metaAt < 0 {
					t.Fatalf("k=%d: the commit hook did not run", k)
				}
				// The image holds operations 1..k-1.
				if err := checkImportCrash(src, img, k-1 > metaAt, committedBeforeCrash); err != nil {
					t.Fatalf("k=%d (metadata commit after operation %d): %v", k, metaAt, err)
				}
			}
			if k > kMax {
				t.Fatalf("import still running at k=%d", k)
			}
			t.Logf("crashed at every one of %d mutating operations", k-1)
		})
	}
}

// checkImportCrash opens an engine on a crash image and checks container 9
// against the rules of TestCrashDuringImport; mayExist says the crash came
// after the Pebble commit started, mustExist that Commit had returned.
func checkImportCrash(src *Engine, img *vfs.MemFS, mayExist, mustExist bool) (err error) {
	e, err := Open(Config{DataDirs: []string{"/vol1", "/vol2"}, FS: img, Logger: quietLogger})
	if err != nil {
		return fmt.Errorf("reopen after crash: %w", err)
	}
	defer closeInto(&err, e)
	_, err = e.Container(9)
	present := err == nil
	switch {
	case err != nil && !errors.Is(err, ErrNotFound):
		return err
	case present && !mayExist:
		return fmt.Errorf("container present though the crash came before the metadata commit")
	case !present && mustExist:
		return fmt.Errorf("container absent though Commit had returned")
	}
	if ci, err := e.Container(1); err != nil || ci.State != StateOpen {
		return fmt.Errorf("bystander container 1: %+v, %v", ci, err)
	}
	if err := noLeftovers(e, img); err != nil {
		return err
	}
	if present {
		if err := sameContainer(src, e, 9); err != nil {
			return err
		}
	} else if blocks, err := e.ListBlocks(9, 0, true, 0); !errors.Is(err, ErrNotFound) || len(blocks) > 0 {
		return fmt.Errorf("absent container has blocks: %v, %v", blocks, err)
	}
	// Second life: import it (again), crash, find it.
	if present {
		if _, err := e.ImportContainer(9, 0, 0); !errors.Is(err, ErrExists) {
			return fmt.Errorf("import of a present container: %v", err)
		}
	} else if err := copyContainer(src, e, 9, 0, nil); err != nil {
		return fmt.Errorf("import after recovery: %w", err)
	}
	again := img.CrashClone(0, nil)
	e2, err := Open(Config{DataDirs: []string{"/vol1", "/vol2"}, FS: again, Logger: quietLogger})
	if err != nil {
		return fmt.Errorf("reopen after second crash: %w", err)
	}
	defer closeInto(&err, e2)
	if err := sameContainer(src, e2, 9); err != nil {
		return fmt.Errorf("after second crash: %w", err)
	}
	return noLeftovers(e2, again)
}
