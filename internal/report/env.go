package report

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/spindle-store/spindle/internal/buildinfo"
)

// Environment is what a report says about the machine a run was made on:
// everything the seed investigations had to collect by hand (CPU, memory,
// kernel, the filesystem and device of every directory used, the kernel's
// writeback settings, the versions). Fields that could not be read are left
// empty and named in Missing, never guessed.
type Environment struct {
	CPUModel       string            `json:"cpu_model"`
	Cores          int               `json:"cores"`
	MemoryBytes    uint64            `json:"memory_bytes"`
	Kernel         string            `json:"kernel"`
	GoVersion      string            `json:"go_version"`
	SpindleVersion string            `json:"spindle_version"`
	Commit         string            `json:"commit"`
	VMDirty        map[string]string `json:"vm_dirty"` // /proc/sys/vm/dirty_* by name
	Dirs           []DirInfo         `json:"dirs,omitempty"`
	Missing        []string          `json:"missing,omitempty"`
}

// DirInfo describes the filesystem holding one directory used by a run.
type DirInfo struct {
	Path       string `json:"path"`
	MountPoint string `json:"mount_point"`
	FSType     string `json:"fs_type"`
	Source     string `json:"source"`        // the mounted device or pseudo-source (tmpfs, …)
	Device     string `json:"device"`        // major:minor
	Rotational *bool  `json:"rotational"`    // nil when not a block device, or unknown
	Options    string `json:"mount_options"` // per-mount and superblock options
	// Journal says whether an ext4 filesystem has a journal (jbd2 running
	// for its device); nil for other filesystems. Without one, namespace
	// changes (creates, renames) reach the disk in no particular order.
	Journal *bool `json:"journal,omitempty"`
}

// procRoot and sysRoot are where /proc and /sys are read from (tests point
// them at fixtures).
var (
	procRoot = "/proc"
	sysRoot  = "/sys"
)

// CaptureEnvironment reads the environment, describing each of dirs.
func CaptureEnvironment(dirs []string) Environment {
	env := Environment{
		Cores:          runtime.NumCPU(),
		GoVersion:      runtime.Version(),
		SpindleVersion: buildinfo.Version,
		Commit:         buildinfo.Commit(),
		VMDirty:        map[string]string{},
	}
	missing := func(format string, args ...any) { env.Missing = append(env.Missing, fmt.Sprintf(format, args...)) }

	if fs, err := procfs.NewFS(procRoot); err != nil {
		missing("cpu model (%s/cpuinfo): %v", procRoot, err)
		missing("memory (%s/meminfo): %v", procRoot, err)
	} else {
		if env.CPUModel, err = cpuModel(fs); err != nil {
			missing("cpu model (%s/cpuinfo): %v", procRoot, err)
		} else if env.CPUModel == "" {
			missing("cpu model (%s/cpuinfo)", procRoot)
		}
		if env.MemoryBytes, err = memTotalBytes(fs); err != nil {
			missing("memory (%s/meminfo): %v", procRoot, err)
		} else if env.MemoryBytes == 0 {
			missing("memory (%s/meminfo)", procRoot)
		}
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		env.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	} else {
		missing("kernel (uname: %v)", err)
	}
	vmDir := filepath.Join(procRoot, "sys", "vm")
	if names, err := filepath.Glob(filepath.Join(vmDir, "dirty_*")); err == nil && len(names) > 0 {
		for _, n := range names {
			if b, err := os.ReadFile(n); err == nil {
				env.VMDirty[filepath.Base(n)] = strings.TrimSpace(string(b))
			}
		}
	} else {
		missing("vm.dirty_* (%s)", vmDir)
	}
	var mounts []mountInfo
	if f, err := os.Open(filepath.Join(procRoot, "self", "mountinfo")); err == nil {
		mounts, err = parseMountInfo(f)
		_ = f.Close() // read-only
		if err != nil {
			missing("mounts: %v", err)
		}
	} else {
		missing("mounts (%s/self/mountinfo)", procRoot)
	}
	for _, d := range dirs {
		abs, err := filepath.Abs(d)
		if err == nil {
			if r, err := filepath.EvalSymlinks(abs); err == nil {
				abs = r
			}
		}
		info := DirInfo{Path: d}
		if m, ok := mountOf(mounts, abs); ok {
			info.MountPoint, info.FSType, info.Source, info.Device = m.mountPoint, m.fsType, m.source, m.device
			info.Options = m.options
			info.Rotational = rotational(m.device)
			if m.fsType == "ext4" {
				info.Journal = ext4Journal(m.source)
			}
		} else {
			missing("filesystem of %s", d)
		}
		env.Dirs = append(env.Dirs, info)
	}
	return env
}

