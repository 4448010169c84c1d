package bench

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// attack runs tr with vegeta for at most dur, with conc workers and an unlimited rate: a closed loop,
// each worker sends its next request when its last one is answered, so the figure is the path's
// throughput at that concurrency. The targeter bounds the request count (vegeta.ErrNoTargets ends
// the attack early). check, if set, sees every answer; an error from it counts as a failed request.
func attack(ctx context.Context, name string, tr vegeta.Targeter, conc int, dur, timeout time.Duration,
	check func(*vegeta.Result) error) *sample {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc, IdleConnTimeout: 30 * time.Second,
	}}
	defer client.CloseIdleConnections()
	atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.Workers(uint64(conc)), vegeta.MaxWorkers(uint64(conc)),
		vegeta.MaxBody(64<<10))
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	s := newSample()
	start := time.Now()
	var last time.Time
	for res := range atk.Attack(tr, vegeta.Rate{Freq: 0}, dur, name) {
		if res.Error == vegeta.ErrNoTargets.Error() {
			continue // the targeter's bound, not a request
		}
		var err error
		if res.Error != "" {
			err = errors.New(res.Error)
		} else if check != nil {
			err = check(res)
		}
		if end := res.End(); end.After(last) {
			last = end
		}
		s.add(res.Latency, int(res.Code), err)
	}
	if last.IsZero() {
		last = time.Now()
	}
	s.elapsed = last.Sub(start)
	return s
}

// counter hands out 0, 1, 2, ... up to limit (exclusive), to targeters called by many workers.
type counter struct {
	n     atomic.Int64
	limit int64
}

func (c *counter) next() (int64, bool) {
	i := c.n.Add(1) - 1
	return i, i < c.limit
}

// issued is how many numbers were handed out within the limit.
func (c *counter) issued() int64 { return min(c.n.Load(), c.limit) }

// closedLoop runs fn with conc workers until dur has passed or fn has run limit times, and records
// each call's latency. fn gets the call's number.
func closedLoop(ctx context.Context, conc int, dur time.Duration, c *counter, fn func(ctx context.Context, i int64) error) *sample {
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	type obs struct {
		lat time.Duration
		err error
	}
	out := make(chan obs, conc*4)
	done := make(chan struct{})
	s := newSample()
	go func() {
		for o := range out {
			s.add(o.lat, 0, o.err)
		}
		close(done)
	}()
	start := time.Now()
	finished := make(chan struct{}, conc)
	for range conc {
		go func() {
			defer func() { finished <- struct{}{} }()
			for ctx.Err() == nil {
				i, ok := c.next()
				if !ok {
					return
				}
				t := time.Now()
				// The call itself is not cut by the measure's deadline: a half-run transaction
				// would only be an error that the path under test did not cause.
				err := fn(context.WithoutCancel(ctx), i)
				out <- obs{time.Since(t), err}
			}
		}()
	}
	for range conc {
		<-finished
	}
	s.elapsed = time.Since(start)
	close(out)
	<-done
	return s
}
