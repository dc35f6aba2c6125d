package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
)

// The head office's half of the registers' settings: it reads the footers
// the registers report, wishes them other values, and follows where its
// wishes stand. The registers' half, which carries the wishes out, is in
// printer.go.

// footers reads the registers' footers as the head office last heard of
// them, by register.
func (ho *headOffice) footers(ctx context.Context) (map[uuid.UUID]Footer, error) {
	rows, err := ho.pool.Query(ctx, "SELECT register_id, text, changed_at FROM shop.footers")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[uuid.UUID]Footer{}
	for rows.Next() {
		f, err := magicsync.Scan[Footer](ho.codecs, rows)
		if err != nil {
			return nil, err
		}
		out[f.RegisterID] = f
	}
	return out, rows.Err()
}

// wishFooter wishes a register the footer text, as an operator would from
// a page that showed them the footer seen: the register carries the wish
// out only while its footer is still the one seen.
func (ho *headOffice) wishFooter(ctx context.Context, seen Footer, text string) (server.Wished, error) {
	seen.Text = text
	return wish(ctx, ho, seen, "the head office's operator")
}

// wishFooterOf wishes the register id the footer text, in place of the
// one footers (the registers' footers as the head office last heard of
// them) hold for it. Of a register not heard of yet, the wish is based
// on no footer seen: whatever it holds stands.
func (ho *headOffice) wishFooterOf(ctx context.Context, footers map[uuid.UUID]Footer, id uuid.UUID, text string) (server.Wished, error) {
	seen, ok := footers[id]
	if !ok {
		seen.RegisterID = id
	}
	return ho.wishFooter(ctx, seen, text)
}

// wishSetting wishes one of a register's other settings the value.
func (ho *headOffice) wishSetting(ctx context.Context, register uuid.UUID, name, value string) (server.Wished, error) {
	return wish(ctx, ho, RegisterSetting{RegisterID: register, Name: name, Value: value}, "the head office's operator")
}

