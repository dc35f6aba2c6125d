package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Benchmark 14: the fleet across processes. Two head-office processes
// (the server role: Run and the handler, each its own pool) over one
// database, behind a round-robin balancer in each of two processes of
// simulated replicas (balancer.go). One broadcast row is updated: its
// reach, its spread and its cost per delivery, summed over both head
// offices. Then the first head office is SIGKILLed and a second row
// updated at once: the time from the kill until every replica read it
// from the other, and whether every replica got both rows.

// headOffice is one head-office process of benchmark 14.
type headOffice struct {
	ch  *child
	url string
	app string // its pool's application_name
}

// multiRound is what the fleet processes saw of one broadcast.
type multiRound struct {
	reach    []time.Duration // per replica reached, from the start, ascending
	messages int64           // delivered while the round ran
	failed   int64           // requests that failed while it ran
	failure  string          // a fleet's last failed request, if any
	timeout  time.Duration   // how long the fleets waited for every replica
}

// last is when the last replica read the round's row, or the round's
// timeout when some never did.
func (r multiRound) last(n int) time.Duration {
	if len(r.reach) < n {
		return r.timeout
	}
	return r.reach[len(r.reach)-1]
}

// benchFleetProcesses: benchmark 14.
func benchFleetProcesses(ctx context.Context, c config) (_ []result, err error) {
	raiseFileLimit()
	const offices, fleets = 2, 2
	n := c.scale(20_000, 200)
	e, err := newServerEnv(ctx, c, 8, serverOptions(c))
	if err != nil {
		return nil, err
	}
	defer e.close()
	ids, tokens, rows, err := prepareFleet(ctx, c, e, n)
	if err != nil {
		return nil, err
	}
	hs, err := startHeadOffices(ctx, c, e, offices)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			for _, h := range hs {
				h.ch.kill()
			}
		}
	}()
	time.Sleep(time.Duration(c.scale(1000, 300)) * time.Millisecond)
	empty, err := officeStats(ctx, hs, true)
	if err != nil {
		return nil, err
	}
	items := []uuid.UUID{rows[0].ID, rows[1].ID}
	// A late delivery is not a lost one: the rounds wait long enough
	// for a head office alone to serve every replica on a loaded machine.
	timeout := time.Duration(c.scale(300, 30)) * time.Second
	start := time.Now()
	fl, err := startSimFleets(hs, ids, tokens, items, fleets, timeout)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			for _, f := range fl {
				f.kill()
			}
		}
	}()
	if err := provisionAndPark(ctx, c, e, fl); err != nil {
		return nil, err
	}
	provisioned := time.Since(start)
	parked, err := officeStats(ctx, hs, true)
	if err != nil {
		return nil, err
	}

	// The first broadcast, both head offices serving.
	pg := &pgMeter{pool: e.pool, apps: []string{hs[0].app, hs[1].app}}
	pg0 := pg.sample(ctx)
	b0, err := officeStats(ctx, hs, false)
	if err != nil {
		return nil, err
	}
	first, err := broadcast(ctx, e, fl, 0, items[0], nil, timeout)
	if err != nil {
		return nil, err
	}
	b1, err := officeStats(ctx, hs, false)
	if err != nil {
		return nil, err
	}
	pg1 := pg.sample(ctx)
	c.note("the first broadcast reached %d replicas; the second, after the SIGKILL…", len(first.reach))

	// The second, the first head office SIGKILLed just before its UPDATE.
	second, err := broadcast(ctx, e, fl, 1, items[1], hs[0].ch, timeout)
	if err != nil {
		return nil, err
	}
	c.note("the second broadcast reached %d replicas", len(second.reach))
	if _, err := finishAll(ctx, slices.Concat(fl, []*child{hs[1].ch})...); err != nil {
		return nil, err
	}
	return multiRun{n: n, provisioned: provisioned, first: first, second: second, cost: deltaOf(sumStats(b0), sumStats(b1)),
		pg: pg, pg0: pg0, pg1: pg1, empty: empty, parked: parked}.results(), nil
}

// multiRun is what benchmark 14 measured.
type multiRun struct {
	n             int
	provisioned   time.Duration
	first, second multiRound
	cost          statsDelta // both head offices', over the first round
	pg            *pgMeter
	pg0, pg1      backendCPU // their backends', before and after it
	// empty and parked are each head office's stats before any replica
	// and with every replica parked.
	empty, parked []event
}

// provisionAndPark waits until the fleets' replicas are provisioned, have
// acknowledged everything, and each has a poll parked.
func provisionAndPark(ctx context.Context, c config, e *serverEnv, fl []*child) error {
	start := time.Now()
	if _, err := nextOfAll(ctx, fl, "provisioned", 10*time.Minute); err != nil {
		return err
	}
	c.note("the simulated replicas of %d processes provisioned in %v", len(fl), time.Since(start).Round(time.Millisecond))
	if err := waitQuiet(ctx, e, 2*time.Minute); err != nil {
		return err
	}
	if err := sendAll(fl, "park"); err != nil {
		return err
	}
	if _, err := nextOfAll(ctx, fl, "parked", 2*time.Minute); err != nil {
		return err
	}
	// Let the last polls park in their handlers.
	time.Sleep(time.Duration(c.scale(1000, 300)) * time.Millisecond)
	return nil
}

