package replicametrics_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/metrics/internal/scrapetest"
	"github.com/magicsync/magicsync/metrics/replicametrics"
	"github.com/magicsync/magicsync/replica"
)

func TestReplicaMetricsShowWhatWaitsToGoUp(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		codecs := shoptest.Codecs(t, shoptest.Notice{}, shoptest.Receipt{})
		db := sqlitetest.Open(t, d)
		if _, err := db.Exec(shoptest.SQLiteDDL); err != nil {
			t.Fatal(err)
		}
		if err := replica.Install(ctx, db, codecs); err != nil {
			t.Fatal(err)
		}
		id := uuid.New()
		// The uplink is never called: nothing runs the replica's loops.
		r, err := replica.New(ctx, db, codecs, replica.Me(id), replica.UplinkFunc(func(context.Context, uuid.UUID, string, []byte) error {
			return nil
		}), replica.Settings{Logger: slog.New(slog.DiscardHandler), DigestsEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(replicametrics.NewCollector(r, replicametrics.Options{}))
		for i := range 3 {
			if _, err := db.Exec(`INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, ?, ?, ?)`,
				id, uuid.New(), 100*i, time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)); err != nil {
				t.Fatal(err)
			}
		}
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Lanes) != 1 {
			t.Fatalf("the replica has lanes %+v; want one", st.Lanes)
		}
		lane := st.Lanes[0].Name
		scrapetest.Check(t, "three receipts written", scrapetest.Scrape(t, reg), map[string]float64{
			"magicsync_replica_status_up":                           1,
			"magicsync_replica_unsent_rows{lane=" + lane + "}":      3,
			"magicsync_replica_unconfirmed_rows{lane=" + lane + "}": 0,
			"magicsync_replica_lane_problem{lane=" + lane + "}":     0,
			"magicsync_replica_last_applied_message":                0,
			"magicsync_replica_backlog_rows":                        0,
			"magicsync_replica_wishes{state=pending}":               0,
		})
	})
}
