package server

import (
	"os"
	"path/filepath"
	"testing"
)

// The S3 root user: the configured keys win; without them keys are
// generated once into s3-credentials.json (0600) and read back at the next
// start; one key without the other is refused.
func TestS3Root(t *testing.T) {
	dir := t.TempDir()
	a, s, gen, err := s3Root(dir, S3Config{AccessKey: "AKIAGIVEN0000000001", SecretKey: "given-secret-0123456789"})
	if err != nil || a != "AKIAGIVEN0000000001" || s != "given-secret-0123456789" || gen {
		t.Fatalf("configured keys: %q %q %v %v", a, s, gen, err)
	}
	if _, err := os.Stat(filepath.Join(dir, s3CredentialsFile)); !os.IsNotExist(err) {
		t.Fatalf("configured keys wrote a credentials file: %v", err)
	}
	if _, _, _, err := s3Root(dir, S3Config{AccessKey: "AKIAGIVEN0000000001"}); err == nil {
		t.Fatal("an access key without a secret was accepted")
	}
	a1, s1, gen1, err := s3Root(dir, S3Config{})
	if err != nil || !gen1 || len(a1) != 20 || len(s1) != 40 {
		t.Fatalf("generated: %q %q %v %v", a1, s1, gen1, err)
	}
	st, err := os.Stat(filepath.Join(dir, s3CredentialsFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v %v", st, err)
	}
	a2, s2, gen2, err := s3Root(dir, S3Config{})
	if err != nil || gen2 || a2 != a1 || s2 != s1 {
		t.Fatalf("second start: %q %q %v %v; want the generated keys again", a2, s2, gen2, err)
	}
}
