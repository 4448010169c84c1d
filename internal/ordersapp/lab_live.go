package ordersapp

import (
	"errors"
	"fmt"

	"idemshop/internal/decisions"
	"idemshop/internal/labview"
)

// The live view's sizes: the decisions a page that opens late still sees, and how far one watcher may
// fall behind before it loses decisions (it is told how many).
const (
	liveKeep   = 500
	liveBuffer = 1024
)

// newLabLive builds the bus the guards report to and the live view that reads it (ORDERS_LAB=true only).
func newLabLive(d Deps) (*decisions.Bus, *labview.Live, error) {
	bus := decisions.NewBus(liveKeep, liveBuffer)
	cfg := labview.DefaultConfig()
	cfg.PaymentsURL = d.Config.PaymentsURL
	cfg.PaymentsAdminToken = d.Config.PaymentsAdminToken
	cfg.PaymentsTimeout = d.Config.PaymentsTimeout
	cfg.PointsMetricsURL = d.Config.PointsMetricsURL
	live, err := labview.New(bus, d.DB, cfg, d.Logger)
	if err != nil {
		return nil, nil, fmt.Errorf("lab live view: %w", err)
	}
	return bus, live, nil
}

// mountLabLive mounts GET /lab, GET /lab/events and the page's controls (labview.Live.Mount).
func mountLabLive(p labParts) error {
	if p.live == nil {
		return errors.New("lab live view: not built")
	}
	p.live.Mount(p.e)
	return nil
}
