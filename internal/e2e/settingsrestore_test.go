package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// dump takes a pg_dump of the head office's database, while it runs.
func (h *headOffice) dump(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "office.dump")
	url := h.pool.Config().ConnString()
	if out, err := exec.CommandContext(context.Background(), pgTool(t, "pg_dump"), "--format=custom", "--file="+file, "--dbname="+url).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	return file
}

// restoreDump stops the engine, puts the head office's database back as
// the dump has it, and starts a new engine over it: a head office
// restarted on a database restored from an older dump.
func (h *headOffice) restoreDump(t *testing.T, file string) {
	t.Helper()
	h.stop()
	url := h.pool.Config().ConnString()
	out, err := exec.CommandContext(context.Background(), pgTool(t, "pg_restore"), "--clean", "--if-exists", "--no-owner", "--no-privileges",
		"--exit-on-error", "--single-transaction", "--dbname="+url, file).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
	h.startEngine()
}

// settingsOffice is a head office whose registers apply every wish and
// send their digests often: the safety net that finds either side
// restored from an older copy.
func settingsOffice(t *testing.T) *headOffice {
	t.Helper()
	h := newSettingsOffice(t, &printer{})
	wishes := h.tune
	h.tune = func(s *replica.Settings) { wishes(s); s.DigestsEvery = 200 * time.Millisecond }
	return h
}

// The head office restored from an older pg_dump: it lost a setting filed
// and a wish applied since. Both sides still end showing the same
// settings and the same answer to every wish.
func TestSettingsAndAnswersAgreeAfterTheHeadOfficeIsRestoredFromADump(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := settingsOffice(t)
		g := h.addRegister(h.addShop(), d)
		g.setLocally("footer", "Thank you", time.Now().Add(-time.Hour))
		footer := h.filedOnce(g, "footer", "Thank you")
		footer.Value = "Merci"
		w := h.desire(footer, "")
		h.waitForWish(footer, w.Number, server.WishApplied, "")
		settleWishes(t, h, g)
		file := h.dump(t)

		g.setLocally("volume", "3", time.Now())
		h.filedOnce(g, "volume", "3")
		footer = h.filedOnce(g, "footer", "Merci")
		footer.Value = "Danke"
		w = h.desire(footer, "")
		h.waitForWish(footer, w.Number, server.WishApplied, "")

		h.restoreDump(t, file)
		if _, ok := h.filedSetting(g.id, "volume"); ok {
			t.Fatal("the restored head office holds the setting filed after the dump: no restore to speak of")
		}
		settleWishes(t, h, g)
		if _, ok := h.filedSetting(g.id, "volume"); !ok {
			t.Error("the setting filed after the dump never came back to the head office")
		}
	})
}

// A register restored from an older copy of its file: it lost a setting
// written and a wish applied since. Both sides still end showing the same
// settings and the same answer to every wish.
func TestSettingsAndAnswersAgreeAfterARegisterIsRestoredFromAnOlderCopy(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := settingsOffice(t)
		g := h.addRegister(h.addShop(), d)
		g.setLocally("footer", "Thank you", time.Now().Add(-time.Hour))
		footer := h.filedOnce(g, "footer", "Thank you")
		footer.Value = "Merci"
		w := h.desire(footer, "")
		h.waitForWish(footer, w.Number, server.WishApplied, "")
		settleWishes(t, h, g)
		// A copy of the register's database, taken with it stopped.
		g.stop()
		if err := g.db.Close(); err != nil {
			t.Fatal(err)
		}
		backup := g.path + ".backup"
		copyDatabase(t, g.path, backup)
		g = h.attachAt(g.id, d, g.path, false)

		g.setLocally("volume", "3", time.Now())
		h.filedOnce(g, "volume", "3")
		footer = h.filedOnce(g, "footer", "Merci")
		footer.Value = "Danke"
		w = h.desire(footer, "")
		h.waitForWish(footer, w.Number, server.WishApplied, "")
		settleWishes(t, h, g)

		// The disk dies; the copy comes back.
		g.stop()
		if err := g.db.Close(); err != nil {
			t.Fatal(err)
		}
		copyDatabase(t, backup, g.path)
		g = h.attachAt(g.id, d, g.path, false)
		settleWishes(t, h, g)
	})
}
