package engine

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Failed volumes.
//
// A volume fails when its probe fails (CheckVolumes: its identity file
// unreadable or another volume's — removed, unmounted, replaced —, or a
// small file cannot be written, synced and removed in its directory; a
// write refused with ENOSPC is a full volume, not a failed one),
// or, at Open, when it cannot be opened or loaded and the engine tolerates
// that many failed volumes (Config.FailedVolumesTolerated). A failed
// volume's containers leave the engine at once: they are no longer
// listed, read, written or exported, so the datanode's next report lacks
// them and the meta service has them copied again; OPEN ones fail their
// pipeline at its next write here. The volume takes no new container or
// import and counts for no space. Its metadata store is left open (a
// store on a vanished disk may fail in any way) and never closed.
// Nothing comes back from a failed volume without a restart.
//
// A failed fsync anywhere still fails the whole engine (ErrFailed: the
// kernel may have dropped dirty pages of any volume's files); a datanode
// restarted after it leaves an unusable volume out when tolerated.

// VolumeFailure is a failed volume.
type VolumeFailure struct {
	Dir    string
	Reason string
	// Containers: the containers it held when it failed (0 when it failed
	// at Open, before they were known).
	Containers int
	At         time.Time
}

// FailedVolumes lists the volumes failed since Open (at Open included),
// in the order they failed.
func (e *Engine) FailedVolumes() []VolumeFailure {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return slices.Clone(e.failedVols)
}

// CheckVolumes probes every volume still in use and fails those whose
// probe fails; it returns the volumes it failed now.
func (e *Engine) CheckVolumes() []VolumeFailure {
	if e.closed.Load() {
		return nil
	}
	var out []VolumeFailure
	for _, v := range e.vols {
		if v.failed.Load() {
			continue
		}
		if err := e.probeVolume(v); err != nil {
			out = append(out, e.failVolume(v, err))
		}
	}
	return out
}

// probeBytes is the size of a volume probe's file.
const probeBytes = 4096

// probeVolume checks that v is still the volume it was: its identity
// record names the same volume, and a file can be created, written,
// synced and removed in its directory (PROBE-<hex>; never in a
// subdirectory, which a removed volume would not have).
func (e *Engine) probeVolume(v *volume) error {
	rec, err := readVolumeIdentity(e.fs, v.dir)
	if err != nil {
		return fmt.Errorf("identity record: %w", err)
	}
	if !bytes.Equal(rec.UUID[:], v.uuid[:]) {
		return fmt.Errorf("identity record names volume %x, this volume is %x (another disk mounted here?)", rec.UUID, v.uuid)
	}
	var suffix [8]byte
	rand.Read(suffix[:])
	path := filepath.Join(v.dir, "PROBE-"+hex.EncodeToString(suffix[:]))
	f, err := e.fs.Create(path)
	if errors.Is(err, syscall.ENOSPC) {
		return nil // full (no inode left), not failed: the identity read
	}
	if err != nil {
		return fmt.Errorf("probe file: %w", err)
	}
	_, werr := f.WriteAt(make([]byte, probeBytes), 0)
	if errors.Is(werr, syscall.ENOSPC) {
		werr = nil // a full disk is not a failed one: reads still work
	}
	serr := f.SyncData()
	cerr := f.Close()
	rerr := e.fs.Remove(path)
	if err := errors.Join(werr, serr, cerr, rerr); err != nil {
		return fmt.Errorf("probe file: %w", err)
	}
	return nil
}

// failVolume takes v out of use (see above) and records why.
func (e *Engine) failVolume(v *volume, cause error) VolumeFailure {
	e.mu.Lock()
	v.failed.Store(true)
	var gone []*container
	for id, c := range e.containers {
		if c.vol == v {
			delete(e.containers, id)
			gone = append(gone, c)
		}
	}
	f := VolumeFailure{Dir: v.dir, Reason: cause.Error(), Containers: len(gone), At: time.Now()}
	e.failedVols = append(e.failedVols, f)
	e.mu.Unlock()
	for _, c := range gone {
		e.files.dropContainer(c.id)
		e.records.dropContainer(c.id)
		e.dirs.drop(c.dir)
	}
	e.log.Error("engine: volume failed: its containers are dropped (the meta service copies them again); the other volumes go on",
		"volume", v.dir, "containers", len(gone), "err", cause)
	return f
}