// withdraw takes back a wish the registers have not answered yet, in a
// transaction of its own: the register it was for does not carry it out
// (one it carried out meanwhile stays carried out).
func (ho *headOffice) withdraw(ctx context.Context, w server.WishSummary) error {
	tx, err := ho.engine.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // after Commit, does nothing
	switch w.Table {
	case "footers":
		err = server.Withdraw[Footer](ctx, ho.engine, tx, w.Key)
	case "register_settings":
		err = server.Withdraw[RegisterSetting](ctx, ho.engine, tx, w.Key)
	default:
		err = fmt.Errorf("%s is no setting table of the shop's", w.Table)
	}
	if err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// wishWords says what a wish wishes, in words: `register 2's footer
// "Open on Sundays"`, `a setting of register 1, the value "7"`.
func (ho *headOffice) wishWords(w server.WishSummary) string {
	if w.Table == "footers" {
		return fmt.Sprintf("%s's footer %q", ho.name(w.Replica), fmt.Sprint(w.Wanted["text"]))
	}
	return fmt.Sprintf("a setting of %s, the value %q", ho.name(w.Replica), fmt.Sprint(w.Wanted["value"]))
}

// wish wishes a setting row's desired columns the values row holds, in a
// transaction of its own, noting who asked. The next pass sends it to the
// register the row belongs to.
func wish[T any](ctx context.Context, ho *headOffice, row T, note string) (server.Wished, error) {
	tx, err := ho.engine.Begin(ctx)
	if err != nil {
		return server.Wished{}, err
	}
	defer tx.Rollback(ctx) // after Commit, does nothing
	w, err := server.Desire(ctx, ho.engine, tx, row, note)
	if err != nil {
		return server.Wished{}, err
	}
	return w, tx.Commit(ctx)
}

// wishWatch follows the wishes the head office made, as the registers
// answer them, and says in plain words when one comes to stand elsewhere:
// waiting and why, carried out, refused and why, or superseded by a change
// made on the register first.
type wishWatch struct {
	ho  *headOffice
	say func(string, ...any)
	// followed holds the wishes followed: the latest of each setting row.
	followed map[wishedRow]*followedWish
}

// wishedRow names a setting row.
type wishedRow struct {
	table string
	key   magicsync.Key
}

// followedWish is a wish the watch follows.
type followedWish struct {
	number uint64
	// register names the register that carries it out; setting and value
	// say what was wished, as `footer` and `"Open on Sundays"`.
	register, setting, value string
	// state and reason are where the watch last said the wish stands.
	state  server.WishState
	reason string
}

func newWishWatch(ho *headOffice, say func(string, ...any)) *wishWatch {
	return &wishWatch{ho: ho, say: say, followed: map[wishedRow]*followedWish{}}
}

// follow follows a wish the head office made, in place of an earlier wish
// of the same setting row.
func (w *wishWatch) follow(wished server.Wished, register, setting, value string) {
	w.followed[wishedRow{wished.Table, wished.Key}] = &followedWish{number: wished.Number,
		register: register, setting: setting, value: value, state: server.WishPending}
}

// stands says where the watch last said a wish stands: pending until it
// said otherwise, or when it follows a later wish of the same row.
func (w *wishWatch) stands(wished server.Wished) server.WishState {
	f := w.followed[wishedRow{wished.Table, wished.Key}]
	if f == nil || f.number != wished.Number {
		return server.WishPending
	}
	return f.state
}

// answered says whether the watch said a wish answered for good: carried
// out, refused or superseded.
func (w *wishWatch) answered(wished server.Wished) bool {
	return final(w.stands(wished))
}

// settled says whether the watch said every wish it follows answered for
// good: none is on its way or waiting.
func (w *wishWatch) settled() bool {
	for _, f := range w.followed {
		if !final(f.state) {
			return false
		}
	}
	return true
}

// final says whether a wish standing in state was answered for good.
func final(state server.WishState) bool {
	return state == server.WishApplied || state == server.WishRefused || state == server.WishSuperseded
}

// check reads where the head office's wishes stand, and says those that
// moved since it last looked.
func (w *wishWatch) check(ctx context.Context) error {
	if len(w.followed) == 0 {
		return nil
	}
	list, err := w.ho.engine.Wishes(ctx, server.WishScope{})
	if err != nil {
		return err
	}
	for _, s := range list.Wishes {
		f := w.followed[wishedRow{s.Table, s.Key}]
		if f == nil || f.number != s.Number || (f.state == s.State && f.reason == s.Reason) {
			continue
		}
		var stands string
		if s.State == server.WishSuperseded {
			if stands, err = w.standing(ctx, s); err != nil {
				return err // said at the next check
			}
		}
		f.state, f.reason = s.State, s.Reason
		switch s.State {
		case server.WishWaiting:
			w.say("head office: %s's %s waits to become %s: %s", f.register, f.setting, f.value, s.Reason)
		case server.WishApplied:
			w.say("head office: %s's %s is now %s", f.register, f.setting, f.value)
		case server.WishRefused:
			w.say("head office: %s refused the %s %s: %s", f.register, f.setting, f.value, s.Reason)
		case server.WishSuperseded:
			w.say("head office: %s's %s did not become %s, superseded: it was changed on the register first, and %s stands", f.register, f.setting, f.value, stands)
		}
	}
	return nil
}

// standing says what stands of a setting whose wish was superseded: the
// value the register reported.
func (w *wishWatch) standing(ctx context.Context, s server.WishSummary) (string, error) {
	if s.Table != "footers" {
		return "its own value", nil
	}
	footers, err := w.ho.footers(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%q", footers[s.Replica].Text), nil
}

// wishCounts says in words how many wishes stand where: "3 carried out,
// 1 refused".
func wishCounts(counts map[server.WishState]int) string {
	var parts []string
	for _, c := range []struct {
		state server.WishState
		words string
	}{
		{server.WishApplied, "carried out"},
		{server.WishPending, "on their way"},
		{server.WishWaiting, "waiting"},
		{server.WishRefused, "refused"},
		{server.WishSuperseded, "superseded"},
	} {
		if n := counts[c.state]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, c.words))
		}
	}
	if len(parts) == 0 {
		return "none yet"
	}
	return strings.Join(parts, ", ")
}
