package httpsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// GET next hands the engine what the replica says it applied: the applied
// and sha256 parameters. Malformed ones are refused, and the engine is not
// asked.
func TestNextTellsTheEngineWhatTheReplicaApplied(t *testing.T) {
	t.Parallel()
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{PollWait: 10 * time.Millisecond})
	url := srv.URL + "/sync/" + replicaA.String() + "/next?wait=0"
	sum := sha256.Sum256([]byte("message 7"))
	for _, q := range []string{"", "&applied=7", "&applied=7&sha256=" + hex.EncodeToString(sum[:]), "&applied=18446744073709551615"} {
		if code, _, reason := call(t, "GET", url+q, e.token(replicaA), nil); code != http.StatusNoContent {
			t.Fatalf("next%s = %d %q; want 204", q, code, reason)
		}
	}
	want := []Applied{{}, {ID: 7}, {ID: 7, Sum: sum[:]}, {ID: 1<<64 - 1}}
	if got := e.appliedSaid(); !equalApplied(got, want) {
		t.Fatalf("the engine was told %v; want %v", got, want)
	}
	for _, q := range []string{"&applied=x", "&applied=-1", "&applied=18446744073709551616", "&applied=7&sha256=zz",
		"&applied=7&sha256=" + hex.EncodeToString(sum[:31]), "&sha256=" + hex.EncodeToString(sum[:])} {
		if code, _, _ := call(t, "GET", url+q, e.token(replicaA), nil); code != http.StatusBadRequest {
			t.Errorf("next%s = %d; want 400", q, code)
		}
	}
	if n := len(e.appliedSaid()); n != len(want) {
		t.Fatalf("the engine was asked %d times; want %d, the malformed requests refused before", n, len(want))
	}
}

func equalApplied(a, b []Applied) bool {
	return slices.EqualFunc(a, b, func(x, y Applied) bool { return x.ID == y.ID && string(x.Sum) == string(y.Sum) })
}

// idReceiver is a replica as the receive loop sees it: each message's
// bytes are "<id>:<text>"; one at or below the last applied is a
// redelivery. It says where it stands (LastAppliedReporter).
type idReceiver struct {
	mu   sync.Mutex
	last uint64
	got  []string
}

func (r *idReceiver) LastApplied(context.Context) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, nil
}

func (r *idReceiver) Receive(_ context.Context, msg []byte) (replica.Received, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, string(msg))
	idText, _, _ := strings.Cut(string(msg), ":")
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil {
		return replica.Received{}, replica.ErrMalformed
	}
	if id <= r.last {
		return replica.Received{Redelivered: true, LastApplied: r.last}, nil
	}
	r.last = id
	return replica.Received{LastApplied: id}, nil
}

func (r *idReceiver) received() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func sumOf(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// The receive loop tells the server, on every poll, the last message the
// replica applied: before the first message, what the replica says
// (LastAppliedReporter); then what Receive said, with the SHA-256 of the
// message's bytes once it applied one itself.
func TestReceiveLoopTellsTheServerWhatTheReplicaApplied(t *testing.T) {
	t.Parallel()
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{PollWait: 50 * time.Millisecond})
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{PollWait: 50 * time.Millisecond})
	r := &idReceiver{last: 5}
	e.push(replicaA, 6, []byte("6:six"))
	stop := runLoop(t, c, r)
	eventually(t, "message 6 acknowledged and a poll after it", func() bool {
		said := e.appliedSaid()
		return len(e.ackedIDs()) == 1 && len(said) >= 3
	})
	stop()
	said := e.appliedSaid()
	if want := (Applied{ID: 5}); !equalApplied(said[:1], []Applied{want}) {
		t.Fatalf("the first poll said %v; want %v, as the replica said before the loop applied anything", said[0], want)
	}
	want := Applied{ID: 6, Sum: sumOf("6:six")}
	for _, a := range said[1:] {
		if !equalApplied([]Applied{a}, []Applied{want}) {
			t.Fatalf("the polls after message 6 said %v; want %v", said[1:], want)
		}
	}
}

// A message Receive takes for a redelivery, under the id of the message
// the loop applied last but with other bytes, is a server's restored from
// an older backup, issuing old ids again: it is not acknowledged, and the
// next poll tells the server what the replica applied under that id. A
// true redelivery (the same bytes) is acknowledged as ever.
func TestReceiveLoopDoesNotAcknowledgeAnotherMessageUnderAnIdApplied(t *testing.T) {
	t.Parallel()
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{PollWait: 50 * time.Millisecond})
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{PollWait: 50 * time.Millisecond})
	r := &idReceiver{}
	e.push(replicaA, 6, []byte("6:six"))
	stop := runLoop(t, c, r)
	eventually(t, "message 6 acknowledged", func() bool { return len(e.ackedIDs()) == 1 })
	// A true redelivery: acknowledged.
	e.push(replicaA, 6, []byte("6:six"))
	eventually(t, "the redelivery acknowledged", func() bool { return len(e.ackedIDs()) == 2 })
	// The server, restored, issues id 6 again for another message.
	polls := len(e.appliedSaid())
	e.push(replicaA, 6, []byte("6:another"))
	eventually(t, "the message issued again taken twice, and polls after", func() bool {
		n := 0
		for _, m := range r.received() {
			if m == "6:another" {
				n++
			}
		}
		return n >= 2 && len(e.appliedSaid()) >= polls+3
	})
	stop()
	if got := e.ackedIDs(); len(got) != 2 {
		t.Fatalf("acknowledged %v; want message 6 twice only, never the other message under its id", got)
	}
	want := Applied{ID: 6, Sum: sumOf("6:six")}
	for _, a := range e.appliedSaid()[polls:] {
		if !equalApplied([]Applied{a}, []Applied{want}) {
			t.Fatalf("a poll after the other message said %v; want %v, what the replica applied under id 6", a, want)
		}
	}
}

