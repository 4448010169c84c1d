package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"idemshop/internal/lab"
)

const rssTargetMiB = 64

// rssSampler samples the resident memory of each process every 250 ms while the measures run: the
// services' process_resident_memory_bytes from their /metrics, and this process's VmRSS.
type rssSampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	stats  map[string]*RSS
}

func startRSS(ctx context.Context, env *lab.Env, processes map[string]string) *rssSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &rssSampler{cancel: cancel, done: make(chan struct{}), stats: map[string]*RSS{}}
	names := []string{"loadtest"}
	s.stats["loadtest"] = &RSS{Process: "loadtest"}
	for name, u := range processes {
		if checkLoopback(u) != nil {
			s.stats[name] = &RSS{Process: name, Error: "not sampled: not a loopback URL"}
			continue
		}
		s.stats[name] = &RSS{Process: name}
		names = append(names, name)
	}
	client := &http.Client{Timeout: time.Second}
	sampleOnce := func() {
		for _, name := range names {
			var mib float64
			var err error
			if name == "loadtest" {
				mib, err = selfRSS()
			} else {
				mib, err = metricsRSS(ctx, client, processes[name])
			}
			s.mu.Lock()
			st := s.stats[name]
			if err != nil {
				st.Error = err.Error()
			} else {
				st.Error = ""
				st.Samples++
				st.LastMiB = round(mib)
				st.MaxMiB = max(st.MaxMiB, round(mib))
			}
			s.mu.Unlock()
		}
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			sampleOnce()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) stop() []RSS {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RSS, 0, len(s.stats))
	for _, st := range s.stats {
		st.TargetOK = st.Samples > 0 && st.MaxMiB < rssTargetMiB
		if st.Samples > 0 {
			st.Error = "" // a late failure (e.g. the process stopping) does not void the samples
		}
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Process < out[j].Process })
	return out
}

// metricsRSS reads process_resident_memory_bytes from a Prometheus text endpoint, in MiB.
func metricsRSS(ctx context.Context, c *http.Client, url string) (float64, error) {
	b, err := metricsValue(ctx, c, url, "process_resident_memory_bytes")
	return b / (1 << 20), err
}

// selfRSS reads this process's VmRSS (Linux).
func selfRSS() (float64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/self/status")
}
