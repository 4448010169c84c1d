package ordersapp_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/testenv"
)

func TestListProducts(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})

	r := rp.call(http.MethodGet, "/v1/products", alice, "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	var ps []struct {
		ID         int64  `json:"id"`
		SKU        string `json:"sku"`
		Name       string `json:"name"`
		PriceCents int64  `json:"price_cents"`
		Currency   string `json:"currency"`
		Stock      int64  `json:"stock"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &ps))
	require.Len(t, ps, 4)
	assert.EqualValues(t, 1, ps[0].ID)
	assert.EqualValues(t, 100, ps[0].Stock)
	assert.EqualValues(t, 10, ps[1].Stock, "product 2 is the flash-sale item")
	for _, p := range ps {
		assert.NotEqual(t, int64(13), p.PriceCents%100, "no seeded price ends in 13 cents (payments-mock declines those)")
	}
}

func TestGetOrder(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	created := rp.createOrder(alice, "get-1", `{"product_id":3,"quantity":1}`)
	require.Equal(t, http.StatusCreated, created.Status)
	id := orderID(t, created)

	own := rp.call(http.MethodGet, fmt.Sprintf("/v1/orders/%d", id), alice, "", nil)
	require.Equal(t, http.StatusOK, own.Status)
	var want, got map[string]any
	require.NoError(t, json.Unmarshal(created.Body, &want))
	require.NoError(t, json.Unmarshal(own.Body, &got))
	assert.Equal(t, map[string]any{"received": 0.0, "applied": 0.0}, got["callbacks"])
	assert.Equal(t, 0.0, got["refunded_cents"])
	delete(got, "callbacks")
	delete(got, "refunded_cents")
	assert.Equal(t, want, got, "GET shows the order exactly as created")

	// HEAD answers as GET does, without the body (it was 404: Echo routes HEAD only where a route names it).
	head := rp.call(http.MethodHead, fmt.Sprintf("/v1/orders/%d", id), alice, "", nil)
	assert.Equal(t, http.StatusOK, head.Status)
	assert.Equal(t, own.Header.Get("Content-Type"), head.Header.Get("Content-Type"))
	assert.Empty(t, head.Body)
	assert.Equal(t, http.StatusNotFound, rp.call(http.MethodHead, fmt.Sprintf("/v1/orders/%d", id), bob, "", nil).Status)
	assert.Equal(t, http.StatusUnauthorized, rp.call(http.MethodHead, fmt.Sprintf("/v1/orders/%d", id), "", "", nil).Status)

	for name, tc := range map[string]struct{ path, token string }{
		"another user's order": {fmt.Sprintf("/v1/orders/%d", id), bob},
		"no such order":        {"/v1/orders/999999", alice},
		"not a number":         {"/v1/orders/abc", alice},
		"leading zero":         {fmt.Sprintf("/v1/orders/0%d", id), alice},
		"plus sign":            {fmt.Sprintf("/v1/orders/+%d", id), alice},
	} {
		r := rp.call(http.MethodGet, tc.path, tc.token, "", nil)
		assert.Equal(t, http.StatusNotFound, r.Status, name)
		assert.Equal(t, "order_not_found", r.problem(t).Code, name)
	}
}

// Bad input gets a documented problem response and writes nothing.
func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	huge := []byte(`{"product_id":1,"quantity":1,"pad":"` + strings.Repeat("x", 2<<20) + `"}`)

	cases := []struct {
		name   string
		token  string
		body   []byte
		status int
		code   string
	}{
		{"malformed JSON", alice, []byte(`{"product_id":1,"quantity":`), 400, "malformed_body"},
		{"not an object", alice, []byte(`[1,2]`), 400, "malformed_body"},
		{"null", alice, []byte(`null`), 400, "malformed_body"},
		{"unknown field", alice, []byte(`{"product_id":1,"quantity":1,"discount":100}`), 400, "malformed_body"},
		{"wrong type", alice, []byte(`{"product_id":"1","quantity":1}`), 400, "malformed_body"},
		{"wrongly cased field", alice, []byte(`{"PRODUCT_ID":1,"quantity":1}`), 400, "malformed_body"},
		{"duplicate field", alice, []byte(`{"product_id":1,"quantity":1,"quantity":2}`), 400, "malformed_body"},
		{"empty body", alice, []byte(``), 400, "malformed_body"},
		{"quantity 0", alice, []byte(`{"product_id":1,"quantity":0}`), 400, "validation_failed"},
		{"quantity 11", alice, []byte(`{"product_id":1,"quantity":11}`), 400, "validation_failed"},
		{"quantity -1", alice, []byte(`{"product_id":1,"quantity":-1}`), 400, "validation_failed"},
		{"missing product", alice, []byte(`{"quantity":1}`), 400, "validation_failed"},
		{"product null", alice, []byte(`{"product_id":null,"quantity":1}`), 400, "malformed_body"},
		{"unknown product", alice, []byte(`{"product_id":424242,"quantity":1}`), 400, "unknown_product"},
		{"2 MiB body", alice, huge, 413, "body_too_large"},
		{"no token", "", []byte(mugOrder), 401, "unauthorized"},
		{"unknown token", "mallory-token", []byte(mugOrder), 401, "unauthorized"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rp.call(http.MethodPost, "/v1/orders", tc.token, fmt.Sprintf("bad-%d", i), tc.body)
			assert.Equal(t, tc.status, r.Status, "%s", r.Body)
			p := r.problem(t)
			assert.Equal(t, tc.code, p.Code)
			assert.Equal(t, "about:blank", p.Type)
			assert.NotEmpty(t, p.Title)
			assert.NotEmpty(t, p.Detail)
			if tc.status == 401 {
				assert.Contains(t, r.Header.Get("WWW-Authenticate"), "Bearer")
			}
		})
	}
	assert.Zero(t, count(t, env.DB, "orders"))
	assert.Zero(t, count(t, env.DB, "idempotency_keys"))
}

// A body over the limit without a Content-Length (chunked) is cut off while reading, not trusted.
func TestChunkedOversizeBodyIs413(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	body := strings.NewReader(`{"product_id":1,"quantity":1,"pad":"` + strings.Repeat("x", 2<<20) + `"}`)
	req, err := http.NewRequest(http.MethodPost, rp.srv.URL+"/v1/orders", struct{ *strings.Reader }{body})
	require.NoError(t, err)
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+alice)
	req.Header.Set("Idempotency-Key", "chunked-1")
	resp, err := rp.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, buf.String())
	assert.Zero(t, count(t, env.DB, "idempotency_keys"))
}

// A body that ends before its Content-Length is the client's fault: 400, not 500, and nothing written.
func TestTruncatedBodyIs400(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(rp.srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Idempotency-Key: trunc-1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"product_id\":1", alice)
	require.NoError(t, err)
	require.NoError(t, conn.(*net.TCPConn).CloseWrite())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	assert.Contains(t, string(b), `"code":"body_unreadable"`)
	assert.Zero(t, count(t, env.DB, "idempotency_keys"))
}
