package scenario

import (
	"strings"
	"testing"
)

// A bench s3 whose objects (3 replicas, and as many for the baseline)
// cannot fit in the embedded server's filesystem is refused before it
// starts, with the numbers; one that fits is not.
func TestS3BenchRefusesRunsPastFreeSpace(t *testing.T) {
	dir := t.TempDir()
	big := S3BenchConfig{Objects: MaxBenchKeys, SizeBytes: 1 << 30}
	err := checkS3BenchRoom(dir, big)
	if err == nil || !strings.Contains(err.Error(), "free") {
		t.Fatalf("%d objects of 1 GiB: %v, want a refusal naming the free space", big.Objects, err)
	}
	if err := checkS3BenchRoom(dir, S3BenchConfig{Objects: 10, SizeBytes: 1 << 10}); err != nil {
		t.Fatalf("10 objects of 1 KiB: %v", err)
	}
}
