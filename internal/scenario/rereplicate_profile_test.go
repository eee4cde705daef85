package scenario

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseSourceTrace(t *testing.T) {
	trace := `1201  sendfile(12, 15, NULL, 4194304) = 4194304
1201  write(12, "SB\1\0\0\0\0\0"..., 65) = 65
1202  read(9,  <unfinished ...>
1203  sendfile(13, 16, NULL, 4194304 <unfinished ...>
1202  <... read resumed>"abc"..., 1048576) = 1048576
1203  <... sendfile resumed>) = 1000
1202  pwrite64(20, "abc"..., 1048576, 0) = 1048576
1202  read(9, 0xc000, 1048576) = -1 EAGAIN (Resource temporarily unavailable)
1201  +++ exited with 0 +++
`
	p := filepath.Join(t.TempDir(), "t")
	if err := os.WriteFile(p, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := parseSourceTrace(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int64{"sendfile": {2, 4194304 + 1000}, "write": {1, 65}, "read": {2, 1048576}, "pwrite64": {1, 1048576}}
	for name, w := range want {
		if got.Calls[name] != w[0] || got.Bytes[name] != w[1] {
			t.Errorf("%s: %d calls %d bytes, want %v", name, got.Calls[name], got.Bytes[name], w)
		}
	}
	if len(got.Rows) != 4 || got.Rows[0].Name != "sendfile" {
		t.Errorf("rows %+v", got.Rows)
	}
}
