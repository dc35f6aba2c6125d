package e2e

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
)

// registerOptions make a register other than the harness's: another build
// of the host program, or one that learns its id as it is set up.
type registerOptions struct {
	// codecs are the tables the register's build declares; nil, the head
	// office's.
	codecs *magicsync.Codecs
	// identity says which replica it is; nil, replica.Me of its id.
	identity replica.Identity
	// tune changes its settings, after the head office's tune.
	tune func(*replica.Settings)
	// beforeRun runs once the replica is built and before its loops start:
	// the host setting the database up.
	beforeRun func(db *sql.DB, r *replica.Replica)
}

// attachWith starts a register over a new SQLite file, as attach does,
// made as o says.
func (h *headOffice) attachWith(id uuid.UUID, d sqlitetest.Driver, o registerOptions) *register {
	t := h.t
	t.Helper()
	codecs := o.codecs
	if codecs == nil {
		codecs = h.codecs
	}
	var who replica.Identity = replica.Me(id)
	if o.identity != nil {
		who = o.identity
	}
	path := sqlitetest.NewPath(t)
	db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
	if _, err := db.Exec(sqliteSchema + h.sqliteDDL); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := replica.Install(ctx, db, codecs); err != nil {
		t.Fatal(err)
	}
	reg := &register{id: id, db: db, h: h, path: path, plugged: make(chan struct{})}
	reg.online.Store(true)
	settings := replica.Settings{
		Idle: 20 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		DigestsEvery: -1, ResendAfter: 3 * time.Second, Logger: quiet(),
	}
	if h.tune != nil {
		h.tune(&settings)
	}
	if o.tune != nil {
		o.tune(&settings)
	}
	r, err := replica.New(ctx, db, codecs, who, replica.UplinkFunc(reg.send), settings)
	if err != nil {
		t.Fatal(err)
	}
	reg.r = r
	if o.beforeRun != nil {
		o.beforeRun(db, r)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(runCtx) })
	wg.Go(func() { reg.receiveLoop(runCtx) })
	var once sync.Once
	reg.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(reg.stop)
	return reg
}

// learnt is an Identity that does not know the replica's id until told.
type learnt struct {
	mu sync.Mutex
	id uuid.UUID
}

func (l *learnt) ID(context.Context) (uuid.UUID, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id, l.id != uuid.Nil, nil
}

// learn tells the register its id.
func (l *learnt) learn(id uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.id = id
}
