package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// Knob is a register's setting keyed by an id of the register's own: only
// its name tells one register's knob from the same knob of another.
type Knob struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	Name       string    `db:"name"`
	Level      int64     `db:"level" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (Knob) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "knobs", Mirror: magicsync.Setting, Origin: "register_id"}
}

// newKnobShop is a wishShop whose registers have knobs.
func newKnobShop(t *testing.T) *wishShop {
	t.Helper()
	pool := newCapturePool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE shop.knobs (register_id uuid NOT NULL, id uuid NOT NULL, name text NOT NULL,
		level bigint NOT NULL, changed_at timestamptz NOT NULL, PRIMARY KEY (register_id, id))`); err != nil {
		t.Fatal(err)
	}
	codecs := shoptest.Codecs(t, shoptest.Setting{}, Knob{}, shoptest.Product{})
	opts := withCapture(server.Options{Replicas: shoptest.Replicas})
	shopserver.InstallTriggers(t, pool, codecs, opts)
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	w := &wishShop{t: t, ctx: ctx, pool: pool, s: s, codecs: codecs, shop: uuid.New(), seq: map[uuid.UUID]uint64{}, applied: map[uuid.UUID]uint64{}}
	w.exec(`INSERT INTO shop.shops VALUES ($1, 'A')`, w.shop)
	return w
}

// knob files a register's knob, as the register would send it.
func (w *wishShop) knob(replica uuid.UUID, name string, level int64) Knob {
	w.t.Helper()
	k := Knob{RegisterID: replica, ID: uuid.New(), Name: name, Level: level, ChangedAt: time.Now().UTC().Truncate(time.Microsecond)}
	w.upload(replica, &syncpb.Up{Tables: []*syncpb.TableChanges{shoptest.Changes(w.t, w.codecs, k)}})
	return k
}

// knobWish reads the wish of a knob, if it has one.
func (w *wishShop) knobWish(k Knob) (server.Wish[Knob], bool) {
	w.t.Helper()
	ws, err := server.WishesOfRows(w.ctx, w.s, w.pool, []Knob{k})
	if err != nil {
		w.t.Fatal(err)
	}
	if len(ws) == 0 {
		return server.Wish[Knob]{}, false
	}
	return ws[0], true
}

// A rollout names each register's row by a column's value (the knob's
// name) when its key is an id of the register's own: every register that
// filed such a row is wished that row, and one that filed none is wished
// once it does. RollValues does the same for a form.
func TestARolloutFindsEachRegistersRowByAColumnsValue(t *testing.T) {
	t.Parallel()
	w := newKnobShop(t)
	r1, r2, r3 := w.register(), w.register(), w.register()
	v1 := w.knob(r1, "volume", 3)
	v2 := w.knob(r2, "volume", 5)
	b2 := w.knob(r2, "brightness", 1)

	var ro server.Rollout
	w.inTx(func(tx pgx.Tx) error {
		var err error
		ro, err = server.Roll(w.ctx, w.s, tx, Knob{Name: "volume", Level: 7}, server.RolloutScope{All: true},
			server.RolloutOptions{By: []string{"name"}})
		return err
	})
	if ro.Replicas != 3 || ro.Wished != 2 {
		t.Fatalf("rollout %+v; want 3 replicas, 2 wished", ro)
	}
	for _, k := range []Knob{v1, v2} {
		if st, ok := w.knobWish(k); !ok || st.State != server.WishPending || st.Wanted.Level != 7 || st.Wanted.Name != "volume" {
			t.Errorf("the wish of %v's volume: %+v, %v", k.RegisterID, st, ok)
		}
	}
	if st, ok := w.knobWish(b2); ok {
		t.Errorf("the brightness was wished: %+v", st)
	}
	st, err := w.s.RolloutStatus(w.ctx, ro.ID)
	if err != nil || st.Unmatched != 1 || len(st.Options.By) != 1 || st.Options.By[0] != "name" {
		t.Fatalf("status %+v, %v; want 1 unmatched, by name", st, err)
	}

	// The third files its volume: the rollout wishes it.
	v3 := w.knob(r3, "volume", 4)
	if err := w.s.AdvanceRollouts(w.ctx); err != nil {
		t.Fatal(err)
	}
	if st, ok := w.knobWish(v3); !ok || st.Wanted.Level != 7 {
		t.Errorf("the wish of the third register's volume: %+v, %v", st, ok)
	}
	if st, err := w.s.RolloutStatus(w.ctx, ro.ID); err != nil || st.Unmatched != 0 || st.Wished != 3 {
		t.Errorf("status %+v, %v; want every replica wished", st, err)
	}

	// The same from a form, the table named with its schema.
	ro, err = w.s.RollValues(w.ctx, "shop.knobs", map[string]string{"name": "volume"}, map[string]string{"level": "9"},
		server.RolloutScope{All: true}, server.RolloutOptions{By: []string{"name"}})
	if err != nil || ro.Wished != 3 {
		t.Fatalf("RollValues by name: %+v, %v", ro, err)
	}
	if st, _ := w.knobWish(v1); st.Wanted.Level != 9 {
		t.Errorf("after RollValues the volume is wished %d", st.Wanted.Level)
	}
}

// A rollout by columns that cannot find a row is refused, saying why.
func TestARolloutByColumnsThatNameNoRowIsRefused(t *testing.T) {
	t.Parallel()
	w := newKnobShop(t)
	w.register()
	for _, c := range []struct {
		by   []string
		want string
	}{
		{[]string{"register_id"}, "origin"},
		{[]string{"colour"}, "no column"},
		{[]string{"name", "name"}, "twice"},
	} {
		tx, err := w.s.Begin(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = server.Roll(w.ctx, w.s, tx, Knob{Name: "volume", Level: 7}, server.RolloutScope{All: true}, server.RolloutOptions{By: c.by})
		_ = tx.Rollback(w.ctx)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("By %v: %v; want an error saying %q", c.by, err, c.want)
		}
	}
}
