package e2e

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// A head office put back to an earlier state, in process: what a restore
// from an older backup does to the engine's and the host's tables. The
// snapshot copies every table of the shop's and the engine's into a
// schema of its own, with the engine's sequences; putting it back stops
// the engine, replaces every row and sequence in one transaction, and
// starts a new engine over the database, as a head office restarted on a
// restored database would.

// snapshotTables are the tables a snapshot copies: the host's (schema
// shop) and the engine's (sync_* in public).
func (h *headOffice) snapshotTables() []string {
	h.t.Helper()
	return h.should(`SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
		WHERE schemaname = 'shop' OR (schemaname = $1 AND tablename LIKE 'sync\_%')`, engineSchema())
}

// snapshot takes a copy of the head office's tables and sequences.
func (h *headOffice) snapshot() {
	h.t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DROP SCHEMA IF EXISTS snap CASCADE; CREATE SCHEMA snap"); err != nil {
			return err
		}
		for _, t := range h.snapshotTables() {
			if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE TABLE snap.%s AS TABLE %s", snapName(t), t)); err != nil {
				return err
			}
		}
		// CREATE TABLE AS takes no parameters: the schema is written in,
		// as a literal.
		_, err := tx.Exec(ctx, `CREATE TABLE snap.sequences AS
			SELECT format('%I.%I', schemaname, sequencename) AS name, last_value, last_value IS NOT NULL AS called
			FROM pg_sequences WHERE schemaname IN ('shop', '`+strings.ReplaceAll(engineSchema(), "'", "''")+`')`)
		return err
	})
	if err != nil {
		h.t.Fatalf("taking a snapshot of the head office: %v", err)
	}
}

// restoreSnapshot puts the head office back as snapshot found it, under a
// new engine.
func (h *headOffice) restoreSnapshot() {
	h.t.Helper()
	ctx := context.Background()
	h.stop()
	tables := h.snapshotTables()
	// The registers still call: their transactions may deadlock with
	// the restore's locks, which then goes again.
	var err error
	for try := 0; try < 10; try++ {
		if err = h.putBack(ctx, tables); !isDeadlock(err) {
			break
		}
	}
	if err != nil {
		h.t.Fatalf("putting the head office back: %v", err)
	}
	h.startEngine()
}

func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}

// putBack replaces every row and sequence with the snapshot's.
func (h *headOffice) putBack(ctx context.Context, tables []string) error {
	return pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		// The rows go back as they were: no trigger notes them, no
		// foreign key checks their order.
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", ")); err != nil {
			return err
		}
		for _, t := range tables {
			if _, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s TABLE snap.%s", t, snapName(t))); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `SELECT CASE WHEN called THEN setval(name, last_value) ELSE setval(name, 1, false) END FROM snap.sequences`)
		return err
	})
}

func snapName(table string) string {
	return strings.NewReplacer(".", "__", `"`, "").Replace(table)
}

// position is what a transport knows of the last message its replica
// applied, and says on every poll (server.Endpoint.Next): its id and,
// when the transport handed it over itself, the SHA-256 of its bytes.
type position struct {
	id    uint64
	sum   [sha256.Size]byte
	sumOf uint64
}

func (p *position) applied() server.Applied {
	a := server.Applied{ID: p.id}
	if p.sumOf != 0 && p.sumOf == p.id {
		a.Sum = p.sum[:]
	}
	return a
}

// took records what Receive said of message id, of those bytes, and
// reports whether it is another message than the one the replica applied
// under that id: the server, restored, issued the id again.
func (p *position) took(id uint64, body []byte, got replica.Received) (reissued bool) {
	sum := sha256.Sum256(body)
	if !got.Redelivered {
		p.id, p.sum, p.sumOf = max(id, got.LastApplied), sum, id
		return false
	}
	if got.LastApplied > 0 {
		p.id = got.LastApplied
	}
	return id == p.sumOf && sum != p.sum
}
