package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files of deploy/ that docs/OPERATIONS.md installs are read as the
// systemd units read them (--config FILE, the environment file) and give
// the flags the documentation says: a renamed flag or a typo in them fails
// here, not on an operator's host.
func TestDeployConfigs(t *testing.T) {
	deploy := filepath.Join("..", "..", "deploy")
	env := map[string]string{}
	f, err := os.Open(filepath.Join(deploy, "datanode.env"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("datanode.env: %q is not NAME=VALUE", line)
		}
		env[k] = v
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, c := range []struct {
		file, command string
		envFile       bool
		want          map[string]string
	}{
		{"meta.json", "meta", false, map[string]string{"listen": "10.0.0.1:9860", "dir": "/var/lib/spindle/meta", "log-level": "info",
			"tls-cert": "/etc/spindle/tls/node.crt", "tls-key": "/etc/spindle/tls/node.key", "tls-ca": "/etc/spindle/tls/ca.crt"}},
		{"datanode.json", "datanode", true, map[string]string{"meta": "10.0.0.1:9860", "data-dir": "[/srv/spindle/disk1,/srv/spindle/disk2]",
			"log-dir": "/srv/spindle/log", "listen": "10.0.0.2:9870", "metrics-listen": "10.0.0.2:9871",
			"tls-cert": "/etc/spindle/tls/node.crt", "tls-key": "/etc/spindle/tls/node.key", "tls-ca": "/etc/spindle/tls/ca.crt"}},
	} {
		root := newRootCmd()
		cmd, _, err := root.Find([]string{c.command})
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags([]string{"--config", filepath.Join(deploy, c.file)}); err != nil {
			t.Fatal(err)
		}
		noEnv := func(string) (string, bool) { return "", false }
		look := noEnv
		if c.envFile {
			look = lookup
		}
		if _, err := applyConfig(cmd, look); err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		for name, want := range c.want {
			fl := cmd.Flags().Lookup(name)
			if fl == nil {
				t.Errorf("%s: spindle %s has no --%s", c.file, c.command, name)
			} else if got := fl.Value.String(); got != want {
				t.Errorf("%s: --%s = %q, want %q", c.file, name, got, want)
			}
		}
	}
	for _, unit := range []string{"spindle-meta.service", "spindle-datanode.service"} {
		b, err := os.ReadFile(filepath.Join(deploy, unit))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "ExecStart=/usr/local/bin/spindle ") || !strings.Contains(string(b), "--config /etc/spindle/") {
			t.Errorf("%s: no ExecStart of spindle with a config file", unit)
		}
	}
}
