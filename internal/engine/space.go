package engine

import (
	"fmt"
	"sync"
	"time"
)

// Free space. Every volume keeps a reserve free: a chunk write or a new
// container that would eat into it is refused with ErrVolumeFull, so that
// a full disk never fails the metadata writes that must still happen on
// it (marking a container UNHEALTHY, closing one, Pebble's own log) and a
// datanode on a full disk stays up, serves reads, and restarts.
//
// The free space is read with statfs at most every spaceRefreshInterval;
// in between, the bytes written since are subtracted, and a write that
// would come within its own length of the reserve reads it again (so the
// estimate never lets a write through on stale figures near the edge).
const (
	// MinReservedBytes and MaxReservedBytes bound the default reserve,
	// ReservedPercent of the volume's size.
	MinReservedBytes = 8 << 20
	MaxReservedBytes = 1 << 30
	ReservedPercent  = 5
	// spaceRefreshInterval bounds how stale the statfs figure may be.
	spaceRefreshInterval = 250 * time.Millisecond
)

// volumeSpace is one volume's free-space estimate.
type volumeSpace struct {
	mu         sync.Mutex
	reserve    uint64    // bytes kept free; fixed at open
	total      uint64    // the filesystem's size at the last statfs
	avail      uint64    // free bytes at the last statfs
	written    uint64    // bytes admitted since
	at         time.Time // of the last statfs
	warnedFull bool      // "volume full" logged since it last had room
}

// reserveFor is the default reserve of a volume of totalBytes.
func reserveFor(totalBytes uint64) uint64 {
	return min(max(totalBytes/100*ReservedPercent, MinReservedBytes), MaxReservedBytes)
}

// refreshLocked reads the volume's usage. s.mu must be held.
func (e *Engine) refreshLocked(v *volume, now time.Time) error {
	u, err := e.fs.GetDiskUsage(v.dir)
	if err != nil {
		return fmt.Errorf("engine: volume %s: statfs: %w", v.dir, err)
	}
	s := &v.space
	s.total, s.avail, s.written, s.at = u.TotalBytes, u.AvailBytes, 0, now
	if s.reserve == 0 {
		s.reserve = e.cfg.ReservedBytes
		if s.reserve == 0 {
			s.reserve = reserveFor(u.TotalBytes)
		}
	}
	return nil
}

// freeLocked is the estimate of the free bytes above the reserve.
func (s *volumeSpace) freeLocked() uint64 {
	used := s.reserve + s.written
	if s.avail <= used {
		return 0
	}
	return s.avail - used
}

// admitWrite takes n bytes of v's free space for a write, or refuses with
// ErrVolumeFull when they would eat into the reserve.
func (e *Engine) admitWrite(v *volume, n uint64) error {
	if err := v.writable(); err != nil {
		return err
	}
	s := &v.space
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if now.Sub(s.at) > spaceRefreshInterval || s.freeLocked() < 2*n {
		if err := e.refreshLocked(v, now); err != nil {
			return err
		}
	}
	if free := s.freeLocked(); free < n {
		if !s.warnedFull {
			s.warnedFull = true
			e.log.Error("engine: volume full: refusing writes", "volume", v.dir, "avail_bytes", s.avail, "reserve_bytes", s.reserve)
		}
		return fmt.Errorf("%w: volume %s has %d bytes free, %d of them its reserve", ErrVolumeFull, v.dir, s.avail, s.reserve)
	}
	if s.warnedFull {
		s.warnedFull = false
		e.log.Info("engine: volume has room again", "volume", v.dir, "avail_bytes", s.avail)
	}
	s.written += n
	return nil
}

// hasRoom says whether v has at least n bytes above its reserve (for
// placing a new container).
func (e *Engine) hasRoom(v *volume, n uint64) bool {
	if v.failed.Load() || v.readOnly != nil {
		return false
	}
	s := &v.space
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.at) > spaceRefreshInterval {
		if err := e.refreshLocked(v, now); err != nil {
			return false
		}
	}
	return s.freeLocked() >= n
}

// Space is the engine's storage as the datanode reports it.
type Space struct {
	// CapacityBytes is the volumes' filesystems' total size.
	CapacityBytes uint64
	// AvailableBytes is what new data may still take: free space above
	// every volume's reserve.
	AvailableBytes uint64
	// FullVolumes counts the volumes with no room above their reserve
	// (the read-only ones included).
	FullVolumes int
}

// ReadOnlyVolumes lists the volumes that were full at Open: their metadata
// stores are open read-only, they serve reads and refuse every write
// (ErrVolumeFull) until the engine is opened again with room on them.
func (e *Engine) ReadOnlyVolumes() []VolumeFailure {
	var out []VolumeFailure
	for _, v := range e.vols {
		if v.readOnly != nil && !v.failed.Load() {
			f := *v.readOnly
			e.mu.RLock()
			f.Containers = v.containers
			e.mu.RUnlock()
			out = append(out, f)
		}
	}
	return out
}

// Space reads every volume's usage now (one statfs per volume).
func (e *Engine) Space() (Space, error) {
	var out Space
	for _, v := range e.vols {
		if v.failed.Load() {
			continue // no longer counts
		}
		s := &v.space
		s.mu.Lock()
		err := e.refreshLocked(v, time.Now())
		total, free := s.total, s.freeLocked()
		if v.readOnly != nil {
			free = 0 // takes nothing new, whatever is freed meanwhile
		}
		s.mu.Unlock()
		if err != nil {
			return Space{}, err
		}
		out.CapacityBytes += total
		out.AvailableBytes += free
		if free == 0 {
			out.FullVolumes++
		}
	}
	return out, nil
}
