package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// answer is one HTTP answer; status 0 means no answer (connection refused, reset, timeout).
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// code is the problem code of an error answer ("" if none).
func (a answer) code() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(a.body, &p)
	return p.Code
}

// retryAfter is the Retry-After of the answer, capped at max (0 when absent).
func (a answer) retryAfter(maxWait time.Duration) time.Duration {
	if a.header == nil {
		return 0
	}
	var s int
	if _, err := fmt.Sscan(a.header.Get("Retry-After"), &s); err != nil || s < 0 {
		return 0
	}
	return min(time.Duration(s)*time.Second, maxWait)
}

func newHTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		MaxIdleConns: 64, MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second,
	}}
}

// do sends one request; headers are name, value pairs.
func do(ctx context.Context, c *http.Client, method, url string, body []byte, headers ...string) answer {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return answer{err: err}
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}
