package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/meta/raftnet"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// tlsStream posts one frame of msgs to addr's raft stream with s and
// returns the answer's status once the stream ended (0: no answer).
func tlsStream(t *testing.T, s *tlsconf.Settings, addr string, msgs ...*pb.Message) int {
	t.Helper()
	var body []byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		body = append(binary.LittleEndian.AppendUint32(body, uint32(len(b))), b...)
	}
	frame := append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)
	pr, pw := io.Pipe()
	res := make(chan int, 1)
	hc := &http.Client{Transport: s.HTTPTransport(&http.Transport{})}
	go func() {
		code := 0
		resp, err := hc.Post("https://"+addr+raftnet.StreamRoute, "application/octet-stream", pr)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			code = resp.StatusCode
		}
		pr.CloseWithError(io.ErrClosedPipe)
		res <- code
	}()
	t.Cleanup(func() { mustClose(t, pw) })
	// The write fails when the answer came first (a refusal before the
	// stream's handler reads nothing): the answer is what is asked.
	if _, err := pw.Write(frame); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatal(err)
	}
	select {
	case code := <-res:
		return code
	case <-time.After(20 * time.Second):
		t.Fatal("timed out (20 s) waiting for the raft stream to end")
		return 0
	}
}

// TestRaftMessagesBoundToMemberCertificate: in a meta group over mutual
// TLS (each member its own certificate meta-ID), a raft stream from the
// certificate of member 2 that carries a message from member 3 is cut
// and logged, and so is one from a meta certificate that names no member;
// the group itself elects a leader (its members' messages pass). Fails
// without the check in the stream handler (the stream stays open: the
// wait for its end times out). A stream under a datanode's certificate
// is answered 403 while the sender still holds it open (without the
// guard's Connection: close the answer never came: timed out, verified).
func TestRaftMessagesBoundToMemberCertificate(t *testing.T) {
	pki := newTestPKI(t)
	logs := &logBuffer{}
	g := newRGroupWith(t, 3, func(c *state.Config) {
		c.TLS = pki.settings(fmt.Sprintf("meta-%d", c.ID), tlsconf.RoleMeta)
		if c.ID == 1 {
			c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		}
	})
	g.leader()
	spoof := &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: proto.Uint64(3), To: proto.Uint64(1), Term: proto.Uint64(1)}
	if code := tlsStream(t, pki.settings("meta-2", tlsconf.RoleMeta), g.addrs[0], spoof); code != http.StatusOK {
		t.Fatalf("the stream's answer %d, want 200 then cut", code)
	}
	if !logs.has("meta raft stream refused", "from member 3 under the certificate of member 2") {
		t.Fatalf("no refusal logged:\n%s", logs.String())
	}
	if code := tlsStream(t, pki.settings("meta", tlsconf.RoleMeta), g.addrs[0], spoof); code != http.StatusOK {
		t.Fatalf("the stream's answer %d, want 200 then cut", code)
	}
	if !logs.has("meta raft stream refused", "binds no meta member") {
		t.Fatalf("no refusal logged for an unbound certificate:\n%s", logs.String())
	}
	// A certificate of another role is refused before the stream's
	// handler, and answered at once while the stream is still open (the
	// refusal closes the connection instead of reading the body first).
	if code := tlsStream(t, pki.settings("datanode-9", tlsconf.RoleDatanode), g.addrs[0], spoof); code != http.StatusForbidden {
		t.Fatalf("the stream's answer %d under a datanode's certificate, want 403", code)
	}
}
