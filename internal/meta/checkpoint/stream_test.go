package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/vfs"
)

func writeFile(t *testing.T, fs vfs.FS, name string, b []byte) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRoundTrip: a directory written and read back holds the same files;
// Info counts them; the index is the one written.
func TestRoundTrip(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/src", 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"000001.sst": bytes.Repeat([]byte("s"), 3*CopyBufBytes/2), "MANIFEST-000001": []byte("m"), "empty": nil}
	var total int64
	for n, b := range files {
		writeFile(t, fs, "/src/"+n, b)
		total += int64(len(b))
	}
	var buf bytes.Buffer
	n, err := Write(&buf, fs, "/src", 42)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Write says %d bytes, wrote %d", n, buf.Len())
	}
	info, err := Read(bytes.NewReader(buf.Bytes()), fs, "/dst", 42)
	if err != nil {
		t.Fatal(err)
	}
	if info != (Info{Index: 42, Files: len(files), Bytes: total}) {
		t.Fatalf("Read: %+v, want index 42, %d files, %d bytes", info, len(files), total)
	}
	for name, want := range files {
		f, err := fs.Open("/dst/" + name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want)+1)
		k, _ := f.Read(got)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:k], want) {
			t.Fatalf("%s: %d bytes back, want %d", name, k, len(want))
		}
	}
	if _, err := Read(bytes.NewReader(buf.Bytes()), fs, "/dst-newer", 43); err == nil {
		t.Fatal("a stream older than min was read")
	}
	for cut := range buf.Len() {
		if cut%97 != 0 && cut < buf.Len()-8 {
			continue
		}
		if _, err := Read(bytes.NewReader(buf.Bytes()[:cut]), fs, "/cut", 0); err == nil {
			t.Fatalf("a stream cut at %d of %d bytes was read", cut, buf.Len())
		}
	}
}

// TestNamesStayInDest: a stream naming a file outside dest (with a
// separator, "." or "..") is refused as corrupt, even with a good CRC.
func TestNamesStayInDest(t *testing.T) {
	for _, name := range []string{"../escape", "a/b", ".", "..", `a\b`} {
		b := append([]byte(Magic), FormatVersion)
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = binary.LittleEndian.AppendUint32(b, 1)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(name)))
		b = append(b, name...)
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = append(b, 'x')
		b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32c.Table))
		_, err := Read(bytes.NewReader(b), vfs.NewMem(), "/dst", 0)
		if !errors.Is(err, state.ErrCorrupt) {
			t.Errorf("file name %q: %v, want ErrCorrupt", name, err)
		}
	}
}
