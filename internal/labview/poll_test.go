package labview

import (
	"strings"
	"testing"
)

func TestDuplicateCount(t *testing.T) {
	page := `# HELP idemshop_points_messages_total order.paid ...
# TYPE idemshop_points_messages_total counter
idemshop_points_messages_total{outcome="applied"} 7
idemshop_points_messages_total{outcome="duplicate"} 3
`
	n, ok, err := duplicateCount(strings.NewReader(page))
	if err != nil || !ok || n != 3 {
		t.Fatalf("got %v %v %v, want 3", n, ok, err)
	}
	if _, ok, _ := duplicateCount(strings.NewReader("go_goroutines 5\n")); ok {
		t.Fatal("found a count that is not there")
	}
}
