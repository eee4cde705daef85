package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The `full` fault fills one datanode's data volume until the kernel
// answers ENOSPC, holds it full, then frees it. On a shared filesystem
// (/dev/shm is the machine's memory) filling "the volume" would starve
// every process on the machine, so each datanode's data directory gets a
// volume of its own: a tmpfs of VolumeBytes mounted by the run (root
// only), under
//
//	vols/dn<i>/          the mount
//	vols/dn<i>/data/     the datanode's data directory (datanodes/dn<i> is a symlink to it)
//	vols/dn<i>/BALLAST   the fault's filler, present only while it holds
//
// The datanode's raft log stays on the run's filesystem: the fault is a
// full data volume, as on a host whose data disk fills.

// DefaultVolumeBytes is each datanode's tmpfs when the run injects `full`.
const DefaultVolumeBytes = 512 << 20

// MinVolumeBytes: a datanode needs room for its containers' first blocks
// and the engine's metadata (64 MiB is enough, see issue 15's tmpfs test).
const MinVolumeBytes = 64 << 20

// volumeValueShare of the volumes' total, divided by the replication
// factor, bounds the values a run with `full` puts (MaxBytes): the
// volumes stay at most half full on average, so that a fault fills them
// with ballast, not with the workload.
const volumeValueShare = 0.5

// ballastChunkBytes is one write of the ballast after the fallocate of the
// free space (tmpfs counts in pages; the writes take what rounding left).
const ballastChunkBytes = 64 << 10

// maxBallastWrites bounds the top-up writes after fallocate.
const maxBallastWrites = 1 << 16

type volumes struct {
	root   string   // vols/
	mounts []string // what is mounted, unmounted by Close
}

func volumeDir(root string, id int) string {
	return filepath.Join(root, "vols", fmt.Sprintf("dn%d", id))
}
func ballastPath(root string, id int) string {
	return filepath.Join(volumeDir(root, id), "BALLAST")
}

// mountVolumes mounts a tmpfs of sizeBytes per datanode and links the
// datanode's data directory into it. Root only; on error, what was
// mounted is unmounted.
func mountVolumes(root string, datanodes int, sizeBytes int64) (*volumes, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("mounting a tmpfs per datanode needs root")
	}
	v := &volumes{root: root}
	dn := filepath.Join(root, "datanodes")
	if err := os.MkdirAll(dn, 0o755); err != nil {
		return nil, err
	}
	for i := 1; i <= datanodes; i++ {
		mnt := volumeDir(root, i)
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			return nil, errors.Join(err, v.Close())
		}
		opts := fmt.Sprintf("size=%d,mode=0755", sizeBytes)
		if err := unix.Mount("spindle-chaos", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return nil, errors.Join(fmt.Errorf("mount tmpfs on %s: %w", mnt, err), v.Close())
		}
		v.mounts = append(v.mounts, mnt)
		data := filepath.Join(mnt, "data")
		if err := os.Mkdir(data, 0o755); err != nil {
			return nil, errors.Join(err, v.Close())
		}
		if err := os.Symlink(data, filepath.Join(dn, fmt.Sprintf("dn%d", i))); err != nil {
			return nil, errors.Join(err, v.Close())
		}
	}
	return v, nil
}

// Close unmounts every volume (lazily: a process that still holds a file
// there keeps its view; the memory goes with the last reference).
func (v *volumes) Close() error {
	var errs []error
	for _, m := range v.mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	v.mounts = nil
	return errors.Join(errs...)
}

// fill writes the ballast of datanode id until ENOSPC and returns its
// size. Any other error is returned (and the ballast removed).
func (v *volumes) fill(id int) (int64, error) {
	path := ballastPath(v.root, id)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }() // ballast: its space matters, not its bytes
	var st unix.Statfs_t
	if err := unix.Statfs(volumeDir(v.root, id), &st); err != nil {
		return 0, errors.Join(err, os.Remove(path))
	}
	size := int64(st.Bavail) * int64(st.Bsize)
	if size > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil && !errors.Is(err, unix.ENOSPC) {
			return 0, errors.Join(fmt.Errorf("fallocate %d bytes: %w", size, err), os.Remove(path))
		}
	}
	// Whatever fallocate left (the datanode may have freed some
	// meanwhile), plain writes take, until the kernel says ENOSPC.
	buf := make([]byte, ballastChunkBytes)
	off, _ := f.Seek(0, 2)
	for range maxBallastWrites {
		n, err := f.WriteAt(buf, off)
		off += int64(n)
		if errors.Is(err, unix.ENOSPC) {
			return off, nil
		}
		if err != nil {
			return 0, errors.Join(err, os.Remove(path))
		}
	}
	return 0, errors.Join(fmt.Errorf("no ENOSPC after %d bytes of ballast", off), os.Remove(path))
}

// free removes datanode id's ballast.
func (v *volumes) free(id int) error {
	return os.Remove(ballastPath(v.root, id))
}

// injectFull fills the data volume of one datanode to ENOSPC: its writes
// fail (a follower must not acknowledge what it could not store, a leader
// must not answer success), it reports the volume full, and the meta
// service routes new blocks elsewhere. The heal frees the volume.
func injectFull(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	if r.vols == nil {
		return "", nil, errors.New("no volume per datanode")
	}
	id, err := pickDatanode(r, rng)
	if err != nil {
		return "", nil, err
	}
	role := r.role(ctx, id)
	n, err := r.vols.fill(id)
	if err != nil {
		return "", nil, fmt.Errorf("fill datanode %d's volume: %w", id, err)
	}
	return fmt.Sprintf("filled datanode %d's data volume to ENOSPC (%d MiB of ballast) (%s)", id, n>>20, role), func(context.Context) error {
		return r.vols.free(id)
	}, nil
}
