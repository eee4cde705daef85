package netlab

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The delay relay is Delay where the kernel has no sch_netem: a TUN device
// in the host's namespace takes everything the host sends to the subnet
// (a /32 route per peer and one for the bridge's address), this process
// holds each packet for delay ± jitter (or drops it, lossPercent of them)
// and writes it back into the TUN device, where the host's kernel forwards
// it out of its veth as it would have sent it:
//
//	host's socket ──route /32 dev spnt──▶ TUN ──▶ relay (hold, drop)
//	                                              │
//	veth ◀── ip rule: from the TUN, table relayTable (subnet dev eth0) ◀──┘
//
// The host's namespace forwards (ip_forward=1), accepts packets from the
// TUN with its own source address (accept_local=1, rp_filter=0), and a
// policy rule sends what comes out of the TUN by a table in which the
// subnet is on the veth, so that a released packet does not loop back into
// the relay. Replies to the host are not delayed (as with netem on the
// host's egress). Costs a user-space round trip per packet: a fault
// injector, not a WAN emulator.

// Limits of the relay.
const (
	// relayQueuePackets bounds the packets held (netem's default limit is
	// 1,000; a relay holds a whole chaos run's window): beyond it,
	// packets are dropped, as a full queue would.
	relayQueuePackets = 20000
	// relayPacketBytes is the largest packet read (the TUN's MTU is the
	// veth's, 1,500; the buffer takes any IPv4 packet).
	relayPacketBytes = 65535
	// relayTable and relayRulePref are the policy routing of released
	// packets in the host's namespace.
	relayTable    = "213"
	relayRulePref = "213"
	relayDev      = "spnt"
)

// relay is one host's delay relay.
type relay struct {
	tun     *os.File
	delay   time.Duration
	jitter  time.Duration
	loss    float64 // 0..1
	rng     *rand.Rand
	mu      sync.Mutex
	queue   packetHeap
	wake    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	dropped int64 // by loss or a full queue
}

type heldPacket struct {
	due  time.Time
	seq  uint64 // FIFO among equal due times
	data []byte
}

type packetHeap []heldPacket

func (h packetHeap) Len() int { return len(h) }
func (h packetHeap) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].seq < h[j].seq
	}
	return h[i].due.Before(h[j].due)
}
func (h packetHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *packetHeap) Push(x any)   { *h = append(*h, x.(heldPacket)) }
func (h *packetHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// makeTUN creates TUN device name in the calling thread's network
// namespace; -1 and the error when it cannot.
func makeTUN(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req [unix.IFNAMSIZ + 64]byte // struct ifreq
	copy(req[:unix.IFNAMSIZ-1], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
		_ = unix.Close(fd) // TUNSETIFF's error is the one
		return -1, fmt.Errorf("TUNSETIFF %s: %w", name, errno)
	}
	return fd, nil
}

// openTUN creates TUN device name in network namespace ns (by its path
// under /run/netns) and returns it, non-blocking (Go's poller serves it).
// The device lives as long as the file: closing it removes the device.
func openTUN(ns, name string) (*os.File, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// setns applies to this thread only: lock it, switch, make the
		// device, and switch back before unlocking. The thread must not
		// die in the other namespace either: a thread that exits takes
		// the children it forked with Pdeathsig (datanodes, test servers)
		// with it — the runtime ends a goroutine's locked thread.
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, err}
			return
		}
		defer func() { _ = home.Close() }() // a namespace handle, only read
		nsf, err := os.Open("/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, err}
			return
		}
		defer func() { _ = nsf.Close() }() // likewise
		if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		fd, err := makeTUN(name)
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			// Stuck in the other namespace: keep the thread locked, so
			// that no other goroutine runs there; it ends with this one.
			if fd >= 0 {
				_ = unix.Close(fd) // the setns error is the one
			}
			ch <- result{-1, fmt.Errorf("setns back from %s: %w", ns, err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	if err := unix.SetNonblock(r.fd, true); err != nil {
		_ = unix.Close(r.fd) // SetNonblock's error is the one
		return nil, err
	}
	return os.NewFile(uintptr(r.fd), "tun:"+ns+"/"+name), nil
}

// startRelay sets up host h's relay: the TUN, the namespace's forwarding,
// the policy rule, and routes to every address in dsts through the TUN.
func (n *Net) startRelay(h *Host, e netem, dsts []string) (*relay, error) {
	tun, err := openTUN(h.NS, relayDev)
	if err != nil {
		return nil, fmt.Errorf("netlab: delay relay on %s: %w", h.Name, err)
	}
	r := &relay{tun: tun, delay: e.delay, jitter: e.jitter, loss: e.lossPercent / 100,
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x7e1a)), wake: make(chan struct{}, 1), done: make(chan struct{})}
	setup := [][]string{
		{"ip", "-n", h.NS, "link", "set", relayDev, "up"},
		{"ip", "netns", "exec", h.NS, "sh", "-c", "echo 1 >/proc/sys/net/ipv4/ip_forward && " +
			"echo 0 >/proc/sys/net/ipv4/conf/all/rp_filter && " +
			"echo 0 >/proc/sys/net/ipv4/conf/" + relayDev + "/rp_filter && " +
			"echo 1 >/proc/sys/net/ipv4/conf/" + relayDev + "/accept_local && " +
			"echo 0 >/proc/sys/net/ipv4/conf/all/send_redirects"},
		{"ip", "-n", h.NS, "rule", "add", "iif", relayDev, "lookup", relayTable, "pref", relayRulePref},
		{"ip", "-n", h.NS, "route", "add", n.subnet + ".0/24", "dev", h.dev, "table", relayTable},
	}
	for _, d := range dsts {
		setup = append(setup, []string{"ip", "-n", h.NS, "route", "replace", d + "/32", "dev", relayDev})
	}
	for _, c := range setup {
		if err := run(c[0], c[1:]...); err != nil {
			return nil, errors.Join(err, r.stop(h)) // what stays set up is said
		}
	}
	r.wg.Add(2)
	go r.read()
	go r.release()
	return r, nil
}

