package report

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

const sampleMountInfo = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
23 22 0:21 / /dev/shm rw,nosuid,nodev shared:2 - tmpfs tmpfs rw,size=24684084k
24 22 8:1 / /mnt/my\040disk rw,noatime - xfs /dev/sdb1 rw,attr2
25 22 0:5 / /proc rw - proc proc rw
garbage line
`

func TestParseMountInfoAndMountOf(t *testing.T) {
	ms, err := parseMountInfo(strings.NewReader(sampleMountInfo))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 {
		t.Fatalf("%d mounts, want 4: %+v", len(ms), ms)
	}
	cases := []struct{ path, mount, fs, src, dev string }{
		{"/work/main", "/", "ext4", "/dev/vda", "254:0"},
		{"/dev/shm/x/y", "/dev/shm", "tmpfs", "tmpfs", "0:21"},
		{"/dev/shmoo", "/", "ext4", "/dev/vda", "254:0"}, // a prefix of a name is not a parent
		{"/mnt/my disk/data", "/mnt/my disk", "xfs", "/dev/sdb1", "8:1"},
		{"/", "/", "ext4", "/dev/vda", "254:0"},
	}
	for _, c := range cases {
		m, ok := mountOf(ms, c.path)
		if !ok || m.mountPoint != c.mount || m.fsType != c.fs || m.source != c.src || m.device != c.dev {
			t.Errorf("%s: %+v, want mount %s %s %s %s", c.path, m, c.mount, c.fs, c.src, c.dev)
		}
	}
	if m, _ := mountOf(ms, "/work"); !strings.Contains(m.options, "discard") {
		t.Errorf("superblock options lost: %q", m.options)
	}
}

// fakeProc writes files (name: content) into a directory laid out as
// /proc is and returns procfs over it.
func fakeProc(t *testing.T, files map[string]string) (string, procfs.FS) {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return root, fs
}

func TestCPUAndMemoryParsers(t *testing.T) {
	switch runtime.GOARCH {
	case "386", "amd64", "arm", "arm64": // procfs's x86 and ARM cpuinfo layouts
	default:
		t.Skipf("the cpuinfo fixture is laid out as x86's and ARM's; not %s's", runtime.GOARCH)
	}
	// Features: ARM's layout requires it, x86's ignores it.
	_, fs := fakeProc(t, map[string]string{
		"cpuinfo": "processor\t: 0\nmodel name\t: AMD EPYC 7B13 \nflags\t\t: fpu\nFeatures\t: fp\n\nprocessor\t: 1\nmodel name\t: other\nFeatures\t: fp\n",
		"meminfo": "MemTotal:       24684084 kB\nMemFree:         1 kB\nHugePages_Total:       0\n",
	})
	if got, err := cpuModel(fs); err != nil || got != "AMD EPYC 7B13" {
		t.Fatalf("cpu model %q, %v", got, err)
	}
	if got, err := memTotalBytes(fs); err != nil || got != 24684084<<10 {
		t.Fatalf("memory %d, %v", got, err)
	}
	_, fs = fakeProc(t, map[string]string{"cpuinfo": "", "meminfo": "MemTotal: x kB\n"})
	if got, err := cpuModel(fs); err == nil && got != "" {
		t.Fatalf("an empty cpuinfo gave the model %q", got)
	}
	if got, err := memTotalBytes(fs); err == nil {
		t.Fatalf("garbage parsed as memory %d", got)
	}
	_, fs = fakeProc(t, map[string]string{"meminfo": "MemFree: 1 kB\n"})
	if got, err := memTotalBytes(fs); err != nil || got != 0 {
		t.Fatalf("memory %d, %v without MemTotal", got, err)
	}
	if _, err := cpuModel(fs); err == nil {
		t.Fatal("no cpuinfo, no error")
	}
}

// TestCPUAndMemorySameFigures: procfs gives the cpu model and MemTotal the
// hand parsers it replaced gave, on the same bytes: this machine's
// /proc/cpuinfo and /proc/meminfo, copied once to a directory laid out as
// /proc is, and CaptureEnvironment reads them from there.
func TestCPUAndMemorySameFigures(t *testing.T) {
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	root, fs := fakeProc(t, map[string]string{"cpuinfo": string(cpuinfo), "meminfo": string(meminfo)})
	model, err := cpuModel(fs)
	if err != nil {
		t.Fatal(err)
	}
	if want := handCPUModel(string(cpuinfo)); model != want {
		t.Fatalf("cpu model: procfs %q, hand parser %q", model, want)
	}
	mem, err := memTotalBytes(fs)
	if err != nil {
		t.Fatal(err)
	}
	if want := handMemTotalBytes(string(meminfo)); mem != want || mem == 0 {
		t.Fatalf("memory: procfs %d, hand parser %d (bytes)", mem, want)
	}
	old := procRoot
	procRoot = root
	defer func() { procRoot = old }()
	env := CaptureEnvironment(nil)
	if env.CPUModel != model || env.MemoryBytes != mem {
		t.Fatalf("CaptureEnvironment under %s: cpu %q memory %d; want %q %d", root, env.CPUModel, env.MemoryBytes, model, mem)
	}
}

// handCPUModel is the hand parser cpuModel replaced: the first "model
// name" of cpuinfo.
func handCPUModel(cpuinfo string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// handMemTotalBytes is the hand parser memTotalBytes replaced: MemTotal
// of meminfo in bytes.
func handMemTotalBytes(meminfo string) uint64 {
	for _, line := range strings.Split(meminfo, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// TestCaptureEnvironmentHere reads this machine: every field is either
// filled or named in Missing.
func TestCaptureEnvironmentHere(t *testing.T) {
	dir := t.TempDir()
	env := CaptureEnvironment([]string{dir})
	if env.Cores < 1 || env.GoVersion == "" || env.SpindleVersion == "" {
		t.Fatalf("environment: %+v", env)
	}
	missing := strings.Join(env.Missing, "; ")
	if env.Kernel == "" && !strings.Contains(missing, "kernel") {
		t.Fatalf("kernel neither read nor reported missing: %+v", env)
	}
	if env.MemoryBytes == 0 && !strings.Contains(missing, "memory") {
		t.Fatalf("memory neither read nor reported missing: %+v", env)
	}
	if len(env.Dirs) != 1 || (env.Dirs[0].FSType == "" && !strings.Contains(missing, dir)) {
		t.Fatalf("dir %s neither described nor reported missing: %+v", dir, env)
	}
}

func TestExt4Journal(t *testing.T) {
	root := t.TempDir()
	old := procRoot
	procRoot = root
	defer func() { procRoot = old }()
	if ext4Journal("/dev/vda") != nil {
		t.Fatal("journal state claimed without /proc/fs/jbd2")
	}
	if err := os.MkdirAll(filepath.Join(root, "fs", "jbd2", "sdb1-8"), 0o755); err != nil {
		t.Fatal(err)
	}
	if j := ext4Journal("/dev/vda"); j == nil || *j {
		t.Fatalf("vda without a jbd2 entry: %v", j)
	}
	if j := ext4Journal("/dev/sdb1"); j == nil || !*j {
		t.Fatalf("sdb1 with a jbd2 entry: %v", j)
	}
	if ext4Journal("tmpfs") != nil {
		t.Fatal("journal state claimed for a pseudo source")
	}
}
