package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// upMessage is what register i would send up in lane main, filing rows of
// receipts.
func upMessage(t *testing.T, s *testShop, i int, sequence uint64, rows ...Receipt) []byte {
	t.Helper()
	tc, err := s.ho.codecs.Of(Receipt{})
	if err != nil {
		t.Fatal(err)
	}
	ch := &syncpb.TableChanges{Table: tc.Name, Columns: tc.ColumnNames(nil)}
	for _, row := range rows {
		vals, err := tc.Values(row, nil)
		if err != nil {
			t.Fatal(err)
		}
		ch.Upserts = append(ch.Upserts, wire.AppendTuple(nil, vals))
		ch.UpsertKeys = append(ch.UpsertKeys, []byte(tc.KeyOfRow(vals)))
	}
	id := registerID(i)
	msg, err := wire.EncodeToServer(&syncpb.ToServer{Replica: id[:], Lane: httpsync.DefaultLane, Sequence: sequence,
		Up: &syncpb.Up{Tables: []*syncpb.TableChanges{ch}}})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// shopState is what a refused request must leave as it was: the receipts
// filed, and where the head office says every register stands (last seen,
// messages queued, rows filed, rejected rows).
func (s *testShop) shopState() string {
	s.t.Helper()
	var receipts int
	if err := s.ho.pool.QueryRow(s.ctx, "SELECT count(*) FROM shop.receipts").Scan(&receipts); err != nil {
		s.t.Fatal(err)
	}
	st, err := s.ho.engine.Status(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return fmt.Sprintf("%d receipts; %+v", receipts, st)
}

// onlyReader hides a reader's length, so that a request is sent chunked.
type onlyReader struct{ io.Reader }

// TestSyncEndpointsRefuse checks, against the head office over PostgreSQL,
// that the sync endpoints refuse what they must, with the right status
// and a reason, and that a refused request changes nothing.
func TestSyncEndpointsRefuse(t *testing.T) {
	s := startShop(t, false)
	if err := s.ho.hooks.Pass(s.ctx); err != nil {
		t.Fatal(err)
	}
	token := make([]string, len(registerNames))
	for i := range registerNames {
		secret, err := s.ho.engine.Credentials(s.ctx, registerID(i))
		if err != nil {
			t.Fatal(err)
		}
		token[i] = httpsync.JoinToken(registerID(i), secret)
	}
	one, two := registerID(0), registerID(1)
	receipt := Receipt{RegisterID: one, ID: uuid.New(), TotalCents: 1234, RungAt: time.Now().UTC().Truncate(time.Microsecond)}
	good := upMessage(t, s, 0, 1, receipt)
	const limit = 16 << 20 // the handler's default MaxBodyBytes, which the demo keeps
	huge := bytes.Repeat([]byte{0}, limit+1)

	up := func(id uuid.UUID) string { return fmt.Sprintf("/sync/%s/up", id) }
	cases := []struct {
		name         string
		method, path string
		token        string // "" sends no Authorization header
		body         io.Reader
		want         int
		reason       string // in the answer's body
	}{
		{"no token", http.MethodPost, up(one), "", bytes.NewReader(good), http.StatusUnauthorized, "a bearer token is required"},
		{"wrong secret", http.MethodPost, up(one), httpsync.JoinToken(one, "not-the-secret"), bytes.NewReader(good), http.StatusUnauthorized, "the token is not the replica's"},
		{"token of no known form", http.MethodPost, up(one), "garbage", bytes.NewReader(good), http.StatusUnauthorized, "the token is not the replica's"},
		{"token of an unknown replica", http.MethodPost, up(one), httpsync.JoinToken(uuid.New(), "x"), bytes.NewReader(good), http.StatusUnauthorized, "the token is not the replica's"},
		{"another replica's token", http.MethodPost, up(one), token[1], bytes.NewReader(good), http.StatusForbidden, "the token is another replica's"},
		{"next, wrong secret", http.MethodGet, fmt.Sprintf("/sync/%s/next", one), httpsync.JoinToken(one, "nope"), nil, http.StatusUnauthorized, "the token is not the replica's"},
		{"next, another replica's token", http.MethodGet, fmt.Sprintf("/sync/%s/next", one), token[2], nil, http.StatusForbidden, "the token is another replica's"},
		{"ack, no token", http.MethodPost, fmt.Sprintf("/sync/%s/ack/1", one), "", nil, http.StatusUnauthorized, "a bearer token is required"},
		{"ack, another replica's token", http.MethodPost, fmt.Sprintf("/sync/%s/ack/1", one), token[1], nil, http.StatusForbidden, "the token is another replica's"},
		{"oversized body", http.MethodPost, up(one), token[0], bytes.NewReader(huge), http.StatusRequestEntityTooLarge, fmt.Sprintf("larger than %d bytes", limit)},
		{"oversized body, chunked", http.MethodPost, up(one), token[0], onlyReader{bytes.NewReader(huge)}, http.StatusRequestEntityTooLarge, fmt.Sprintf("larger than %d bytes", limit)},
		{"garbage body", http.MethodPost, up(one), token[0], strings.NewReader("this is no message at all"), http.StatusBadRequest, "malformed"},
		{"empty body", http.MethodPost, up(one), token[0], nil, http.StatusBadRequest, "the body is empty"},
		{"a message naming another replica", http.MethodPost, up(one), token[0], bytes.NewReader(upMessage(t, s, 1, 1, Receipt{RegisterID: two, ID: uuid.New(), RungAt: time.Now()})), http.StatusBadRequest, "names replica " + two.String()},
		{"a message of another lane", http.MethodPost, up(one), token[0], bytes.NewReader(good), http.StatusBadRequest, `of lane "main", but came as lane "telemetry"`},
	}
	before := s.shopState()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(s.ctx, c.method, s.ho.url+c.path, c.body)
			if err != nil {
				t.Fatal(err)
			}
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			if strings.Contains(c.name, "another lane") {
				req.Header.Set(httpsync.HeaderLane, "telemetry")
			}
			resp, err := s.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			reason, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %s: %s: %s", c.method, c.path, resp.Status, strings.TrimSpace(string(reason)))
			if resp.StatusCode != c.want {
				t.Errorf("answered %s, want %d", resp.Status, c.want)
			}
			if !strings.Contains(string(reason), c.reason) {
				t.Errorf("reason %q does not say %q", reason, c.reason)
			}
			if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("a 401 without WWW-Authenticate")
			}
			if after := s.shopState(); after != before {
				t.Errorf("the refused request changed the head office:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	// The same message, with the register's own token, is filed: the
	// refusals above were of the request, not of what it carried.
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.ho.url+up(one), bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token[0])
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the register's own message answered %s", resp.Status)
	}
	var total int64
	var rungAt time.Time
	if err := s.ho.pool.QueryRow(s.ctx, "SELECT total_cents, rung_at FROM shop.receipts WHERE register_id = $1 AND id = $2", one, receipt.ID).Scan(&total, &rungAt); err != nil {
		t.Fatalf("the accepted receipt is not filed: %v", err)
	}
	if total != receipt.TotalCents || !rungAt.Equal(receipt.RungAt) {
		t.Errorf("filed %d at %v, sent %d at %v", total, rungAt, receipt.TotalCents, receipt.RungAt)
	}
}
