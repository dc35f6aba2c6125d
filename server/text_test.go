package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// safeText reports whether s is text PostgreSQL keeps and a message
// carries, within the bound of a reason.
func safeText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 && len(s) <= safetext.MaxReason
}

// An upload whose answer, report and build hold text PostgreSQL cannot
// take as it is — a NUL, a megabyte — is filed whole, that text made
// safe: the register is not answered with an outage for what it said,
// and the rows beside it are filed. An answer or a clearing naming a
// table the server does not declare changes nothing.
func TestAnUploadWithTextPostgreSQLCannotTakeIsFiledWithItMadeSafe(t *testing.T) {
	t.Parallel()
	for _, reason := range []string{"printer\x00off", "printer " + strings.Repeat("off ", 1<<18)} {
		w := newWishShop(t)
		r := w.register()
		row := w.setting(r, "footer", "Thank you", time.Now())
		row.Value = "Merci"
		wished := w.desire(row, "")
		w.pass()
		w.drain(r)
		other := shoptest.Setting{RegisterID: r, Name: "header", Value: "Welcome", ChangedAt: time.Now().UTC().Truncate(time.Microsecond)}
		w.upload(r, &syncpb.Up{
			Build:  "till\x00v2",
			Tables: []*syncpb.TableChanges{shoptest.Changes(t, w.codecs, other)},
			Answers: []*syncpb.Answer{
				{Table: wished.Table, Key: []byte(wished.Key), Wish: wished.Number, State: syncpb.WishState_WISH_STATE_WAITING, Reason: reason, AnsweredAt: time.Now().UnixMicro()},
				{Table: "settings\x00", Key: []byte(wished.Key), Wish: wished.Number, State: syncpb.WishState_WISH_STATE_REFUSED, Reason: "no", AnsweredAt: time.Now().UnixMicro()},
			},
			Rejected: []*syncpb.Rejected{{Table: "currencies", Key: []byte(w.key(row)), Reason: reason}},
			Cleared:  []*syncpb.Rejected{{Table: "currencies\x00", Key: []byte(w.key(row))}},
		})
		st := w.wishOf(row)
		if st.State != server.WishWaiting || !strings.HasPrefix(st.Reason, "printer") || !safeText(st.Reason) {
			t.Errorf("the wish stands %v: %.80q (%d bytes)", st.State, st.Reason, len(st.Reason))
		}
		if s, ok := w.filed(r, "header"); !ok || s.Value != "Welcome" {
			t.Errorf("the row beside the answer: %+v, %v", s, ok)
		}
		all, err := w.s.Status(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, rs := range all {
			if rs.ID != r {
				continue
			}
			if !strings.HasPrefix(rs.Build, "till") || !safeText(rs.Build) {
				t.Errorf("build %q", rs.Build)
			}
			if len(rs.Rejected) != 1 || !strings.HasPrefix(rs.Rejected[0].Reason, "printer") || !safeText(rs.Rejected[0].Reason) {
				t.Errorf("rejected %.200v", rs.Rejected)
			}
		}
	}
}

// A lane whose name PostgreSQL cannot keep is refused for good, not
// answered as an outage the register would wait out forever.
func TestAnUploadOfALaneNamedWithANULIsRefusedForGood(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	body := shoptest.Upload(t, r, "main\x00", 1, &syncpb.Up{Build: "v1"})
	err := w.s.Endpoint().Receive(w.ctx, r, "", body)
	if !errors.Is(err, server.ErrPermanent) || !strings.Contains(err.Error(), "lane") {
		t.Fatalf("Receive: %v", err)
	}
}

// filed reads a register's setting as the server holds it.
func (w *wishShop) filed(register uuid.UUID, name string) (shoptest.Setting, bool) {
	w.t.Helper()
	var s shoptest.Setting
	err := w.pool.QueryRow(w.ctx, `SELECT register_id, name, value, changed_at FROM shop.settings WHERE register_id = $1 AND name = $2`,
		register, name).Scan(&s.RegisterID, &s.Name, &s.Value, &s.ChangedAt)
	return s, err == nil
}

// A register's delete of a row whose key holds a NUL — a row PostgreSQL
// cannot hold, so the server has none — deletes nothing and fails
// nothing: the rows beside it are filed.
func TestADeleteOfAKeyHoldingANULDeletesNothingAndTheUploadIsFiled(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	other := shoptest.Setting{RegisterID: r, Name: "header", Value: "Welcome", ChangedAt: time.Now().UTC().Truncate(time.Microsecond)}
	ch := shoptest.Changes(t, w.codecs, other)
	ch.Deletes = [][]byte{[]byte(w.key(shoptest.Setting{RegisterID: r, Name: "foot\x00er"}))}
	w.upload(r, &syncpb.Up{Tables: []*syncpb.TableChanges{ch}})
	if s, ok := w.filed(r, "header"); !ok || s.Value != "Welcome" {
		t.Errorf("the row beside the delete: %+v, %v", s, ok)
	}
}

// An answer whose time PostgreSQL cannot hold is filed, at the nearest
// time it can: the register is not answered with an outage for it.
func TestAnAnswerAtATimePostgreSQLCannotHoldIsFiled(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "Merci"
	wished := w.desire(row, "")
	w.pass()
	w.drain(r)
	w.upload(r, &syncpb.Up{Answers: []*syncpb.Answer{{Table: wished.Table, Key: []byte(wished.Key), Wish: wished.Number,
		State: syncpb.WishState_WISH_STATE_REFUSED, Reason: "no", AnsweredAt: -1 << 62}}})
	if st := w.wishOf(row); st.State != server.WishRefused {
		t.Errorf("the wish stands %v", st.State)
	}
}
