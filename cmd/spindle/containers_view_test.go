package main

import (
	"testing"

	"github.com/spindle-store/spindle/internal/metaapi"
)

func TestReplicaList(t *testing.T) {
	got := replicaList(metaapi.ContainerInfo{ReplicaDetails: []metaapi.ReplicaInfo{
		{Node: 1, State: metaapi.ContainerClosed, BCSID: 12},
		{Node: 4, State: metaapi.ContainerClosed, BCSID: 9, Behind: true},
		{Node: 5, State: metaapi.ContainerUnhealthy, BCSID: 12},
	}})
	if want := "1:CLOSED@12 4:CLOSED@9(behind) 5:UNHEALTHY@12"; got != want {
		t.Fatalf("replicaList: %q, want %q", got, want)
	}
	// An OPEN container of a pipeline kept without its DEAD member 3.
	got = replicaList(metaapi.ContainerInfo{ReplicaDetails: []metaapi.ReplicaInfo{
		{Node: 1, State: metaapi.ContainerOpen, BCSID: 7},
		{Node: 2, State: metaapi.ContainerOpen, BCSID: 7},
	}, Missing: []uint64{3}, UnderReplicated: true})
	if want := "1:OPEN@7 2:OPEN@7 3:DEAD UNDER-REPLICATED"; got != want {
		t.Fatalf("replicaList: %q, want %q", got, want)
	}
}
