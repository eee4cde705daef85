package pipeline

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/transport"
)

// testCerts issues datanode and client pairs of one CA, valid for
// 127.0.0.1.
type testCerts struct {
	t   testing.TB
	dir string
	ca  *tlsconf.CA
}

func newTestCerts(t testing.TB) *testCerts {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlsconf.CreateCA(filepath.Join(dir, "ca"), "test-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	return &testCerts{t: t, dir: dir, ca: ca}
}

func (tc *testCerts) settings(name string, r tlsconf.Role) *tlsconf.Settings {
	tc.t.Helper()
	c, k, err := tc.ca.Issue(tlsconf.IssueRequest{Name: name, Role: r, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		tc.t.Fatal(err)
	}
	cp, kp, err := tlsconf.WritePair(tc.dir, name, c, k)
	if err != nil {
		tc.t.Fatal(err)
	}
	s, err := tlsconf.NewSettings(tlsconf.Files{Cert: cp, Key: kp, CA: filepath.Join(tc.dir, "ca", tlsconf.CACertFile)})
	if err != nil {
		tc.t.Fatal(err)
	}
	return s
}

// TestRaftFromNonMemberDropped: three datanodes over mutual TLS, each with
// its own certificate bound to its member ID (Member.CertName, as the
// meta service hands them out), elect a leader and replicate a write —
// their raft messages pass. Raft messages sent to member 1 by a datanode
// certificate that is no member (for a member's ID, or its own), by a
// member speaking for another member, and by a client certificate are
// dropped, each counted in spindle_datanode_refused_total; the sender's
// connection still serves its requests. A member whose certificate is not
// known is refused too (RequirePeerCertNames). Fails without
// authorizeRaft: nothing is refused.
func TestRaftFromNonMemberDropped(t *testing.T) {
	certs := newTestCerts(t)
	nodes, _ := startClusterWith(t, func(tn *testNode) {
		tn.tls = certs.settings(nameOf(tn.id), tlsconf.RoleDatanode)
		tn.certName = nameOf(tn.id)
		tn.requireNames = true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := certs.settings("carol", tlsconf.RoleClient)
	writeOne := func(b uint64) {
		t.Helper()
		leader := waitLeader(t, nodes)
		cl, err := transport.DialClient(ctx, leader.addr, transport.ClientConfig{Conn: transport.ConnConfig{TLS: client}})
		if err != nil {
			t.Fatal(err)
		}
		defer closeT(t, cl)
		writeChunks(t, cl, b, 0, 1, 100)
		for _, tn := range nodes {
			readBack(t, tn, b, 100)
		}
	}
	writeOne(1)

	target := nodes[0]
	refused := func() float64 {
		return testutil.ToFloat64(target.node.metrics.authRefused.WithLabelValues("raft message"))
	}
	term := func() uint64 { return target.node.Pipelines()[0].Term }
	termBefore := term()
	attacks := []struct {
		name string
		cert *tlsconf.Settings
		from uint64
	}{
		{"a non-member datanode for member 2", certs.settings("dn-4", tlsconf.RoleDatanode), 2},
		{"a non-member datanode for itself", certs.settings("dn-4b", tlsconf.RoleDatanode), 4},
		{"member 3 for member 2", certs.settings(nameOf(3), tlsconf.RoleDatanode), 2},
		{"a client certificate for member 2", certs.settings("bob", tlsconf.RoleClient), 2},
	}
	for i, a := range attacks {
		c, err := transport.DialConn(ctx, target.addr, transport.ConnConfig{TLS: a.cert})
		if err != nil {
			t.Fatalf("%s: dial: %v", a.name, err)
		}
		// A heartbeat of a much later term: taken, it would depose the
		// leader and move every member to that term.
		m := heartbeatFrom(a.from, target.id, termBefore+1000)
		if err := c.Send(&transport.RaftMessage{GroupID: 1, Message: m}); err != nil {
			t.Fatalf("%s: send: %v", a.name, err)
		}
		// The connection's frames are handled in order: once the read
		// below is answered, the raft frame was handled.
		if err := c.Send(&transport.ReadChunk{RequestID: 7, PipelineID: 1, ContainerID: 999, LocalID: 1, Length: 1}); err != nil {
			t.Fatalf("%s: send: %v", a.name, err)
		}
		f, err := c.ReadFrame()
		if err != nil {
			t.Fatalf("%s: the read after the raft message: %v", a.name, err)
		}
		var resp transport.Response
		if err := f.Decode(&resp); err != nil || resp.RequestID != 7 {
			t.Fatalf("%s: answer %+v (%v), want the read's", a.name, resp, err)
		}
		closeT(t, c)
		if got := refused(); got != float64(i+1) {
			t.Errorf("%s: %v raft messages refused, want %d", a.name, got, i+1)
		}
	}
	// Every refused message was dropped before raft saw it: the term
	// never moved to the attackers' (the loop has handled everything
	// posted before this call).
	if err := target.node.UpdatePeers(ctx, nil); err != nil {
		t.Fatal(err)
	}
	writeOne(2)
	if got := term(); got >= termBefore+1000 {
		t.Errorf("member 1's term is %d after the refused heartbeats of term %d", got, termBefore+1000)
	}

	// A member whose certificate the node does not know: refused while
	// RequirePeerCertNames, whatever certificate it presents.
	target.node.certMu.Lock()
	delete(target.node.certNames, 2)
	target.node.certMu.Unlock()
	c, err := transport.DialConn(ctx, target.addr, transport.ConnConfig{TLS: certs.settings(nameOf(2)+"-other", tlsconf.RoleDatanode)})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, c)
	before := refused()
	if err := c.Send(&transport.RaftMessage{GroupID: 1, Message: heartbeatFrom(2, target.id, termBefore+1000)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(&transport.ReadChunk{RequestID: 8, PipelineID: 1, ContainerID: 999, LocalID: 1, Length: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	// Member 2's own messages are refused from now on as well (its name
	// is unknown too), so the count says only that something was; the
	// term says the attacker's heartbeat was among them.
	if refused() <= before {
		t.Errorf("a member without a known certificate: not refused")
	}
	if err := target.node.UpdatePeers(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := term(); got >= termBefore+1000 {
		t.Errorf("member 1's term is %d after the heartbeat of term %d from a member without a known certificate", got, termBefore+1000)
	}
}

func heartbeatFrom(from, to, term uint64) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(from), To: proto.Uint64(to), Term: proto.Uint64(term)}
}

func nameOf(id uint64) string { return "dn-" + string(rune('0'+id)) }
