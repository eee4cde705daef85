package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Flag value resolution, run by the root command's PersistentPreRunE for the
// command being executed. For every flag not given on the command line:
//
//  1. the environment variable SPINDLE_<NAME> (NAME upper case, dashes as
//     underscores: --chunk-size -> SPINDLE_CHUNK_SIZE) when set;
//  2. otherwise the config file (--config FILE, or SPINDLE_CONFIG), a JSON
//     object whose keys are command paths without the leading "spindle" and
//     whose values map flag names to values:
//
//     {
//     "":                  {"log-level": "debug"},
//     "bench":             {"duration": "30s"},
//     "bench chunk-write": {"chunk-size": "1MiB", "clients": 16}
//     }
//
//     The most specific section wins ("bench chunk-write" over "bench" over
//     ""). Values are strings, numbers, booleans, or lists for list flags.
//     $NAME and ${NAME} in a string are the environment variable NAME (a
//     host's values in deploy/'s files); an unset one is an error.
//  3. otherwise the flag's default.
//
// Unknown sections and unknown flags are errors (they are typos); a flag in
// a parent section must exist in at least one command below it. cobra's
// built-in --help and --version are never taken from the environment or the
// file (an unrelated SPINDLE_VERSION must not break the command line).

const (
	configFlag     = "config"
	envPrefix      = "SPINDLE_"
	maxConfigBytes = 1 << 20
)

// builtinFlags are cobra's own flags, resolved from the command line only.
var builtinFlags = map[string]bool{"help": true, "version": true}

// flagSource records where a flag's value came from (logged at debug level).
type flagSource struct{ flag, value, from string }

// envName is the environment variable for a flag: chunk-size -> SPINDLE_CHUNK_SIZE.
func envName(f string) string { return envPrefix + strings.ToUpper(strings.ReplaceAll(f, "-", "_")) }

// configFile maps a command path ("" for the root) to flag name -> raw value.
type configFile map[string]map[string]any

// applyConfig fills the flags of cmd that were not set on the command line
// from the environment, then from the config file.
func applyConfig(cmd *cobra.Command, lookupEnv func(string) (string, bool)) ([]flagSource, error) {
	fs := cmd.Flags()
	var sources []flagSource
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || builtinFlags[f.Name] {
			return
		}
		v, ok := lookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("environment %s=%q: %w", envName(f.Name), v, err))
			return
		}
		sources = append(sources, flagSource{f.Name, v, "env " + envName(f.Name)})
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	cf := fs.Lookup(configFlag)
	if cf == nil || cf.Value.String() == "" {
		return sources, nil
	}
	path := cf.Value.String()
	file, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	if err := file.validate(cmd.Root()); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	sections := sectionsFor(cmd)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || builtinFlags[f.Name] || f.Name == configFlag {
			return
		}
		for _, sec := range sections {
			raw, ok := file[sec][f.Name]
			if !ok {
				continue
			}
			v, err := setFromConfig(fs, f, raw, lookupEnv)
			if err != nil {
				errs = append(errs, fmt.Errorf("config %s: [%s] %s: %w", path, sec, f.Name, err))
			} else {
				sources = append(sources, flagSource{f.Name, v, fmt.Sprintf("config %s [%s]", path, sec)})
			}
			return
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return sources, nil
}