// cpuModel returns the "model name" of the first processor of cpuinfo
// under fs, read through procfs (trimmed, as the hand parser it replaced
// did: TestCPUAndMemorySameFigures); "" when it has none (arm64 kernels
// write none). procfs parses cpuinfo by architecture (x86's and ARM's
// layouts, and others); the whole file must parse.
func cpuModel(fs procfs.FS) (string, error) {
	cpus, err := fs.CPUInfo()
	if err != nil {
		return "", err
	}
	if len(cpus) == 0 {
		return "", nil
	}
	return strings.TrimSpace(cpus[0].ModelName), nil
}

// memTotalBytes returns MemTotal of meminfo under fs in bytes (kB × 1024),
// read through procfs; 0 when it has none.
func memTotalBytes(fs procfs.FS) (uint64, error) {
	m, err := fs.Meminfo()
	if err != nil {
		return 0, err
	}
	if m.MemTotalBytes == nil {
		return 0, nil
	}
	return *m.MemTotalBytes, nil
}

type mountInfo struct {
	device, mountPoint, options, fsType, source string
}

// mountinfo keeps its hand parser: procfs's (FS.GetMounts) hands the
// per-mount and superblock options over as maps, losing the order the
// kernel wrote them in, which DirInfo.Options reports as written; it
// leaves the mount point and source octal-escaped; and one line it cannot
// parse fails the whole file, where this one skips the line.

// maxMountInfoLines bounds how much of mountinfo is read.
const maxMountInfoLines = 100000

// parseMountInfo reads /proc/self/mountinfo (proc(5)): fields 3 (major:minor),
// 5 (mount point, octal-escaped), 6 (mount options), then after the "-"
// separator the filesystem type, the source and the superblock options.
func parseMountInfo(r io.Reader) ([]mountInfo, error) {
	var out []mountInfo
	sc := bufio.NewScanner(r)
	for n := 0; sc.Scan(); n++ {
		if n >= maxMountInfoLines {
			return out, fmt.Errorf("mountinfo has more than %d lines", maxMountInfoLines)
		}
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if sep < 0 || len(f) < sep+3 {
			continue // not a mountinfo line
		}
		m := mountInfo{device: f[2], mountPoint: unescapeOctal(f[4]), options: f[5], fsType: f[sep+1], source: unescapeOctal(f[sep+2])}
		if len(f) > sep+3 {
			m.options += " " + f[sep+3]
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// unescapeOctal undoes mountinfo's \ooo escapes (space is \040).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountOf returns the mount holding path: the longest mount point that is
// path or a parent of it (the last one mounted wins among equals).
func mountOf(mounts []mountInfo, path string) (mountInfo, bool) {
	best, found := mountInfo{}, false
	for _, m := range mounts {
		mp := m.mountPoint
		if path == mp || mp == "/" || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/") {
			if !found || len(mp) >= len(best.mountPoint) {
				best, found = m, true
			}
		}
	}
	return best, found
}

// rotational reads /sys/dev/block/MAJ:MIN/queue/rotational, or that of the
// whole disk when the device is a partition; nil when there is none.
func rotational(device string) *bool {
	base := filepath.Join(sysRoot, "dev", "block", device)
	for _, p := range []string{filepath.Join(base, "queue", "rotational"), filepath.Join(base, "..", "queue", "rotational")} {
		if b, err := os.ReadFile(p); err == nil {
			v := strings.TrimSpace(string(b)) == "1"
			return &v
		}
	}
	return nil
}

// ext4Journal reports whether jbd2 runs for the ext4 filesystem on source
// (/proc/fs/jbd2/<dev>-8 exists for a mounted ext4 with a journal); nil when
// that cannot be told (no /proc/fs/jbd2, a source that is not a device).
func ext4Journal(source string) *bool {
	if !strings.HasPrefix(source, "/dev/") {
		return nil
	}
	dir := filepath.Join(procRoot, "fs", "jbd2")
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	_, err := os.Stat(filepath.Join(dir, filepath.Base(source)+"-8"))
	has := err == nil
	return &has
}

// SortedVMDirty returns the vm.dirty settings as "name=value" lines, sorted.
func (e Environment) SortedVMDirty() []string {
	out := make([]string, 0, len(e.VMDirty))
	for k, v := range e.VMDirty {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
