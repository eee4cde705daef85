package main

import (
	"strings"
	"testing"
)

// The pick-then-close helpers the module had (tls_test's freeAddr,
// localcluster's freePorts, the pipeline tests' closeT) are found; a
// listener served on, stored, returned or handed over is not, nor one a
// portpick:allow comment covers.
func TestScanFile(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"freeAddr", `func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}`, 1},
		{"freePorts", `func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}`, 1},
		{"closeT", `func f(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	closeT(t, ln)
	start(addr)
}`, 1},
		{"served", `func f() string {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go http.Serve(ln, nil)
	return ln.Addr().String()
}`, 0},
		{"stored", `func f() *node {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	return &node{addr: ln.Addr().String(), ln: ln}
}`, 0},
		{"closed unread", `func f() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	return ln.Close()
}`, 0},
		{"allowed", `func f() string {
	// portpick:allow the server takes an address
	// (a reason on two lines).
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	return l.Addr().String()
}`, 0},
	} {
		found, err := scanFile(tc.name+".go", []byte("package p\n\n"+tc.src+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(found) != tc.want {
			t.Errorf("%s: found %d (%s), want %d", tc.name, len(found), strings.Join(found, "; "), tc.want)
		}
	}
}
