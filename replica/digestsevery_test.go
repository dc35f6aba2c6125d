package replica

import (
	"context"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Seed 003: "A register's digests — hourly by default
// (Settings::digests_every) — fingerprint its settings and its answers
// too". With DigestsEvery left zero, the digests go up at once, not again
// within the hour, and again once it passed: of the catalogs, of the
// settings and of the answers.
func TestDigestsGoUpHourlyByDefault(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		s := quietSettings()
		s.DigestsEvery = 0 // the default
		clock := newFakeClock()
		s.Clock = clock
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(1, 100)))); err != nil {
			t.Fatal(err)
		}
		l := r.lane("main")
		digestsSent := func(when string) map[string]*syncpb.Digest {
			t.Helper()
			if _, err := r.sendOnce(ctx, l); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-up.got:
				out := map[string]*syncpb.Digest{}
				for _, dg := range got.msg.Up.Digests {
					out[dg.Table] = dg
				}
				return out
			default:
				t.Fatalf("%s: nothing was sent; want the digests", when)
				return nil
			}
		}
		first := digestsSent("at start")
		for _, table := range []string{"products", "settings", "sync_wishes"} {
			if first[table] == nil {
				t.Errorf("the first digests = %v; want one of %s", first, table)
			}
		}
		if first["products"] != nil && first["products"].Rows != 1 {
			t.Errorf("the digest of products counts %d rows; want 1", first["products"].Rows)
		}
		clock.advance(time.Hour - time.Second)
		if more, err := r.sendOnce(ctx, l); err != nil || more {
			t.Fatalf("a second short of an hour later: sendOnce = %v, %v", more, err)
		}
		select {
		case got := <-up.got:
			t.Fatalf("a second short of an hour later, sent %v; want nothing before the hour", got.msg.Up)
		default:
		}
		clock.advance(time.Second)
		if again := digestsSent("an hour later"); again["products"] == nil {
			t.Fatalf("an hour later, the digests sent = %v; want products' again", again)
		}
	})
}
