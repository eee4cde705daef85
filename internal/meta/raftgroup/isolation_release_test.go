//go:build !spindle_testhooks

package raftgroup

import (
	"reflect"
	"testing"
)

// A release build has no isolation hook: no Isolate method on Member, and
// a member never drops a raft message as isolated. (Built with -tags
// spindle_testhooks, Member.Isolate exists; make test runs the meta tests
// that use it in a pass of their own.)
func TestReleaseBuildHasNoIsolation(t *testing.T) {
	if _, ok := reflect.TypeFor[*Member]().MethodByName("Isolate"); ok {
		t.Fatal("a release build has Member.Isolate")
	}
	var m Member
	if m.iso.isolated() {
		t.Fatal("a release build's member is isolated")
	}
}
