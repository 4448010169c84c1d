package rewards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/formtoken"
	"idemshop/internal/platform/logging"
	"idemshop/internal/points"
)

// Outcomes counted by idemshop_rewards_redeem_total.
const (
	OutcomeRedeemed     = "redeemed"     // this submit spent the points
	OutcomeReplayed     = "replayed"     // the token had already paid; its answer was replayed
	OutcomeInFlight     = "in_flight"    // another submit of the token was running: 409
	OutcomeInvalid      = "invalid"      // missing, unknown, expired or foreign token: 400
	OutcomeInsufficient = "insufficient" // too few points: 409, token usable again
	OutcomeUnavailable  = "unavailable"  // Redis down: 503, nothing written
	OutcomeError        = "error"        // anything else
)

// Metrics are the redeem route's Prometheus metrics.
type Metrics struct {
	redeems *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{redeems: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemshop_rewards_redeem_total",
		Help: "Submits of the redeem form by outcome (redeemed, replayed, in_flight, invalid, insufficient, unavailable, error).",
	}, []string{"outcome"})}
	for _, o := range []string{OutcomeRedeemed, OutcomeReplayed, OutcomeInFlight, OutcomeInvalid,
		OutcomeInsufficient, OutcomeUnavailable, OutcomeError} {
		m.redeems.WithLabelValues(o) // every series exists from the start, at 0
	}
	reg.MustRegister(m.redeems)
	return m
}

func (m *Metrics) count(outcome string) { m.redeems.WithLabelValues(outcome).Inc() }

// Answer is what a submit gets: the body of the 201 answer, decoded and raw. Body is sent as it is, so a
// replay is byte for byte the first answer.
type Answer struct {
	Result   Result
	Body     []byte
	Replayed bool
}

// TokenUse is how a redeem uses its form token: the service's swap point, chosen at NewService, as
// idempotency.Runner is the order route's. BeginThenComplete is production's; ConsumeFirst
// (redeem_unsafe.go) is lab S4's twin, which differs from it by the guard alone.
type TokenUse struct {
	name   string
	redeem func(s *Service, ctx context.Context, userID int64, tokenID, rewardID string) (Answer, string, error)
}

// BeginThenComplete takes the token IN_FLIGHT before the transaction, completes it with the result
// after the commit, and gives it back when nothing was committed (formtoken.Store Begin, Complete,
// Release).
var BeginThenComplete = TokenUse{name: "begin-then-complete", redeem: (*Service).redeem}

// String is the token use's name, for logs.
func (u TokenUse) String() string { return u.name }

// Service runs a redeem: form token first, then the database transaction.
type Service struct {
	tokens  *formtoken.Store
	repo    *Repository
	metrics *Metrics
	use     TokenUse
	// workTimeout bounds the work once the token is IN_FLIGHT; see Redeem.
	workTimeout time.Duration
}

// NewService returns the redeem service, using its form tokens as use says (BeginThenComplete, except
// in the lab). workTimeout bounds the transaction and the token updates after
// the token was taken. Keep it close to the in-flight lease: a submit that outlives the lease may see
// another take the token, and then the coupon's UNIQUE index on the token id is what stops a second
// coupon (the loser's transaction rolls back and it replays the winner's result).
func NewService(tokens *formtoken.Store, repo *Repository, metrics *Metrics, use TokenUse, workTimeout time.Duration) (*Service, error) {
	if tokens == nil || repo == nil || metrics == nil || use.redeem == nil {
		return nil, errors.New("rewards: NewService needs a token store, a repository, metrics and a token use")
	}
	if workTimeout <= 0 {
		return nil, fmt.Errorf("rewards: work timeout must be > 0, got %s", workTimeout)
	}
	return &Service{tokens: tokens, repo: repo, metrics: metrics, use: use, workTimeout: workTimeout}, nil
}

// Catalogue lists the rewards.
func (s *Service) Catalogue(ctx context.Context) ([]Reward, error) { return s.repo.Catalogue(ctx) }

// Coupons lists userID's newest coupons.
func (s *Service) Coupons(ctx context.Context, userID int64, limit int) ([]Coupon, error) {
	return s.repo.Coupons(ctx, userID, limit)
}

// Redeem submits the redeem form of userID: reward rewardID, paid with form token tokenID.
//
// Errors are problem errors: formtoken.ErrTokenInvalid (400), ErrUnknownReward (400),
// formtoken.ErrTokenInUse (409, Retry-After), ErrInsufficientPoints (409), formtoken.ErrStoreUnavailable
// (503, Retry-After), or an internal error.
func (s *Service) Redeem(ctx context.Context, userID int64, tokenID, rewardID string) (Answer, error) {
	a, outcome, err := s.use.redeem(s, ctx, userID, tokenID, rewardID)
	s.metrics.count(outcome)
	return a, err
}

