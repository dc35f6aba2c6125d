// Package serverhook lets the module's own tests, benchmarks and example
// programs reach what the server keeps out of its API: one planning pass,
// run now rather than at Run's next tick.
//
// A caller attaches Hooks to the context it hands server.New; New fills
// them for the server it returns:
//
//	var hooks serverhook.Hooks
//	s, err := server.New(serverhook.With(ctx, &hooks), pool, codecs, opts)
//	...
//	err = hooks.Pass(ctx)
//
// The context carries them to New alone: nothing is kept beside a Server,
// and a context without Hooks changes nothing.
package serverhook

import "context"

// Hooks are the calls New fills for the Server it returns.
type Hooks struct {
	// Pass runs one planning pass now: the keys the triggers noted are
	// read and appended to their groups' logs, replicas added are
	// adopted. When another process holds the planner's lock, it returns
	// nil at once.
	Pass func(ctx context.Context) error
	// CatchUp returns once every change the host committed before the
	// call is noted, for Pass to plan: under capture by logical
	// replication it reads the replication slot up to there (or waits for
	// the process reading it); under triggers it returns at once.
	CatchUp func(ctx context.Context) error
}

type hooksKey struct{}

// With returns ctx carrying h, for server.New to fill.
func With(ctx context.Context, h *Hooks) context.Context {
	return context.WithValue(ctx, hooksKey{}, h)
}

// From returns the Hooks ctx carries, or nil.
func From(ctx context.Context) *Hooks {
	h, _ := ctx.Value(hooksKey{}).(*Hooks)
	return h
}
