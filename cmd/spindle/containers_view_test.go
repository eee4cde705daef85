package main

import (
	"testing"

	"github.com/spindle-store/spindle/internal/metaapi"
)

func TestReplicaList(t *testing.T) {
	got := replicaList([]metaapi.ReplicaInfo{
		{Node: 1, State: metaapi.ContainerClosed, BCSID: 12},
		{Node: 4, State: metaapi.ContainerClosed, BCSID: 9, Behind: true},
		{Node: 5, State: metaapi.ContainerUnhealthy, BCSID: 12},
	})
	if want := "1:CLOSED@12 4:CLOSED@9(behind) 5:UNHEALTHY@12"; got != want {
		t.Fatalf("replicaList: %q, want %q", got, want)
	}
}
