package scenario

import (
	"testing"

	"github.com/spindle-store/spindle/internal/report"
)

// Seed 002's figure per placement: by kind, and its "different hdd" only
// for data on the disk and the log in a directory on another real device.
func TestSeedFor(t *testing.T) {
	disk := report.DirInfo{FSType: "ext4", Device: "253:0"}
	other := report.DirInfo{FSType: "ext4", Device: "253:16"}
	shm := report.DirInfo{FSType: "tmpfs", Device: "0:25"}
	for _, c := range []struct {
		p     PlacementSpec
		where Placement
		want  float64 // 0: none
	}{
		{PlacementSpec{"tmpfs", "tmpfs"}, Placement{Data: shm, Log: shm, SameDevice: true}, 8900},
		{PlacementSpec{"disk", "disk"}, Placement{Data: disk, Log: disk, SameDevice: true}, 420},
		{PlacementSpec{"disk", "tmpfs"}, Placement{Data: disk, Log: shm}, 1400},
		{PlacementSpec{"tmpfs", "disk"}, Placement{Data: shm, Log: disk}, 0},
		{PlacementSpec{"disk", "/mnt/hdd2/log"}, Placement{Data: disk, Log: other}, 520},
		{PlacementSpec{"disk", "/srv/log"}, Placement{Data: disk, Log: disk, SameDevice: true}, 0},
		{PlacementSpec{"disk", "/dev/shm/log"}, Placement{Data: disk, Log: shm}, 0},
	} {
		got := seedFor(c.p, c.where)
		switch {
		case c.want == 0 && got != nil:
			t.Errorf("%s: seed %v, want none", c.p, *got)
		case c.want != 0 && (got == nil || got.OpsPerS != c.want):
			t.Errorf("%s: seed %v, want %v", c.p, got, c.want)
		}
	}
}

func TestParsePlacements(t *testing.T) {
	got, err := ParsePlacements(" tmpfs:tmpfs, disk:disk ,disk:tmpfs,tmpfs:disk,disk:/mnt/b")
	if err != nil {
		t.Fatal(err)
	}
	want := []PlacementSpec{{"tmpfs", "tmpfs"}, {"disk", "disk"}, {"disk", "tmpfs"}, {"tmpfs", "disk"}, {"disk", "/mnt/b"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("placement %d: %v, want %v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"", "tmpfs", "tmpfs:", ":disk", "a:b", "disk:disk:disk", "tmpfs:tmpfs,tmpfs:tmpfs", "disk:rel"} {
		if _, err := ParsePlacements(bad); err == nil {
			t.Errorf("ParsePlacements(%q): no error", bad)
		}
	}
}
