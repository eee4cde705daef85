// Package netlab makes a small network of "hosts" on one Linux machine for
// tests and benches: a network namespace per host, each with one address
// (10.213.S.H/24) on a veth pair to a bridge that it makes in the caller's
// namespace (the bridge holds .254, so the caller reaches every host as a
// client on another machine would), and faults on those links: a partition
// between two hosts (their packets to each other silently dropped, as a
// failed switch port does: routed through an address nobody answers for)
// and delay, jitter and loss on what a host sends (tc netem where the
// kernel has sch_netem, else a relay in this process through a TUN device
// in the host's namespace: relay.go). Heal removes every fault.
//
// Needs root and ip(8) and tc(8) (iproute2); New says why it cannot, and
// removes whatever it made, so that callers can fall back to loopback
// addresses. Only addresses inside the namespaces it makes are used.
//
// Names (namespaces, interfaces) carry the process ID, so that concurrent
// test processes do not collide; Close removes them all.
//
// Concurrency: a Net's methods are safe for concurrent use (one lock); the
// commands they run are bounded by CommandTimeout each. A relay runs two
// goroutines (read, release) from Delay until Heal or Close.
package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// Limits.
const (
	// CommandTimeout bounds each ip(8) or tc(8) command.
	CommandTimeout = 10 * time.Second
	// MaxHosts bounds a network (addresses .1 to .MaxHosts; .254 is the
	// bridge's).
	MaxHosts = 200
)

// Host is one namespace with its address.
type Host struct {
	Name string // the caller's name for it
	Addr string // its IPv4 address on the bridge
	NS   string // its network namespace
	dev  string // its end of the veth pair, inside NS
}

// Net is the bridge, the hosts, and the faults in force.
type Net struct {
	bridge, subnet string

	mu      sync.Mutex
	hosts   map[string]*Host
	order   []string
	made    []string           // namespaces made, for Close
	cut     map[[2]string]bool // partitioned pairs (sorted names)
	delayed map[string]netem   // per host
	relays  map[string]*relay  // per host: Delay's relay where the kernel has no netem
	closed  bool
}

type netem struct {
	delay, jitter time.Duration
	lossPercent   float64
}

// New makes a namespace per name on a new bridge; an error (and nothing
// left behind) when the machine does not allow it.
func New(names []string) (*Net, error) {
	if len(names) == 0 || len(names) > MaxHosts {
		return nil, fmt.Errorf("netlab: %d hosts: want 1..%d", len(names), MaxHosts)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("netlab: not root: network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("netlab: no %s(8) (Debian: apt-get install iproute2): %w", tool, err)
		}
	}
	tag := fmt.Sprintf("%x", os.Getpid()&0xffff) // interface names are at most 15 bytes
	n := &Net{
		bridge: "spnb" + tag, subnet: fmt.Sprintf("10.213.%d", os.Getpid()%250),
		hosts: map[string]*Host{}, cut: map[[2]string]bool{}, delayed: map[string]netem{}, relays: map[string]*relay{},
	}
	if err := n.setup(tag, names); err != nil {
		return nil, errors.Join(err, n.Close()) // what stays set up is said
	}
	return n, nil
}

func (n *Net) setup(tag string, names []string) error {
	for _, args := range [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		{"addr", "add", n.subnet + ".254/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	for i, name := range names {
		if _, dup := n.hosts[name]; dup {
			return fmt.Errorf("netlab: host %q named twice", name)
		}
		h := &Host{Name: name, Addr: fmt.Sprintf("%s.%d", n.subnet, i+1), NS: fmt.Sprintf("spn%s-%d", tag, i+1), dev: "eth0"}
		veth := fmt.Sprintf("spnv%s%d", tag, i+1)
		if err := run("ip", "netns", "add", h.NS); err != nil {
			return err
		}
		n.made = append(n.made, h.NS)
		for _, args := range [][]string{
			{"link", "add", veth, "type", "veth", "peer", "name", h.dev, "netns", h.NS},
			{"link", "set", veth, "master", n.bridge},
			{"link", "set", veth, "up"},
			{"-n", h.NS, "addr", "add", h.Addr + "/24", "dev", h.dev},
			{"-n", h.NS, "link", "set", h.dev, "up"},
			{"-n", h.NS, "link", "set", "lo", "up"},
			{"netns", "exec", h.NS, "true"}, // can processes run in it?
		} {
			if err := run("ip", args...); err != nil {
				return err
			}
		}
		n.hosts[name] = h
		n.order = append(n.order, name)
	}
	return nil
}

// Close removes the namespaces (and with them every process's network in
// them) and the bridge. It is idempotent.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []string
	for name, r := range n.relays {
		if err := r.stop(n.hosts[name]); err != nil {
			errs = append(errs, err.Error())
		}
	}
	clear(n.relays)
	for _, ns := range n.made {
		if err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if err := run("ip", "link", "del", n.bridge); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("netlab: close: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Host returns the host of that name (nil when there is none).
func (n *Net) Host(name string) *Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hosts[name]
}

// Addr is host name's address ("" when there is none).
func (n *Net) Addr(name string) string {
	if h := n.Host(name); h != nil {
		return h.Addr
	}
	return ""
}

// BridgeAddr is the caller's address on the bridge: what a process of the
// caller's namespace listens on to be reached from the hosts.
func (n *Net) BridgeAddr() string { return n.subnet + ".254" }

// Hosts lists the hosts in the order they were made.
func (n *Net) Hosts() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.order)
}