// read takes the host's packets off the TUN into the queue until the TUN
// is closed.
func (r *relay) read() {
	defer r.wg.Done()
	buf := make([]byte, relayPacketBytes)
	var seq uint64
	for {
		m, err := r.tun.Read(buf)
		if err != nil {
			return // closed
		}
		r.mu.Lock()
		if r.rng.Float64() < r.loss || len(r.queue) >= relayQueuePackets {
			r.dropped++
			r.mu.Unlock()
			continue
		}
		d := r.delay
		if r.jitter > 0 {
			d += time.Duration(r.rng.Int64N(int64(2*r.jitter)+1)) - r.jitter
		}
		seq++
		heap.Push(&r.queue, heldPacket{due: time.Now().Add(max(d, 0)), seq: seq, data: append([]byte(nil), buf[:m]...)})
		r.mu.Unlock()
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// release writes each held packet back into the TUN when it is due.
func (r *relay) release() {
	defer r.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		r.mu.Lock()
		var wait time.Duration = time.Hour
		for len(r.queue) > 0 {
			if w := time.Until(r.queue[0].due); w > 0 {
				wait = w
				break
			}
			p := heap.Pop(&r.queue).(heldPacket)
			r.mu.Unlock()
			_, _ = r.tun.Write(p.data) // a packet the kernel refuses is lost, as on a wire
			r.mu.Lock()
		}
		r.mu.Unlock()
		t.Reset(wait)
		select {
		case <-r.done:
			return
		case <-r.wake:
		case <-t.C:
		}
	}
}

// stop removes the relay: the rule, the table's route, the TUN (and with
// it the routes through it); held packets are dropped, as a qdisc's are
// when it is removed.
func (r *relay) stop(h *Host) error {
	var errs []error
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	if err := r.tun.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		errs = append(errs, err)
	}
	r.wg.Wait()
	// Missing ones (a setup that failed halfway) fail harmlessly.
	_ = run("ip", "-n", h.NS, "rule", "del", "pref", relayRulePref)
	_ = run("ip", "-n", h.NS, "route", "flush", "table", relayTable)
	return errors.Join(errs...)
}
