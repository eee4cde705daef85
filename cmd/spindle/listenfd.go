package main

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/spf13/pflag"
)

// listenFDHelp is the help of --listen-fd (datanode, meta).
const listenFDHelp = "serve on this inherited listening TCP socket (file descriptor N ≥ 3, bound by the process that started this one, e.g. exec.Cmd.ExtraFiles) instead of binding --listen: a parent that must know the address before the child starts binds port 0 itself and hands the socket over, so no port is picked and lost in between"

// addListenFD adds --listen-fd to f.
func addListenFD(f *pflag.FlagSet, fd *int) {
	f.IntVar(fd, "listen-fd", 0, listenFDHelp)
}

// inheritedListener is the listening socket at file descriptor fd
// (--listen-fd), or nil when fd is 0.
func inheritedListener(fd int) (net.Listener, error) {
	if fd == 0 {
		return nil, nil
	}
	if fd < 3 {
		return nil, usageErr(fmt.Errorf("--listen-fd %d: want a descriptor ≥ 3 (0, 1 and 2 are stdin, stdout and stderr)", fd))
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("listen-fd-%d", fd))
	ln, err := net.FileListener(f) // a dup of the descriptor
	cerr := f.Close()
	if err != nil {
		return nil, usageErr(fmt.Errorf("--listen-fd %d: %w", fd, err))
	}
	if cerr != nil {
		return nil, errors.Join(fmt.Errorf("--listen-fd %d: %w", fd, cerr), ln.Close())
	}
	if _, ok := ln.Addr().(*net.TCPAddr); !ok {
		return nil, errors.Join(usageErr(fmt.Errorf("--listen-fd %d: %v is not a TCP listener", fd, ln.Addr())), ln.Close())
	}
	return ln, nil
}
