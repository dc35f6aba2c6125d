package httpsync

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/testenv"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Sale is the record the registers of the flood test file.
type Sale struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	TotalCents int64     `db:"total_cents"`
}

func (Sale) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "sales", Mirror: magicsync.Record, Origin: "register_id"}
}

// salesUp is an upload of n sales of register, its seq'th.
func salesUp(t *testing.T, codecs *magicsync.Codecs, register uuid.UUID, seq uint64, n int) []byte {
	t.Helper()
	tc, err := codecs.Of(Sale{})
	if err != nil {
		t.Fatal(err)
	}
	ch := &syncpb.TableChanges{Table: tc.Name, Columns: tc.ColumnNames(nil)}
	for i := range n {
		vals, err := tc.Values(Sale{RegisterID: register, ID: uuid.New(), TotalCents: int64(100 + i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ch.Upserts = append(ch.Upserts, wire.AppendTuple(nil, vals))
		ch.UpsertKeys = append(ch.UpsertKeys, []byte(tc.KeyOfRow(vals)))
	}
	return shoptest.Upload(t, register, DefaultLane, seq, &syncpb.Up{Tables: []*syncpb.TableChanges{ch}})
}

// While one register floods the real head office over a pool of 4
// connections — 8 parallel uploads of 10,000 sales each, 20 long-polls
// polling again 100 ms after each answer, a body trickled slowly —
// another register's sales are filed within 1 s each, throughout the
// filing of two of the flooder's uploads (3 s under the race detector,
// which slows the filing beside the flood several times over, while the
// other tests of a run share the machine).
func TestAnotherRegistersSaleIsFiledWithin1sWhileOneFloods(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(shopserver.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// The shop's registers, and sales beside its tables.
	if _, err := pool.Exec(ctx, `CREATE TABLE shop.sales (register_id uuid NOT NULL, id uuid NOT NULL, total_cents bigint NOT NULL, PRIMARY KEY (register_id, id));`); err != nil {
		t.Fatal(err)
	}
	codecs, err := magicsync.NewCodecs(Sale{})
	if err != nil {
		t.Fatal(err)
	}
	opts := server.Options{Replicas: shoptest.Replicas, Logger: quiet()}
	sql, err := server.Triggers(codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	flooder, other := uuid.New(), uuid.New()
	tokens := map[uuid.UUID]string{}
	for _, id := range []uuid.UUID{flooder, other} {
		if _, err := pool.Exec(ctx, `INSERT INTO shop.registers VALUES ($1)`, id); err != nil {
			t.Fatal(err)
		}
		secret, err := s.Credentials(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		tokens[id] = JoinToken(id, secret)
	}
	srv := httptest.NewServer(NewHandler(ForServer(s), HandlerOptions{PollWait: time.Minute, BodyGrace: time.Minute, Logger: quiet()}))
	t.Cleanup(srv.Close)
	url := func(id uuid.UUID, call string) string { return srv.URL + "/sync/" + id.String() + "/" + call }

	const uploads, rows = 8, 10000
	bodies := make([][]byte, uploads)
	for i := range bodies {
		bodies[i] = salesUp(t, codecs, flooder, uint64(i+1), rows)
	}
	floodCtx, stopFlood := context.WithCancel(ctx)
	defer stopFlood()
	var flood sync.WaitGroup
	defer flood.Wait()
	defer stopFlood()
	// The flood: uploads sent again and again, long-polls, a stalled body.
	for _, body := range bodies {
		flood.Go(func() {
			for floodCtx.Err() == nil {
				a := callCtx(floodCtx, "POST", url(flooder, "up"), tokens[flooder], string(body))
				if a.err == nil && a.code != http.StatusNoContent && a.code != http.StatusTooManyRequests {
					t.Errorf("a flooding upload = %d; want 204 or 429", a.code)
					return
				}
				if a.code == http.StatusTooManyRequests {
					// As the client does: it holds off as Retry-After asks.
					select {
					case <-floodCtx.Done():
					case <-time.After(time.Second):
					}
				}
			}
		})
	}
	for range 20 {
		flood.Go(func() {
			for floodCtx.Err() == nil {
				callCtx(floodCtx, "GET", url(flooder, "next"), tokens[flooder], "")
				// Polling again 100 ms after an answer: two hundred
				// long-polls a second, together.
				select {
				case <-floodCtx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /sync/%s/up HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n0123", flooder, tokens[flooder]); err != nil {
		t.Fatal(err)
	}

	var worst time.Duration
	var sales, filed int
	for deadline := time.Now().Add(60 * time.Second); sales < 10 || filed < 2*rows; sales++ {
		if time.Now().After(deadline) {
			t.Fatalf("the flooder's rows filed within 60 s: %d; want %d", filed, 2*rows)
		}
		body := salesUp(t, codecs, other, uint64(sales+1), 1)
		start := time.Now()
		reqCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		a := callCtx(reqCtx, "POST", url(other, "up"), tokens[other], string(body))
		cancel()
		took := time.Since(start)
		if a.err != nil || a.code != http.StatusNoContent {
			t.Fatalf("the other register's sale %d = %d (%v) after %v; want 204", sales+1, a.code, a.err, took)
		}
		worst = max(worst, took)
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM shop.sales WHERE register_id = $1`, flooder).Scan(&filed); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the other register's %d sales: the slowest filed in %v; the flooder's rows filed meanwhile: %d", sales, worst.Round(time.Millisecond), filed)
	limit := time.Second
	if testenv.RaceEnabled {
		limit = 3 * time.Second
	}
	if worst > limit {
		t.Errorf("the other register's slowest sale took %v to file; want at most %v", worst, limit)
	}
}
