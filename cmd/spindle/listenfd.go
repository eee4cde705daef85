package main

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/spindle-store/spindle/internal/cli"
)

// listenFDHelp is the help of --listen-fd (datanode, meta).
const listenFDHelp = "serve on this inherited listening socket (descriptor N ≥ 3, e.g. exec.Cmd.ExtraFiles) instead of binding --listen: a parent that must know the address before this process starts binds port 0 and hands the socket over, so no port is picked and lost in between"

// inheritedListener is the listening socket at descriptor fd (--listen-fd),
// or nil when fd is 0.
func inheritedListener(fd int) (net.Listener, error) {
	if fd == 0 {
		return nil, nil
	}
	if fd < 3 {
		return nil, cli.UsageErr(fmt.Errorf("--listen-fd %d: want a descriptor ≥ 3", fd))
	}
	f := os.NewFile(uintptr(fd), "listen-fd")
	ln, err := net.FileListener(f) // a dup of fd, closed just below
	if err = errors.Join(err, f.Close()); err != nil {
		return nil, cli.UsageErr(fmt.Errorf("--listen-fd %d: %w", fd, err))
	}
	return ln, nil
}
