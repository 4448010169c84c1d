package points_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/auth"
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
)

func TestLedgerApply(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	l, err := points.NewLedger(env.DB)
	require.NoError(t, err)
	ctx := context.Background()
	c := func(order, user, delta int64) points.Credit {
		return points.Credit{BizID: points.BizIDOrderPaid(order), UserID: user, Delta: delta, Reason: points.ReasonOrderPaid}
	}

	applied, err := l.Apply(ctx, []points.Credit{c(1, 1, 10), c(2, 1, 5), c(1, 1, 10), c(3, 2, 7)})
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"order-paid:1": true, "order-paid:2": true, "order-paid:3": true}, applied,
		"a biz_id twice in one batch is applied once")
	assert.Equal(t, ledgerState{Rows: 3, Distinct: 3, Sum: 22, Balances: 22}, state(t, env))

	applied, err = l.Apply(ctx, []points.Credit{c(2, 1, 5), c(4, 1, 1)})
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"order-paid:4": true}, applied, "the existing biz_id inserts nothing")
	assert.Equal(t, ledgerState{Rows: 4, Distinct: 4, Sum: 23, Balances: 23}, state(t, env))

	_, err = l.Apply(ctx, []points.Credit{c(5, 1, 1), c(6, 999, 1)})
	require.ErrorIs(t, err, points.ErrRejected, "an unknown user is the data's fault")
	assert.Equal(t, ledgerState{Rows: 4, Distinct: 4, Sum: 23, Balances: 23}, state(t, env), "the whole batch rolled back")

	balance, entries, err := l.Balance(ctx, 1, 2)
	require.NoError(t, err)
	assert.EqualValues(t, 16, balance)
	require.Len(t, entries, 2, "limited")
	assert.Equal(t, "order-paid:4", entries[0].BizID, "newest first")
}

func TestGetPoints(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	authn, err := auth.New(env.DB)
	require.NoError(t, err)
	h, err := points.NewHandler(env.DB)
	require.NoError(t, err)
	e := httpserver.New(testLogger(), prometheus.NewRegistry(), 1<<20)
	h.Mount(e.Group("/v1", authn.Middleware()))
	srv := httptest.NewServer(e)
	defer srv.Close()

	l, err := points.NewLedger(env.DB)
	require.NoError(t, err)
	_, err = l.Apply(context.Background(), []points.Credit{
		{BizID: "order-paid:1", UserID: 1, Delta: 12, Reason: points.ReasonOrderPaid},
		{BizID: "order-paid:2", UserID: 1, Delta: 3, Reason: points.ReasonOrderPaid},
	})
	require.NoError(t, err)

	type body struct {
		Balance int64 `json:"balance"`
		Ledger  []struct {
			BizID     string `json:"biz_id"`
			Delta     int64  `json:"delta"`
			Reason    string `json:"reason"`
			CreatedAt string `json:"created_at"`
		} `json:"ledger"`
	}
	get := func(token string) (int, body, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/points", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var raw json.RawMessage
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&raw))
		var b body
		_ = json.Unmarshal(raw, &b)
		return resp.StatusCode, b, string(raw)
	}

	code, alice, _ := get("alice-token")
	require.Equal(t, http.StatusOK, code)
	assert.EqualValues(t, 15, alice.Balance)
	require.Len(t, alice.Ledger, 2)
	assert.Equal(t, "order-paid:2", alice.Ledger[0].BizID)
	assert.EqualValues(t, 3, alice.Ledger[0].Delta)
	assert.Equal(t, "order_paid", alice.Ledger[0].Reason)
	assert.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`, alice.Ledger[0].CreatedAt)

	code, _, raw := get("bob-token")
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"balance":0,"ledger":[]}`, raw, "no account: zero and an empty list, never alice's")

	code, _, _ = get("")
	assert.Equal(t, http.StatusUnauthorized, code)
}

// Constructors refuse nil dependencies.
func TestConstructorsRefuseNil(t *testing.T) {
	t.Parallel()
	_, err := points.NewHandler(nil)
	assert.Error(t, err)
	_, err = points.NewLedger(nil)
	assert.Error(t, err)
	_, err = points.NewConsumer(nil, nil, points.ConsumerConfig{}, nil, nil)
	assert.Error(t, err)
}