// loadConfig reads and parses a config file.
func loadConfig(path string) (configFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer closeQuietly(f) // read-only
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("config %s: larger than %d bytes", path, maxConfigBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw map[string]map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("config %s: want a JSON object of {\"command path\": {\"flag\": value}}: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("config %s: trailing data after the JSON object", path)
	}
	file := make(configFile, len(raw))
	for key, flags := range raw {
		norm := normalizeSection(key)
		if _, dup := file[norm]; dup {
			return nil, fmt.Errorf("config %s: sections %q and another both name command %q", path, key, norm)
		}
		file[norm] = flags
	}
	return file, nil
}

// normalizeSection turns "spindle  bench chunk-write" into "bench chunk-write".
func normalizeSection(key string) string {
	words := strings.Fields(key)
	if len(words) > 0 && words[0] == "spindle" {
		words = words[1:]
	}
	return strings.Join(words, " ")
}

// relPath is cmd's path below the root: "bench chunk-write"; "" for the root.
func relPath(cmd *cobra.Command) string {
	var words []string
	for c := cmd; c.HasParent(); c = c.Parent() {
		words = append(words, c.Name())
	}
	slices.Reverse(words)
	return strings.Join(words, " ")
}

// sectionsFor lists the sections applying to cmd, most specific first.
func sectionsFor(cmd *cobra.Command) []string {
	var secs []string
	for c := cmd; c != nil; c = c.Parent() {
		secs = append(secs, relPath(c))
	}
	return secs
}

// validate rejects sections naming no command and flags that no command in
// the section's subtree has.
func (file configFile) validate(root *cobra.Command) error {
	var errs []error
	for _, sec := range slices.Sorted(maps.Keys(file)) {
		c := findCommand(root, sec)
		if c == nil {
			errs = append(errs, fmt.Errorf("section %q names no spindle command", sec))
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(file[sec])) {
			if name == configFlag {
				errs = append(errs, fmt.Errorf("[%s] %s: the config file cannot name another config file", sec, name))
			} else if builtinFlags[name] {
				errs = append(errs, fmt.Errorf("[%s] %s: a built-in flag, taken from the command line only", sec, name))
			} else if !subtreeHasFlag(c, name) {
				errs = append(errs, fmt.Errorf("[%s] %s: no such flag", sec, name))
			}
		}
	}
	return errors.Join(errs...)
}

func findCommand(root *cobra.Command, sec string) *cobra.Command {
	c, rest, err := root.Find(strings.Fields(sec)) // rest: the words naming no command below c
	if err != nil || len(rest) > 0 {
		return nil
	}
	return c
}

// subtreeHasFlag reports whether c or a command below it has the flag.
// The depth of the command tree bounds the recursion.
func subtreeHasFlag(c *cobra.Command, name string) bool {
	return c.Flags().Lookup(name) != nil || c.InheritedFlags().Lookup(name) != nil ||
		slices.ContainsFunc(c.Commands(), func(sub *cobra.Command) bool { return subtreeHasFlag(sub, name) })
}

// setFromConfig sets flag f from a decoded JSON value and returns the value
// as text.
func setFromConfig(fs *pflag.FlagSet, f *pflag.Flag, raw any, lookupEnv func(string) (string, bool)) (string, error) {
	if list, ok := raw.([]any); ok {
		sv, ok := f.Value.(pflag.SliceValue)
		if !ok {
			return "", fmt.Errorf("a list given for a flag that takes one value")
		}
		vals := make([]string, 0, len(list))
		for _, e := range list {
			s, err := scalarText(e, lookupEnv)
			if err != nil {
				return "", err
			}
			vals = append(vals, s)
		}
		if err := sv.Replace(vals); err != nil {
			return "", err
		}
		f.Changed = true
		return strings.Join(vals, ","), nil
	}
	s, err := scalarText(raw, lookupEnv)
	if err != nil {
		return "", err
	}
	return s, fs.Set(f.Name, s)
}

func scalarText(v any, lookupEnv func(string) (string, bool)) (string, error) {
	switch x := v.(type) {
	case string:
		var unset []string
		s := os.Expand(x, func(name string) string {
			v, ok := lookupEnv(name)
			if !ok {
				unset = append(unset, "$"+name)
			}
			return v
		})
		if unset != nil {
			return "", fmt.Errorf("%q: %s not set in the environment", x, strings.Join(unset, ", "))
		}
		return s, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	default:
		return "", fmt.Errorf("value %v: want a string, number, boolean or list", v)
	}
}
