package meta

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// A backup stream cut short (anywhere before its end-of-archive marker;
// backup.json, the last entry, counts the files, so that a cut between
// two files is caught too), or naming a file outside pebble/, leaves
// no backup directory: UnpackBackup fails and removes what it wrote. A
// whole stream unpacks into a store that Open opens with the bucket that
// was committed before the backup.
func TestBackupUnpackWholeOrNothing(t *testing.T) {
	s, err := Start(state.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, s)
	mc, err := metaapi.NewClient(s.Addr(), metaapi.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mc.CreateBucket(t.Context(), "kept"); err != nil {
		t.Fatal(err)
	}
	body, err := mc.Backup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stream, err := io.ReadAll(body)
	mustClose(t, body)
	if err != nil {
		t.Fatal(err)
	}

	for _, cut := range []int{0, 100, 511, 512, len(stream) / 2, len(stream) - 2048, len(stream) - 1} {
		dir := filepath.Join(t.TempDir(), "b")
		if _, _, err := UnpackBackup(bytes.NewReader(stream[:cut]), dir); err == nil {
			t.Errorf("a stream cut at %d of %d bytes unpacked", cut, len(stream))
		}
		for _, d := range []string{dir, dir + ".partial"} {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Errorf("cut at %d: %s left behind (%v)", cut, d, err)
			}
		}
	}
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	mustNo(t, tw.WriteHeader(&tar.Header{Name: "pebble/../../escape", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}))
	if _, err := tw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	mustClose(t, tw)
	if _, _, err := UnpackBackup(&evil, filepath.Join(t.TempDir(), "b")); err == nil || !strings.Contains(err.Error(), "unexpected entry") {
		t.Errorf("an entry outside pebble/: %v", err)
	}

	dir := filepath.Join(t.TempDir(), "b")
	if _, _, err := UnpackBackup(bytes.NewReader(stream), dir); err != nil {
		t.Fatal(err)
	}
	restored, err := Open(state.Config{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, restored)
	bl, err := restored.ListBuckets()
	if err != nil || len(bl.Buckets) != 1 || bl.Buckets[0].Name != "kept" {
		t.Errorf("the restored store has buckets %+v (%v), want [kept]", bl, err)
	}
	// A second request while one runs would be refused; one after
	// another both succeed.
	for range 2 {
		resp, err := http.Get("http://" + s.Addr() + "/v1/admin/backup")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		mustClose(t, resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("backup answered %d", resp.StatusCode)
		}
	}
}
