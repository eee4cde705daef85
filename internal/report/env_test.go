package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

func TestCPUAndMemoryParsers(t *testing.T) {
	if got := cpuModel("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n"); got != "AMD EPYC 7B13" {
		t.Fatalf("cpu model %q", got)
	}
	if got := memTotalBytes("MemTotal:       24684084 kB\nMemFree: 1 kB\n"); got != 24684084<<10 {
		t.Fatalf("memory %d", got)
	}
	if cpuModel("") != "" || memTotalBytes("MemTotal: x kB") != 0 {
		t.Fatal("garbage parsed as a value")
	}
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
