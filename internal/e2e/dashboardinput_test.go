package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/dashboard"
	"github.com/magicsync/magicsync/internal/shoptest"
)

// The dashboard of a real head office tells bad input from an outage: a
// setting's page takes the table named with its schema (shop.settings) as
// well as bare; a name of no setting table — unknown, or a record's — is
// a 404 page in plain words, and marks nothing down; only the database's
// own failure is shown as one. (Before, /setting?table=shop.settings
// showed "Database unreachable since …", answered 503, and marked the
// database down.)
func TestTheDashboardTellsABadTableNameFromAnOutage(t *testing.T) {
	t.Parallel()
	codecs := shoptest.Codecs(t, Product{}, Notice{}, Drawer{}, Receipt{}, shoptest.Setting{})
	h := newHeadOfficeOf(t, codecs)
	register := uuid.New()
	h.exec("INSERT INTO shop.settings (register_id, name, value, changed_at) VALUES ($1, 'footer', 'thank you, come again', $2)", register, at)
	d := dashboard.New(h.s, dashboard.Options{Public: true, Refresh: -1, Logger: quiet()})
	get := func(target string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		body := rec.Body.String()
		// What the page says, without its head of styles.
		if i := strings.Index(body, "<main"); i >= 0 {
			body = body[i:]
		}
		return rec.Code, body
	}
	for _, table := range []string{"settings", "shop.settings"} {
		code, body := get("/setting?table=" + table)
		if code != http.StatusOK || !strings.Contains(body, "thank you, come again") || strings.Contains(body, "unreachable") {
			t.Errorf("/setting?table=%s = %d; want 200 with the value the register reports:\n%s", table, code, body)
		}
	}
	for _, target := range []string{"/setting?table=shop.nope", "/setting?table=nope", "/setting?table=receipts",
		"/setting?table=other.settings", "/wishes?table=shop.nope"} {
		code, body := get(target)
		if code != http.StatusNotFound || !strings.Contains(body, "names no setting table") || strings.Contains(body, "unreachable") {
			t.Errorf("%s = %d; want 404 saying the name is no setting table's, and no word of the database:\n%s", target, code, body)
		}
		if code, body := get("/healthz"); code != http.StatusOK {
			t.Fatalf("after %s, /healthz = %d %q; want the database answering", target, code, body)
		}
	}
	// The database's own failure is an outage.
	h.stop()
	code, body := get("/setting?table=settings")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "Database unreachable since") {
		t.Fatalf("/setting?table=settings with the database gone = %d; want 503 saying the database is unreachable:\n%s", code, body)
	}
}