// prepareFleet adopts n replicas of a 5-row broadcast catalog and issues
// their credentials.
func prepareFleet(ctx context.Context, c config, e *serverEnv, n int) ([]uuid.UUID, []string, []Item, error) {
	start := time.Now()
	rows := items(5, 14)
	ids, err := e.adopt(ctx, n, rows)
	if err != nil {
		return nil, nil, nil, err
	}
	tokens, err := bulkCredentials(ctx, e, ids)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE`); err != nil {
		return nil, nil, nil, err
	}
	c.note("%d replicas adopted and issued credentials in %v", n, time.Since(start).Round(time.Millisecond))
	return ids, tokens, rows, nil
}

// startHeadOffices starts k server processes over e's database, each
// with a pool of 16 named apart, and waits until each listens.
func startHeadOffices(ctx context.Context, c config, e *serverEnv, k int) ([]*headOffice, error) {
	var hs []*headOffice
	for range k {
		app := appName("office")
		ch, url, err := startServerChild(ctx, serverChildSpec{DatabaseURL: e.db.url, MaxConns: 16, SQLStats: c.sqlStats, PollWait: parkWait, AppName: app})
		if err != nil {
			killOffices(hs)
			return nil, err
		}
		hs = append(hs, &headOffice{ch: ch, app: app, url: url})
	}
	return hs, nil
}

func killOffices(hs []*headOffice) {
	for _, h := range hs {
		h.ch.kill()
	}
}

// officeStats asks every head office for its counters.
func officeStats(ctx context.Context, hs []*headOffice, gc bool) ([]event, error) {
	out := make([]event, len(hs))
	for i, h := range hs {
		s, err := serverStats(ctx, h.ch, gc)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// sumStats adds up the head offices' counters.
func sumStats(es []event) event {
	var sum event
	for _, e := range es {
		sum.Statements += e.Statements
		sum.Commits += e.Commits
		sum.CPU += e.CPU
	}
	return sum
}

// startSimFleets starts k processes of simulated replicas, each with the
// k-th part of the fleet and a balancer over the head offices. The
// connections a balancer may open to each head office are bounded so
// that one head office can hold every replica's poll within the
// descriptors a process may open.
func startSimFleets(hs []*headOffice, ids []uuid.UUID, tokens []string, items []uuid.UUID, k int, timeout time.Duration) ([]*child, error) {
	backends := make([]string, len(hs))
	for i, h := range hs {
		backends[i] = h.url
	}
	perBackend := 0
	if lim := fileLimit(); lim > 0 {
		perBackend = (lim - 200) / k
	}
	var out []*child
	for j := range k {
		lo, hi := j*len(ids)/k, (j+1)*len(ids)/k
		members := make([]fleetMember, 0, hi-lo)
		for i := lo; i < hi; i++ {
			members = append(members, fleetMember{ID: ids[i], Token: tokens[i]})
		}
		ch, err := startChild("simfleet", simFleetSpec{Backends: backends, PerConns: perBackend, Replicas: members, Items: items, RoundTimeout: timeout})
		if err != nil {
			for _, f := range out {
				f.kill()
			}
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// sendAll sends cmd to every child.
func sendAll(chs []*child, cmd string) error {
	for _, ch := range chs {
		if err := ch.send(cmd); err != nil {
			return err
		}
	}
	return nil
}

// nextOfAll waits for the event want from every child.
func nextOfAll(ctx context.Context, chs []*child, want string, timeout time.Duration) ([]event, error) {
	out := make([]event, len(chs))
	for i, ch := range chs {
		e, err := ch.next(ctx, want, timeout)
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

// broadcast has the fleets watch for round k, SIGKILLs kill (unless nil),
// updates the row item and waits until the fleets report the round: when
// every replica acknowledged the row, or, after a kill, read it (a
// replica whose acknowledgement went to the dead process has the message
// again only when its next poll's window ends). The times run from just
// before the kill, or else the UPDATE.
func broadcast(ctx context.Context, e *serverEnv, fl []*child, k int, item uuid.UUID, kill *child, timeout time.Duration) (multiRound, error) {
	until := "acked"
	if kill != nil {
		until = "read"
	}
	if err := sendAll(fl, fmt.Sprintf("watch %d %s", k, until)); err != nil {
		return multiRound{}, err
	}
	if _, err := nextOfAll(ctx, fl, "watching", time.Minute); err != nil {
		return multiRound{}, err
	}
	start := time.Now()
	if kill != nil {
		kill.kill()
	}
	if _, err := e.pool.Exec(ctx, `UPDATE bench.items SET price = price + 1, updated_at = clock_timestamp() WHERE id = $1`, item); err != nil {
		return multiRound{}, err
	}
	got, err := nextOfAll(ctx, fl, "reached", timeout+time.Minute)
	if err != nil {
		return multiRound{}, err
	}
	r := multiRound{timeout: timeout}
	for _, g := range got {
		for _, at := range g.Times {
			r.reach = append(r.reach, time.Unix(0, at).Sub(start))
		}
		r.messages += g.Messages
		r.failed += g.Failed
		if r.failure == "" {
			r.failure = g.Error
		}
	}
	slices.Sort(r.reach)
	return r, nil
}

// results are benchmark 14's rows.
func (m multiRun) results() []result {
	n, first, second, cost, empty, parked := m.n, m.first, m.second, m.cost, m.empty, m.parked
	name := fmt.Sprintf("14 fleet of %d, 2 head offices: ", n)
	delivered := float64(first.messages)
	p50, p99 := percentiles(first.reach)
	lost := (n - len(first.reach)) + (n - len(second.reach))
	costs := &fleetCosts{source: fmt.Sprintf("benchmark 14, %d replicas, two head offices", n), replicas: n,
		serverCPU: per(1000*cost.cpu, delivered), statements: per(cost.statements, delivered)}
	if secs, ok := m.pg.between(m.pg0, m.pg1); ok {
		costs.pgCPU, costs.pgMeasured = per(1000*secs, delivered), true
	}
	if len(first.reach) < n {
		// Costs over a round that never ended are no delivery's: the
		// README extrapolates none of them.
		costs = nil
	}
	out := []result{
		{name: name + "change reaches every replica", unit: "s", figure: first.last(n).Seconds(), bounds: []bound{ceiling(30), goal(atMost, 4)}, costs: costs,
			note: fmt.Sprintf("simulated replicas in %d processes, each balancing round-robin over both head offices as nginx does by default (a process refusing a connection passed over for 10 s, a failed GET tried on the next); one broadcast row updated; %d of %d reached; provisioning and parking the fleet took %v",
				2, len(first.reach), n, m.provisioned.Round(time.Millisecond))},
		{name: name + "reach p50", unit: "ms", figure: ms(p50), note: "per-replica time from before the UPDATE until the message carrying the row was read"},
		{name: name + "reach p99", unit: "ms", figure: ms(p99), bounds: []bound{goalOf("p99/p50", per(ms(p99), ms(p50)), "", atMost, 1.5)},
			note: "per-replica time, as for p50"},
		{name: name + "statements per delivery", unit: "stmts", figure: per(cost.statements, delivered), bounds: []bound{ceiling(4), goal(atMost, 0.2)},
			note: fmt.Sprintf("both head offices' pools, from the UPDATE until the last acknowledgement: %.0f statements, %.0f messages", cost.statements, delivered)},
		{name: name + "server CPU per delivery", unit: "ms", figure: per(1000*cost.cpu, delivered),
			note: fmt.Sprintf("user + system time of both head-office processes over the broadcast: %.2f s", cost.cpu)},
		m.pg.result(name+"PostgreSQL CPU per delivery", "ms", m.pg0, m.pg1, func(secs float64) float64 { return per(1000*secs, delivered) },
			"user + system time of the backends of both head offices' pools, over the same span", goal(atMost, 0.03)),
	}
	for i := range parked {
		if costs != nil { // nil when the broadcast missed replicas
			costs.rssKB = max(costs.rssKB, per(float64(parked[i].RSSKB-empty[i].RSSKB), float64(parked[i].Count)))
		}
		out = append(out, result{name: fmt.Sprintf("%shead office %d RSS per parked poll", name, i+1), unit: "KB",
			figure: per(float64(parked[i].RSSKB-empty[i].RSSKB), float64(parked[i].Count)), bounds: []bound{goal(atMost, 24)},
			note: fmt.Sprintf("(VmRSS parked − VmRSS before any replica) / its polls in flight: %d polls, %.1f MB → %.1f MB",
				parked[i].Count, float64(empty[i].RSSKB)/1024, float64(parked[i].RSSKB)/1024)})
	}
	killNote := fmt.Sprintf("head office 1 SIGKILLed, a second broadcast row updated at once: from the kill until the last replica read the row from head office 2 (the round's %v if some never did); %d of %d reached; %d requests failed meanwhile",
		second.timeout, len(second.reach), n, second.failed)
	if second.failure != "" {
		killNote += ", the last: " + firstLine(second.failure)
	}
	return append(out,
		result{name: name + "after a SIGKILL, every replica served again", unit: "s", figure: second.last(n).Seconds(), bounds: []bound{goal(atMost, 10)}, note: killNote},
		result{name: name + "deliveries lost", unit: "replicas", figure: float64(lost), bounds: []bound{ceilingAtAnySize(0)},
			note: fmt.Sprintf("replicas that did not read both rows within %v each: %d missed the first, %d the second", first.timeout, n-len(first.reach), n-len(second.reach))},
	)
}

// percentiles are the median and 99th percentile of ascending times; zero
// for none.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	return percentile(ds, 0.5), percentile(ds, 0.99)
}

// firstLine is s up to its first line break, at most 200 bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
