package server

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestDecommissionAndMaintenance is issue 15's decommission acceptance on
// 4 datanode processes:
//
//  1. maintenance: a datanode IN_MAINTENANCE killed until DEAD has its
//     containers counted as replicated (nothing under-replicated, nothing
//     copied); recommissioned once back;
//  2. decommission: `spindle admin datanode decommission ID --wait` of a
//     datanode holding data returns once it is DECOMMISSIONED; every
//     container then has 3 replicas on the other datanodes, and with the
//     decommissioned datanode stopped every key reads back.
func TestDecommissionAndMaintenance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s := startServer(t, dir, func(c *Config) {
		c.Datanodes = 4
		c.Meta.ContainerSizeBytes = 2 << 20
		c.Meta.StaleAfter = time.Second
		c.Meta.DeadAfter = 3 * time.Second
	})
	defer testutil.CloseT(t, s)
	kc := keyClient(t, s)
	mc, cl := s.Meta(), s.Cluster()
	const bucket, size, keys = "decom", 200 << 10, 40
	if _, err := kc.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if _, err := kc.Put(ctx, bucket, fmt.Sprintf("k%02d", i), bytes.NewReader(value(i, size)), keyclient.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodeID := func(member int) uint64 {
		ns, err := mc.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.Addr == cl.Nodes()[member-1].Addr {
				return n.NodeID
			}
		}
		t.Fatalf("datanode %d not registered", member)
		return 0
	}
	node := func(id uint64) metaapi.NodeInfo {
		ns, err := mc.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.NodeID == id {
				return n
			}
		}
		t.Fatalf("node %d not listed", id)
		return metaapi.NodeInfo{}
	}
	readAll := func(what string) {
		t.Helper()
		for i := range keys {
			got, err := getErr(ctx, kc, bucket, fmt.Sprintf("k%02d", i))
			if err != nil || !bytes.Equal(got, value(i, size)) {
				t.Fatalf("%s: key k%02d: %v (or wrong bytes)", what, i, err)
			}
		}
	}
	spindle := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, spindleBin, append(append(args, "--meta", s.MetaAddr()), s.ClientArgs()...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("spindle %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	// Every container CLOSED (so that they are all copyable), before the
	// operations.
	waitFor(t, ctx, "containers with data CLOSED", func() (bool, error) {
		cs, err := mc.Containers(ctx)
		if err != nil {
			return false, err
		}
		closed := 0
		for _, c := range cs {
			if c.State == metaapi.ContainerClosed && len(c.Replicas) == 3 {
				closed++
			}
		}
		return closed >= 3, nil
	})

	// 1. Maintenance of datanode 2: killed until DEAD, nothing copied.
	m := nodeID(2)
	if out := spindle("admin", "datanode", "maintenance", strconv.FormatUint(m, 10), "--for", "1h"); !strings.Contains(out, metaapi.NodeInMaintenance) {
		t.Fatalf("maintenance: %s", out)
	}
	before, err := mc.Replication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Kill(2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "datanode 2 DEAD", func() (bool, error) { return node(m).Health == metaapi.HealthDead, nil })
	rs, err := mc.Replication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rs.UnderReplicated != 0 || len(rs.Inflight) != 0 || rs.CopiedContainers != before.CopiedContainers {
		t.Fatalf("a DEAD datanode in maintenance: %d under-replicated, %d copies in flight, %d copied (before %d); want none",
			rs.UnderReplicated, len(rs.Inflight), rs.CopiedContainers, before.CopiedContainers)
	}
	if err := cl.Restart(ctx, 2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "datanode 2 HEALTHY again", func() (bool, error) { return node(m).Health == metaapi.HealthHealthy, nil })
	if out := spindle("admin", "datanode", "recommission", strconv.FormatUint(m, 10)); !strings.Contains(out, metaapi.NodeInService) {
		t.Fatalf("recommission: %s", out)
	}

	// 2. Decommission of datanode 1, which holds data.
	d := nodeID(1)
	if node(d).Containers == 0 {
		t.Fatal("datanode 1 holds no container")
	}
	held := node(d).Containers
	out := spindle("admin", "datanode", "decommission", strconv.FormatUint(d, 10), "--wait", "--every", "200ms")
	if !strings.Contains(out, metaapi.NodeDecommissioned) {
		t.Fatalf("decommission --wait: %s", out)
	}
	t.Logf("decommission --wait printed:\n%s", out)
	if n := node(d); n.OpState != metaapi.NodeDecommissioned || n.Decommission == nil || n.Decommission.Replicated != n.Decommission.Containers {
		t.Fatalf("after decommission --wait: %+v", n)
	}
	after, err := mc.Replication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("datanode %d held %d containers; %d copied for its decommission", d, held, after.CopiedContainers-before.CopiedContainers)
	if after.CopiedContainers == before.CopiedContainers {
		t.Fatal("decommissioned without copying a container")
	}
	if out := spindle("admin", "nodes"); !strings.Contains(out, metaapi.NodeDecommissioned) {
		t.Fatalf("admin nodes does not show the state:\n%s", out)
	}
	cs, err := mc.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.State != metaapi.ContainerClosed || c.UsedBytes == 0 {
			continue
		}
		others := 0
		for _, r := range c.ReplicaDetails {
			if r.Node != d && r.State == metaapi.ContainerClosed {
				others++
			}
		}
		if others < 3 {
			t.Fatalf("container %d: %d CLOSED replicas besides the decommissioned node's (%+v)", c.ID, others, c.ReplicaDetails)
		}
	}
	if err := cl.Kill(1); err != nil {
		t.Fatal(err)
	}
	readAll("datanode 1 decommissioned and stopped")
}
