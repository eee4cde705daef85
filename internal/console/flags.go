package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/pflag"
)

// Options are a server's console settings (its flags: AddFlags).
type Options struct {
	// Listen is the console's HTTPS address (DefaultListen; Off: none).
	Listen string
	// Reports is the directory of `spindle report` runs it shows.
	Reports string
}

// AddFlags adds --console-listen and --console-reports to f.
func AddFlags(f *pflag.FlagSet, o *Options) {
	f.StringVar(&o.Listen, "console-listen", DefaultListen, `HTTPS address of the web console at /ui/ (sign in with an S3 access key and secret; "off": none)`)
	f.StringVar(&o.Reports, "console-reports", "reports", "directory of report run directories (spindle report run --out) the console shows")
}

// scrapeBytes bounds one /metrics answer.
const scrapeBytes = 16 << 20

// HTTPScrape is a Config.Scrape reading metaURLs (the meta members'
// /metrics) and the /metrics of every datanode cluster lists that is not
// DEAD, with hc, each within perTarget. Targets that fail are left out
// (their counters start again at their next answer).
func HTTPScrape(hc *http.Client, cluster Cluster, metaURLs []string, perTarget time.Duration) func(ctx context.Context) ([]Scrape, error) {
	return func(ctx context.Context) ([]Scrape, error) {
		urls := append([]string(nil), metaURLs...)
		nodes, err := cluster.Nodes(ctx)
		for _, n := range nodes {
			if n.MetricsURL != "" && n.Health != "DEAD" {
				urls = append(urls, n.MetricsURL)
			}
		}
		type answer struct {
			s   Scrape
			err error
		}
		ch := make(chan answer, len(urls))
		for _, u := range urls {
			go func() {
				tctx, cancel := context.WithTimeout(ctx, perTarget)
				defer cancel()
				b, err := fetchMetrics(tctx, hc, u)
				ch <- answer{Scrape{Source: u, Text: b}, err}
			}()
		}
		var out []Scrape
		for range urls {
			a := <-ch
			if a.err != nil {
				err = errors.Join(err, a.err)
				continue
			}
			out = append(out, a.s)
		}
		return out, err
	}
}

func fetchMetrics(ctx context.Context, hc *http.Client, url string) (b []byte, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, resp.Body.Close()) }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return io.ReadAll(io.LimitReader(resp.Body, scrapeBytes))
}