func (s *Service) redeem(ctx context.Context, userID int64, tokenID, rewardID string) (Answer, string, error) {
	if !formtoken.ValidID(tokenID) {
		return Answer{}, OutcomeInvalid, formtoken.ErrTokenInvalid
	}
	// The token first, the reward after it: a token already used answers with its stored result
	// whatever the resubmit posts, even a reward taken off the catalogue since (a reload of the result
	// page must show the coupon, not 400). A bad reward on a token that is ours releases it below, so
	// a bad request leaves the token as it was.
	claim, err := s.tokens.Begin(ctx, tokenID, userID, FormName)
	switch {
	case errors.Is(err, formtoken.ErrInvalid):
		return Answer{}, OutcomeInvalid, formtoken.ErrTokenInvalid
	case err != nil:
		// Without Redis this submit cannot be told apart from a concurrent duplicate, and the user would
		// get a 201 now but a 400 on a replay later. Refuse before anything is written.
		return Answer{}, OutcomeUnavailable, formtoken.ErrStoreUnavailable.Wrap(err)
	}
	switch claim.Outcome {
	case formtoken.Busy:
		return Answer{}, OutcomeInFlight, formtoken.ErrTokenInUse.WithRetryAfter(claim.RetryAfter)
	case formtoken.Replay:
		// Redis keeps the answer's bytes; the database says whether the coupon is there, and what it is
		// (ByToken rebuilds the first answer). A token kept in Redis outlives a database restored from
		// a backup or created again, and its stored answer would name a coupon and a balance that do
		// not exist. Such a token is refused like a used-up one: the user reloads the form, and a new
		// token redeems against the database as it is.
		r, found, err := s.repo.ByToken(ctx, tokenID)
		if err != nil {
			return Answer{}, OutcomeError, err
		}
		if !found {
			logging.From(ctx).Warn("form token used, but the database has no coupon for it (restored or created again?); refused",
				"form", FormName)
			return Answer{}, OutcomeInvalid, formtoken.ErrTokenInvalid
		}
		return Answer{Result: r, Body: claim.Result, Replayed: true}, OutcomeReplayed, nil
	}

	// The token is IN_FLIGHT and ours. From here on the work runs to its end even if the client goes
	// away (a double-click makes the browser abandon the first request): a cancelled transaction would
	// only leave the token in flight until its lease expires. The timeout still bounds it, and so does
	// the request's own deadline (orders ends each request's work before HTTP_WRITE_TIMEOUT): a redeem
	// that waited on a locked points account past it wrote its answer to a closed connection, and its
	// client got none (a helper's finding, 2026-12-06).
	end := time.Now().Add(s.workTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(end) {
		end = d
	}
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	// The token's own updates go on past that deadline (each bounded by REDIS_TIMEOUT): a failed attempt
	// gives its token back at once, and a committed one marks it used, so that the retry its 503
	// invites is not a 409 for the lease's length.
	tctx := context.WithoutCancel(wctx)
	lg := logging.From(ctx)

	var (
		res     Result
		existed bool
	)
	reward, err := s.repo.Reward(wctx, rewardID)
	switch {
	case err == nil:
		res, existed, err = s.repo.Redeem(wctx, userID, tokenID, reward)
	case errors.Is(err, ErrUnknownReward):
		// The token may have paid for a coupon already: an earlier submit committed, then could not mark
		// the token consumed, and its lease ran out. That coupon is the answer, whatever this one posts.
		var found bool
		if res, found, err = s.repo.ByToken(wctx, tokenID); err == nil && !found {
			err = ErrUnknownReward
		}
		existed = found
	}
	if err != nil {
		// A bad request (an unknown reward), a business failure (too few points) or an unexpected error:
		// nothing was committed, so the token goes back to ISSUED and the same form can be submitted
		// again. If this fails too, the lease expiring does the same a little later.
		if rerr := s.tokens.Release(tctx, tokenID, claim.Attempt); rerr != nil {
			lg.Warn("form token not released; it is usable again when its lease expires", "err", rerr)
		}
		switch {
		case errors.Is(err, ErrUnknownReward):
			return Answer{}, OutcomeInvalid, err
		case errors.Is(err, ErrInsufficientPoints):
			return Answer{}, OutcomeInsufficient, err
		case errors.Is(err, points.ErrAccountLocked):
			// Only when a lease expired while its submit was still in the database (that one is running),
			// or another transaction of this user's points held the account: the two cannot be told
			// apart. A lock wait elsewhere (a table an operator locked) is the database's "not now", 503
			// (a helper's finding, 2026-12-07: a locked coupons table said "this form is already being
			// submitted").
			return Answer{}, OutcomeInFlight, formtoken.ErrTokenInUse.WithRetryAfter(time.Second).Wrap(err)
		}
		return Answer{}, OutcomeError, err
	}
	body, err := json.Marshal(res)
	if err != nil {
		return Answer{}, OutcomeError, fmt.Errorf("encode redeem result: %w", err)
	}
	if err := s.tokens.Complete(tctx, tokenID, userID, FormName, body); err != nil {
		// The coupon is committed, so the user gets it now. The token stays IN_FLIGHT until its lease
		// expires; a resubmit after that finds the coupon in the database and replays it.
		lg.Warn("redeem committed but form token not marked consumed", "err", err)
	}
	outcome := OutcomeRedeemed
	if existed {
		outcome = OutcomeReplayed
	}
	return Answer{Result: res, Body: body, Replayed: existed}, outcome, nil
}

// WaitForResult is Redeem for a browser form post. A double-click sends the form twice, and the browser
// shows only the answer to the second request; a 409 there would hide the coupon the first one bought.
// So while the token is in flight it polls, up to wait, until the first submit's result can be replayed.
// An attempt under way when wait ends is finished, not cut: one held by a locked points account takes
// up to DB_LOCK_TIMEOUT. The post is one submit, counted once, by its answer's outcome (each poll
// counted one in_flight).
func (s *Service) WaitForResult(ctx context.Context, userID int64, tokenID, rewardID string, wait time.Duration) (Answer, error) {
	deadline := time.Now().Add(wait)
	const step = 25 * time.Millisecond
	// bounded: at most wait/step+1 attempts
	for i := 0; ; i++ {
		a, outcome, err := s.use.redeem(s, ctx, userID, tokenID, rewardID)
		if !errors.Is(err, formtoken.ErrTokenInUse) || time.Now().Add(step).After(deadline) || i > int(wait/step) {
			s.metrics.count(outcome)
			return a, err
		}
		select {
		case <-ctx.Done():
			s.metrics.count(outcome)
			return a, err
		case <-time.After(step):
		}
	}
}
