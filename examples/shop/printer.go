package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"unicode/utf8"

	"github.com/magicsync/magicsync/replica"
)

// printerWidth is how many characters a line of the receipt printer holds:
// the longest footer it takes.
const printerWidth = 40

// printer is a register's receipt printer, which prints the register's
// footer under every receipt. It carries out the head office's wishes of
// the footer (see Footer): it takes a new footer while it is on, and only
// one that fits its line.
//
// A printer starts on. Switched off, it has the wishes wait; switched back
// on, it has the register offer them again.
type printer struct {
	off atomic.Bool
	// drill is the register's drill (nil: none): the printer dies with
	// the register in the middle of applying a footer when it asks.
	drill *drill
	// backOn is called when the printer is switched back on: the
	// register's OfferWishes. It is set once, before the printer is
	// switched.
	backOn func()
}

// CarryOut takes a new footer, as the head office wishes it: refused when
// it is longer than the printer's line, waiting while the printer is off,
// else applied — the engine then writes it into the register's footers,
// and tells the head office. A drill may kill the register as it applies
// it (see drill.dieInWish).
func (p *printer) CarryOut(ctx context.Context, w replica.Wish[Footer]) replica.Outcome {
	text := w.Wanted.Text
	if utf8.RuneCountInString(text) > printerWidth {
		return replica.Refused(fmt.Sprintf("%q is longer than the printer's %d characters", text, printerWidth))
	}
	if p.off.Load() {
		return replica.Later("the printer is off")
	}
	// A real printer is sent the footer here: the power may be cut then.
	p.drill.dieInWish(ctx)
	return replica.Applied()
}

// switchOff switches the printer off: wishes of the footer wait.
func (p *printer) switchOff() { p.off.Store(true) }

// switchOn switches the printer back on, and has the register offer it
// the wishes that waited for it.
func (p *printer) switchOn() {
	if p.off.Swap(false) && p.backOn != nil {
		p.backOn()
	}
}

// screen is a register's screen. It carries out the head office's wishes
// of the register's other settings (see RegisterSetting): its brightness,
// a level from 0 to 10, is the screen's to take; any other setting lives
// only in the register's database, which the engine writes.
type screen struct {
	// drill is the register's drill (nil: none): the screen dies with the
	// register in the middle of applying a setting when it asks.
	drill *drill
}

// maxBrightness is the screen's brightest level; 0 is its dimmest.
const maxBrightness = 10

// CarryOut takes a setting: a brightness that is no level of the screen
// is refused, every other value applied. A drill may kill the register as
// it applies one (see drill.dieInWish).
func (s screen) CarryOut(ctx context.Context, w replica.Wish[RegisterSetting]) replica.Outcome {
	if w.Wanted.Name != "brightness" {
		s.drill.dieInWish(ctx)
		return replica.Applied()
	}
	level, err := strconv.Atoi(w.Wanted.Value)
	if err != nil || level < 0 || level > maxBrightness {
		return replica.Refused(fmt.Sprintf("%q is no brightness: the screen takes a level from 0 to %d", w.Wanted.Value, maxBrightness))
	}
	// A real screen is set to the level here: the power may be cut then.
	s.drill.dieInWish(ctx)
	return replica.Applied()
}

// wishHandlers are a register's handlers of the head office's wishes: its
// footer through its printer p, its other settings through its screen s.
func wishHandlers(p *printer, s screen) replica.Wishes {
	return replica.Wishes{
		replica.Handle[Footer](p),
		replica.Handle[RegisterSetting](s),
	}
}
