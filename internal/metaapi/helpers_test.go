package metaapi

import (
	"encoding/json"
	"io"
	"testing"
)

// encodeT writes v as a stub server's JSON answer and fails the test when
// it cannot (t.Errorf: handlers run in the server's goroutines, which end
// before its Close returns, within the test).
func encodeT(t testing.TB, w io.Writer, v any) {
	t.Helper()
	if err := json.NewEncoder(w).Encode(v); err != nil {
		t.Errorf("stub server: answer %T: %v", v, err)
	}
}