// An acknowledgement refused 409 (the server never issued the message: it
// was restored from an older backup) is not retried as such: the next poll
// tells the server where the replica stands.
func TestReceiveLoopAfterAnAckRefused409TellsTheServerOnItsNextPoll(t *testing.T) {
	t.Parallel()
	e := newFakeEngine()
	e.failAck = func(int) error { return fmt.Errorf("%w: never issued", server.ErrNotIssued) }
	e2 := &conflictEngine{fakeEngine: e}
	srv, _ := serve(t, e2, HandlerOptions{PollWait: 50 * time.Millisecond})
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{PollWait: 50 * time.Millisecond})
	r := &idReceiver{}
	e.push(replicaA, 9, []byte("9:nine"))
	stop := runLoop(t, c, r)
	eventually(t, "a poll after the refused acknowledgement", func() bool {
		said := e.appliedSaid()
		return e2.conflicts() >= 1 && len(said) >= 2 && said[len(said)-1].ID == 9
	})
	stop()
	if said := e.appliedSaid(); !equalApplied(said[len(said)-1:], []Applied{{ID: 9, Sum: sumOf("9:nine")}}) {
		t.Fatalf("the poll after the refusal said %v; want message 9 and its sum", said[len(said)-1])
	}
}

// conflictEngine classifies ErrNotIssued as ForServer does.
type conflictEngine struct {
	*fakeEngine
	mu sync.Mutex
	n  int
}

func (e *conflictEngine) Classify(err error) int {
	if errors.Is(err, server.ErrNotIssued) {
		e.mu.Lock()
		e.n++
		e.mu.Unlock()
		return http.StatusConflict
	}
	return e.fakeEngine.Classify(err)
}

func (e *conflictEngine) conflicts() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// With the real replica: the loop asks it where it stands before its
// first poll, and tells the server after each message.
func TestReceiveLoopAsksTheRealReplicaWhereItStands(t *testing.T) {
	t.Parallel()
	codecs, err := magicsync.NewCodecs(shoptest.Product{})
	if err != nil {
		t.Fatal(err)
	}
	db := sqlitetest.Open(t, sqlitetest.Modernc())
	if _, err := db.Exec(shoptest.SQLiteDDL); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := replica.Install(ctx, db, codecs); err != nil {
		t.Fatal(err)
	}
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{PollWait: 50 * time.Millisecond})
	client := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{PollWait: 50 * time.Millisecond})
	r, err := replica.New(ctx, db, codecs, replica.Me(replicaA), client, replica.Settings{Logger: quiet(), DigestsEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	p := shoptest.Product{ID: uuid.New(), Name: "apple", PriceCents: 100, UpdatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	first := downMessage(t, codecs, 41, p)
	got, err := r.Endpoint().Receive(ctx, first)
	if err != nil || got.LastApplied != 41 || got.Redelivered {
		t.Fatalf("Receive(41) = %+v, %v; want applied, last applied 41", got, err)
	}
	if got, err := r.Endpoint().Receive(ctx, first); err != nil || got.LastApplied != 41 || !got.Redelivered {
		t.Fatalf("Receive(41) again = %+v, %v; want a redelivery, last applied 41", got, err)
	}
	if last, err := r.Endpoint().LastApplied(ctx); err != nil || last != 41 {
		t.Fatalf("LastApplied = %d, %v; want 41", last, err)
	}
	p.PriceCents = 120
	second := downMessage(t, codecs, 42, p)
	e.push(replicaA, 42, second)
	stop := runLoop(t, client, r.Endpoint())
	eventually(t, "message 42 acknowledged and a poll after it", func() bool {
		return len(e.ackedIDs()) == 1 && len(e.appliedSaid()) >= 2 && e.appliedSaid()[len(e.appliedSaid())-1].ID == 42
	})
	stop()
	said := e.appliedSaid()
	if !equalApplied(said[:1], []Applied{{ID: 41}}) {
		t.Fatalf("the first poll said %v; want message 41, as the replica said", said[0])
	}
	sum := sha256.Sum256(second)
	if !equalApplied(said[len(said)-1:], []Applied{{ID: 42, Sum: sum[:]}}) {
		t.Fatalf("the poll after message 42 said %v; want 42 and its sum", said[len(said)-1])
	}
}