// Command runs argv on host name: in its namespace.
func (n *Net) Command(name string, argv []string) []string {
	h := n.Host(name)
	if h == nil {
		return argv
	}
	return append([]string{"ip", "netns", "exec", h.NS}, argv...)
}

// Partition drops every packet between hosts a and b, both ways, silently
// (connections hang and time out, as across a failed link: see
// blackholeHost); each keeps reaching the others.
func (n *Net) Partition(a, b string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hosts[a] == nil || n.hosts[b] == nil || a == b {
		return fmt.Errorf("netlab: partition %q from %q: want two hosts of this network", a, b)
	}
	n.cut[pair(a, b)] = true
	return n.applyLocked(a, b)
}

// Delay adds delay ± jitter and lossPercent packet loss to everything host
// name sends (its replies, and so every exchange with it, are delayed).
func (n *Net) Delay(name string, delay, jitter time.Duration, lossPercent float64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hosts[name] == nil {
		return fmt.Errorf("netlab: delay on %q: no such host", name)
	}
	if delay < 0 || jitter < 0 || lossPercent < 0 || lossPercent > 100 {
		return fmt.Errorf("netlab: delay %v ± %v, loss %v%%: want non-negative, loss ≤ 100", delay, jitter, lossPercent)
	}
	n.delayed[name] = netem{delay, jitter, lossPercent}
	return n.applyLocked(name)
}

// Heal removes every partition and delay.
func (n *Net) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
	clear(n.delayed)
	return n.applyLocked(n.order...)
}

// Faults describes the faults in force, for logs and reports.
func (n *Net) Faults() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var s []string
	for p := range n.cut {
		s = append(s, p[0]+"/"+p[1])
	}
	slices.Sort(s)
	var d []string
	for h, e := range n.delayed {
		how := "netem"
		if n.relays[h] != nil {
			how = "relay"
		}
		d = append(d, fmt.Sprintf("%s:%v±%v,%.1f%%(%s)", h, e.delay, e.jitter, e.lossPercent, how))
	}
	slices.Sort(d)
	return fmt.Sprintf("partitions [%s] delays [%s]", strings.Join(s, " "), strings.Join(d, " "))
}

// blackholeHost is the address on the bridge's subnet that nobody holds:
// a host routes a peer it is cut from through it, so its packets to that
// peer wait for an ARP answer that never comes and are dropped silently —
// a partition in which connections hang and time out, as across a failed
// link (tc filters would do the same, but not every kernel has the u32
// classifier or gact; routing is always there).
const blackholeHost = 253

// applyLocked rebuilds each named host's routes to its peers and its link's
// queueing from the faults in force.
func (n *Net) applyLocked(names ...string) error {
	for _, name := range names {
		h := n.hosts[name]
		if r := n.relays[name]; r != nil {
			delete(n.relays, name)
			if err := r.stop(h); err != nil {
				return err
			}
		}
		cutFrom := map[string]bool{}
		for p := range n.cut {
			if p[0] == name {
				cutFrom[p[1]] = true
			} else if p[1] == name {
				cutFrom[p[0]] = true
			}
		}
		for _, peer := range n.order {
			if peer == name {
				continue
			}
			// Start from no route of ours: deleting a missing one fails harmlessly.
			_ = run("ip", "-n", h.NS, "route", "del", n.hosts[peer].Addr+"/32")
			if cutFrom[peer] {
				if err := run("ip", "-n", h.NS, "route", "add", n.hosts[peer].Addr+"/32",
					"via", fmt.Sprintf("%s.%d", n.subnet, blackholeHost), "dev", h.dev); err != nil {
					return err
				}
			}
		}
		_ = run("ip", "netns", "exec", h.NS, "tc", "qdisc", "del", "dev", h.dev, "root") // none there: fails harmlessly
		e, delayed := n.delayed[name]
		if !delayed {
			continue
		}
		args := []string{"netns", "exec", h.NS, "tc", "qdisc", "add", "dev", h.dev, "root", "netem",
			"delay", fmt.Sprintf("%dus", e.delay.Microseconds())}
		if e.jitter > 0 {
			args = append(args, fmt.Sprintf("%dus", e.jitter.Microseconds()))
		}
		if e.lossPercent > 0 {
			args = append(args, "loss", fmt.Sprintf("%g%%", e.lossPercent))
		}
		err := run("ip", args...)
		if err != nil && strings.Contains(err.Error(), "unknown") {
			// No sch_netem in this kernel: the relay does it in this
			// process, for every peer the host is not cut from and the
			// bridge.
			dsts := []string{n.BridgeAddr()}
			for _, peer := range n.order {
				if peer != name && !cutFrom[peer] {
					dsts = append(dsts, n.hosts[peer].Addr)
				}
			}
			var r *relay
			if r, err = n.startRelay(h, e, dsts); err == nil {
				n.relays[name] = r
			}
		}
		if err != nil {
			delete(n.delayed, name)
			return err
		}
	}
	return nil
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// run runs a command, bounded by CommandTimeout; its output in the error.
func run(name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netlab: %s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
