package engine

import (
	"errors"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// TestVolumeReserve: writes that would eat into a volume's reserve of
// free space are refused with ErrVolumeFull, and no container is placed
// on a full volume; what is stored stays readable, a container can still
// be marked UNHEALTHY and closed (the reserve is there for such metadata
// writes), and the space comes back when the disk has room again.
func TestVolumeReserve(t *testing.T) {
	fs := vfs.NewMem()
	const total, reserve = 200 << 20, 10 << 20
	fs.SetDiskUsage(&vfs.DiskUsage{TotalBytes: total, AvailBytes: 100 << 20})
	e := openMem(t, fs, func(c *Config) { c.DataDirs = []string{"/vol1"} })
	defer closeT(t, e)
	b := BlockID{Container: 1, Local: 1}
	if err := e.CreateContainer(1); err != nil {
		t.Fatal(err)
	}
	if _, err := writeChunk(e, b, 0, 4096); err != nil {
		t.Fatal(err)
	}
	sp, err := e.Space()
	if err != nil || sp.CapacityBytes != total || sp.AvailableBytes != 100<<20-reserve || sp.FullVolumes != 0 {
		t.Fatalf("space %+v, %v; want capacity %d, available %d", sp, err, total, 100<<20-reserve)
	}
	// The disk fills up to within 1 MiB of the reserve (by others: the
	// engine reads it again, as it does at least every
	// spaceRefreshInterval; Space reads it at once).
	fs.SetDiskUsage(&vfs.DiskUsage{TotalBytes: total, AvailBytes: reserve + 1<<20})
	if _, err := e.Space(); err != nil {
		t.Fatal(err)
	}
	if _, err := writeChunk(e, b, 4096, 2<<20); !errors.Is(err, ErrVolumeFull) {
		t.Fatalf("write into the reserve: %v, want ErrVolumeFull", err)
	}
	if err := e.CreateContainer(2); !errors.Is(err, ErrVolumeFull) {
		t.Fatalf("new container on a full volume: %v, want ErrVolumeFull", err)
	}
	if sp, _ := e.Space(); sp.FullVolumes != 0 || sp.AvailableBytes != 1<<20 {
		t.Fatalf("space %+v, want 1 MiB available", sp)
	}
	// Small writes still fit until the reserve.
	if _, err := writeChunk(e, b, 4096, 4096); err != nil {
		t.Fatalf("small write above the reserve: %v", err)
	}
	if got, err := e.ReadChunk(b, 0, 8192, nil); err != nil || string(got) != string(content(b, 0, 8192)) {
		t.Fatalf("read on a full volume: %v", err)
	}
	if err := e.MarkUnhealthy(1, "test"); err != nil {
		t.Fatalf("marking UNHEALTHY on a full volume: %v", err)
	}
	// Room again.
	fs.SetDiskUsage(&vfs.DiskUsage{TotalBytes: total, AvailBytes: 150 << 20})
	if _, err := e.Space(); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateContainer(2); err != nil {
		t.Fatalf("new container once there is room: %v", err)
	}
}

func TestReserveFor(t *testing.T) {
	for _, c := range []struct{ total, want uint64 }{
		{0, MinReservedBytes},
		{100 << 20, MinReservedBytes},
		{200 << 20, 10 << 20},
		{1 << 40, MaxReservedBytes},
	} {
		if got := reserveFor(c.total); got != c.want {
			t.Errorf("reserveFor(%d) = %d, want %d", c.total, got, c.want)
		}
	}
}
