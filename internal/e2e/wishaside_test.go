package e2e

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/dashboard"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// A register whose build has no handler for a setting — an older build
// that does not declare the table — cannot carry out a wish of it. The
// wish is set aside, not left "on its way" for ever: the register answers
// it waiting, saying why, the head office shows it so (WishesOf, Wishes
// and the dashboard's wish list), and a later build that handles the
// setting carries it out as it starts.
func TestAWishABuildWithoutItsHandlerCannotCarryOutWaitsForOneThatCan(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := newSettingsOffice(t, &printer{})
		id := uuid.New()
		h.exec("INSERT INTO shop.registers (id, shop_id) VALUES ($1, $2)", id, h.addShop())
		// The older build: the shop without settings, and no handler.
		old := h.attachWith(id, d, registerOptions{codecs: shopCodecs(t), tune: func(s *replica.Settings) { s.Wishes = nil }})
		if _, err := old.db.Exec("INSERT INTO settings (register_id, name, value, changed_at) VALUES (?, 'footer', 'Thanks', ?)", id, at); err != nil {
			t.Fatal(err)
		}
		settleAll(t, old)

		wanted := Setting{RegisterID: id, Name: "footer", Value: "Merci", ChangedAt: at}
		w := h.desire(wanted, "ann at the office")
		h.waitForWish(wanted, w.Number, server.WishWaiting, `"settings"`)
		got, _ := h.wishOf(wanted)
		t.Logf("the head office shows the wish %v: %s", got.State, got.Reason)
		list, err := h.s.Wishes(t.Context(), server.WishScope{Replica: id})
		if err != nil {
			t.Fatal(err)
		}
		if list.Counts[server.WishWaiting] != 1 || list.Counts[server.WishPending] != 0 || len(list.Wishes) != 1 || list.Wishes[0].Reason != got.Reason {
			t.Errorf("Wishes = %+v; want the one wish waiting, with its reason", list)
		}
		page := dashboardPage(t, h.s, "/wishes?replica="+id.String())
		if strings.Contains(page, "on its way") || !strings.Contains(page, "waiting") || !strings.Contains(page, html.EscapeString(got.Reason)) {
			t.Errorf("the dashboard's wish list does not show the wish waiting, with its reason %q:\n%s", got.Reason, page)
		}
		if v := old.localSetting("footer"); v != "Thanks" {
			t.Errorf("the older build changed the footer to %q", v)
		}

		// The next build handles the setting: it carries the wish out as it
		// starts.
		old.stop()
		g := h.attachAt(id, d, old.path, false)
		h.waitForWish(wanted, w.Number, server.WishApplied, "")
		h.filedOnce(g, "footer", "Merci")
		if v := g.localSetting("footer"); v != "Merci" {
			t.Errorf("the register holds %q", v)
		}
	})
}

// dashboardPage reads a page of the dashboard over s.
func dashboardPage(t *testing.T, s *server.Server, path string) string {
	t.Helper()
	srv := httptest.NewServer(dashboard.New(s, dashboard.Options{Public: true, Logger: quiet()}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", path, resp.Status, b)
	}
	return string(b)
}
