package httpsync

import (
	"context"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/server"
)

// A poll of wait=0 waits for nothing, but a message already due is
// answered: a new replica's first message (its provisioning) is due from
// its first poll, so polling with wait=0 must get it, not 204.
func TestAPollOfWaitZeroAnswersAMessageAlreadyDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, shopserver.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	codecs := shoptest.Codecs(t, shoptest.Product{}, shoptest.Receipt{})
	opts := server.Options{Replicas: shoptest.Replicas, Logger: quiet()}
	shopserver.InstallTriggers(t, pool, codecs, opts)
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO shop.registers VALUES ($1)`, id); err != nil {
		t.Fatal(err)
	}
	secret, err := s.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(ForServer(s), HandlerOptions{Logger: quiet()}))
	t.Cleanup(srv.Close)
	url := srv.URL + "/sync/" + id.String() + "/next"
	for _, wait := range []string{"0", "0.0", "0.000001"} {
		start := time.Now()
		code, hd, _ := call(t, "GET", url+"?wait="+wait, JoinToken(id, secret), nil)
		if code != http.StatusOK || hd.Get(HeaderMessageID) == "" {
			t.Errorf("next?wait=%s with the replica's provisioning due = %d (Message-Id %q); want 200 with the message", wait, code, hd.Get(HeaderMessageID))
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("next?wait=%s took %v; want it answered at once", wait, took)
		}
	}
}

// wait is a number of seconds in plain decimal — digits, and a fraction
// after a point — and nothing else: a Go duration, an exponent, a sign,
// hexadecimal, Inf or NaN are refused with 400, naming the parameter.
func TestWaitIsADecimalNumberOfSeconds(t *testing.T) {
	t.Parallel()
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{PollWait: 20 * time.Millisecond})
	url := srv.URL + "/sync/" + replicaA.String() + "/next?wait="
	for _, ok := range []string{"0", "1", "25", "0.5", "2.25", "007", "99999999999999999999"} {
		if code, _, reason := call(t, "GET", url+ok, e.token(replicaA), nil); code != http.StatusNoContent {
			t.Errorf("wait=%s = %d %q; want 204 (a valid wait, nothing queued)", ok, code, reason)
		}
	}
	for _, bad := range []string{"2s", "500ms", "1e3", "1E3", "-1", "+1", ".5", "5.", "0x10", "Inf", "infinity", "NaN", "1,5", " 1", "1 ", "１"} {
		code, _, reason := call(t, "GET", url+neturl.QueryEscape(bad), e.token(replicaA), nil)
		if code != http.StatusBadRequest || !strings.Contains(reason, "wait") {
			t.Errorf("wait=%q = %d %q; want 400 naming wait", bad, code, reason)
		}
	}
}
