package server_test

import (
	"errors"
	"testing"
	"time"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
)

// Settings and Wishes take a setting table named as its replicas name it
// or with its schema, and refuse any other name with an error a caller can
// tell from the database failing: ErrNotDeclared for a name of no declared
// table, ErrNotASetting for a table that is no setting. (Before, Settings
// refused "shop.settings" with a plain error, which the dashboard took for
// an outage, and Wishes listed nothing for it.)
func TestSettingsAndWishesTakeTheSchemaQualifiedNameAndTellABadOne(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	tx, err := w.s.Begin(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	row.Value = "Merci"
	if _, err := server.Desire(w.ctx, w.s, tx, row, "the office"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(w.ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"settings", "shop.settings"} {
		rows, err := w.s.Settings(w.ctx, name)
		if err != nil || len(rows) != 1 {
			t.Errorf("Settings(%q) = %d rows, %v; want the register's one", name, len(rows), err)
		}
		list, err := w.s.Wishes(w.ctx, server.WishScope{Table: name})
		if err != nil || len(list.Wishes) != 1 || list.Wishes[0].Table != "settings" {
			t.Errorf("Wishes of %q = %+v, %v; want the one wish, of table settings", name, list.Wishes, err)
		}
	}
	for name, want := range map[string]error{
		"nope":           magicsync.ErrNotDeclared,
		"shop.nope":      magicsync.ErrNotDeclared,
		"other.settings": magicsync.ErrNotDeclared,
		"shop.":          magicsync.ErrNotDeclared,
		"products":       server.ErrNotASetting,
		"shop.products":  server.ErrNotASetting,
	} {
		if _, err := w.s.Settings(w.ctx, name); !errors.Is(err, want) {
			t.Errorf("Settings(%q) = %v; want an error wrapping %v", name, err, want)
		}
		if _, err := w.s.Wishes(w.ctx, server.WishScope{Table: name}); !errors.Is(err, want) {
			t.Errorf("Wishes of %q = %v; want an error wrapping %v", name, err, want)
		}
	}
}
