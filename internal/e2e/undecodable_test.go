package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// damaging stands between the registers and the head office's handler:
// the first message whose body holds marker is served damaged — cut in
// half, a byte that no decoder takes at its end — every time it is
// served; it records the ids it damaged and those acknowledged.
type damaging struct {
	inner  http.Handler
	marker []byte

	mu     sync.Mutex
	target uint64 // the message damaged; 0 until one holds the marker
	served int    // how often it was served
	acked  []uint64
}

func (p *damaging) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/ack/") {
		if id, err := strconv.ParseUint(r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:], 10, 64); err == nil {
			p.mu.Lock()
			p.acked = append(p.acked, id)
			p.mu.Unlock()
		}
	}
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/next") {
		p.inner.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	p.inner.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	if rec.Code == http.StatusOK {
		id, _ := strconv.ParseUint(rec.Header().Get(httpsync.HeaderMessageID), 10, 64)
		p.mu.Lock()
		if p.target == 0 && bytes.Contains(body, p.marker) {
			p.target = id
		}
		if id == p.target {
			p.served++
			body = append(slices.Clone(body[:len(body)/2]), 0xff)
		}
		p.mu.Unlock()
	}
	for k, vs := range rec.Header() {
		if k != "Content-Length" {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(body)
}

// A message damaged every time it is served — the same id, the same bad
// bytes — is never acknowledged: the register reports it, the head office
// drops it and provisions the register again, and the register ends
// holding what the message brought, its receipts filed. (Before, the
// register took the message again for ever: the product never arrived,
// and its lane waited on it.)
func TestAMessageDamagedEveryTimeItIsServedIsReportedAndTheRegisterConverges(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		h := newHeadOffice(t)
		p := &damaging{inner: headoffice.Handler(h.s, headoffice.HandlerOptions{PollWait: 200 * time.Millisecond, Logger: quiet()}),
			marker: []byte("pear from the damaged message")}
		srv := httptest.NewServer(p)
		t.Cleanup(srv.Close)
		g := h.httpRegister(d)
		var shop uuid.UUID
		if err := h.pool.QueryRow(context.Background(), "SELECT shop_id FROM shop.registers WHERE id = $1", g.id).Scan(&shop); err != nil {
			t.Fatal(err)
		}
		h.addProduct(shop, "apple", 100)
		g.start(srv.URL, tokenOf(t, h, g.id), 0)
		holds := func(want ...string) (bool, string) {
			var got []string
			rows, err := g.db.Query("SELECT name FROM products ORDER BY name")
			if err != nil {
				return false, err.Error()
			}
			defer rows.Close()
			for rows.Next() {
				var name string
				if err := rows.Scan(&name); err != nil {
					return false, err.Error()
				}
				got = append(got, name)
			}
			return slices.Equal(got, want), fmt.Sprintf("the register holds %q; want %q", got, want)
		}
		eventually(t, "the apple on the register", func() (bool, string) { return holds("apple") })

		h.addProduct(shop, string(p.marker), 200)
		g.ring(1)
		eventually(t, "the pear on the register, the damaged message reported", func() (bool, string) { return holds("apple", string(p.marker)) })
		g.allFiled(1)
		p.mu.Lock()
		target, served, acked := p.target, p.served, slices.Clone(p.acked)
		p.mu.Unlock()
		if target == 0 || served < 2 {
			t.Fatalf("the damaged message %d was served %d times; want at least twice", target, served)
		}
		if slices.Contains(acked, target) {
			t.Fatalf("the damaged message %d was acknowledged", target)
		}
		st, err := g.r.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(st.Rejected, func(r replica.RejectedRow) bool { return r.Table == "" && r.Message == target })
		if i < 0 || !st.Rejected[i].Reported {
			t.Fatalf("the register's status lists %+v; want message %d reported as undecodable, and confirmed", st.Rejected, target)
		}
		eventually(t, "the head office done provisioning the register", func() (bool, string) {
			hs := replicaStatus(t, h, g.id)
			return !hs.provisioning && hs.applied > target, hs.String()
		})
	})
}
