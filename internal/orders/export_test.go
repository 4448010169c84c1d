package orders

// Exported for the external tests: the reconciler's scan, to check its plan (repository_test.go).
var (
	ReconcileCandidatesSQL  = reconcileCandidatesSQL
	ReconcileCandidatesArgs = reconcileCandidatesArgs
)
