package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// Over HTTP, a register's word that it applied a message at the id bound
// (2^62) is answered 409 on every path — an upload's last_applied, a
// poll's applied, an acknowledgement — and changes nothing. After a report
// just below the bound, the head office provisions the register under ids
// past it, and the register syncs on: none of its requests is refused
// again, its receipt is filed, the notice comes. (Before, the upload's
// report of 2^62 was taken and moved the register's next id past the
// bound; every later acknowledgement and upload of it was refused 409.)
func TestAnIdAtTheBoundIsRefused409AndTheRegisterSyncsOn(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		h := newHeadOffice(t)
		var conflicts atomic.Int32
		handler := headoffice.Handler(h.s, headoffice.HandlerOptions{PollWait: 200 * time.Millisecond, Logger: quiet()})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sw := &statusSeen{ResponseWriter: w}
			handler.ServeHTTP(sw, r)
			if sw.code == http.StatusConflict {
				conflicts.Add(1)
			}
		}))
		t.Cleanup(srv.Close)
		g := h.httpRegister(d)
		token := tokenOf(t, h, g.id)
		// The uploads of this test go in a lane of their own, so that
		// their sequences are none of the register's.
		const probeLane = "probe"
		base := srv.URL + "/sync/" + g.id.String() + "/"
		call := func(method, path string, body []byte) int {
			t.Helper()
			req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set(httpsync.HeaderLane, probeLane)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		seq := uint64(0)
		upload := func(lastApplied uint64) int {
			seq++
			return call("POST", "up", shoptest.Upload(t, g.id, probeLane, seq, &syncpb.Up{LastApplied: lastApplied}))
		}
		const bound = 1 << 62
		before := replicaStatus(t, h, g.id)
		for name, say := range map[string]func() int{
			"upload":          func() int { return upload(bound) },
			"poll":            func() int { return call("GET", "next?applied="+strconv.FormatUint(bound, 10), nil) },
			"acknowledgement": func() int { return call("POST", "ack/"+strconv.FormatUint(bound, 10), nil) },
		} {
			if code := say(); code != http.StatusConflict {
				t.Errorf("%s of message 2^62 = %d; want 409", name, code)
			}
			if after := replicaStatus(t, h, g.id); after != before {
				t.Fatalf("%s of message 2^62, refused, changed the head office's record of the register: %s; was %s", name, after, before)
			}
		}
		if code := upload(bound - 1); code != http.StatusNoContent {
			t.Fatalf("upload of last_applied 2^62-1 = %d; want 204", code)
		}
		refused := conflicts.Load()

		h.exec("INSERT INTO shop.notices VALUES (1, 'open at nine')")
		g.start(srv.URL, token, 0)
		g.ring(1)
		g.allFiled(1)
		eventually(t, "the notice on the register, provisioned under ids past the bound", func() (bool, string) {
			st := replicaStatus(t, h, g.id)
			var n int
			if err := g.db.QueryRow("SELECT count(*) FROM notices").Scan(&n); err != nil {
				return false, err.Error()
			}
			return n == 1 && st.applied >= bound && !st.provisioning, fmt.Sprintf("%d notices; %s", n, st)
		})
		if n := conflicts.Load() - refused; n != 0 {
			t.Fatalf("%d requests of the register refused 409 after the report; want none", n)
		}
	})
}

// statusSeen is a ResponseWriter that notes the status answered.
type statusSeen struct {
	http.ResponseWriter
	code int
}

func (w *statusSeen) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusSeen) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// headStatus is what the head office records of a register's messages.
type headStatus struct {
	applied      uint64
	provisioning bool
	reason       string
}

func (s headStatus) String() string {
	return fmt.Sprintf("last applied %d, provisioning %v (%q)", s.applied, s.provisioning, s.reason)
}

// replicaStatus is the head office's record of replica id.
func replicaStatus(t testing.TB, h *headOffice, id uuid.UUID) headStatus {
	t.Helper()
	all, err := h.s.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range all {
		if st.ID == id {
			return headStatus{applied: st.LastApplied, provisioning: st.Provisioning, reason: st.ProvisionReason}
		}
	}
	t.Fatalf("no status of replica %s", id)
	return headStatus{}
}
