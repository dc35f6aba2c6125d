package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/magicsync/magicsync/server"
)

// busy.go holds the head office's busy operator (shop headoffice
// -wish-every D): every D it acts as an operator at the dashboard would,
// for drills and the soak. Most times it wishes one register, drawn at
// random among those the head office serves, another footer or screen
// brightness; about one time in five it withdraws instead a wish still on
// its way or waiting, if there is one; about one time in ten it rolls a
// footer out to every register, unless a rollout it started still runs.
// It says each act in one line. An act that fails (PostgreSQL away, say)
// is said in one line, and the operator acts again at its next turn: it
// never stops the head office.
//
// Every head office given the flag acts so: over one database, give it to
// one of them, or the registers are wished as often as by that many
// operators.

// busyActTimeout bounds one act of the busy operator: a database that does
// not answer fails the act, and the head office goes on.
const busyActTimeout = 10 * time.Second

// busyOperator is the head office's busy operator.
type busyOperator struct {
	ho  *headOffice
	rnd *rand.Rand
	say func(string, ...any)
	// footers are the texts it wishes registers' footers.
	footers []string
	// rollout is the last rollout it started, while it may still run; 0
	// when none does. rolled counts those it started, whose footers it
	// takes from rolloutFooters in turn.
	rollout int64
	rolled  int
}

// newBusyOperator is the head office's busy operator, saying its acts
// with say.
func newBusyOperator(ho *headOffice, say func(string, ...any)) *busyOperator {
	return &busyOperator{ho: ho, say: say, rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11)),
		footers: slices.Concat(dayFooters, []string{nextFooter, technicianFooter})}
}

// act acts once: a wish, a withdrawal or a rollout, said in one line; a
// failure is said too, and ends nothing.
func (o *busyOperator) act(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, busyActTimeout)
	defer cancel()
	var err error
	switch n := o.rnd.IntN(10); {
	case n == 0:
		err = o.rollOut(actx)
	case n <= 2:
		err = o.withdraw(actx)
	default:
		err = o.wish(actx)
	}
	if err != nil && ctx.Err() == nil {
		o.say("operator could not act: %v; it acts again at its next turn", err)
	}
}

// wish wishes a register drawn at random another footer, or its screen
// another brightness.
func (o *busyOperator) wish(ctx context.Context) error {
	i := o.rnd.IntN(o.ho.registers)
	id, name := registerID(i), registerName(i)
	if o.rnd.IntN(2) == 0 {
		level := o.rnd.IntN(maxBrightness + 1)
		w, err := o.ho.wishSetting(ctx, id, "brightness", strconv.Itoa(level))
		if err != nil {
			return fmt.Errorf("wishing %s's screen brightness %d: %w", name, level, err)
		}
		o.say("operator wishes %s's screen brightness %d (wish %d)", name, level, w.Number)
		return nil
	}
	footers, err := o.ho.footers(ctx)
	if err != nil {
		return fmt.Errorf("reading the registers' footers: %w", err)
	}
	others := slices.DeleteFunc(slices.Clone(o.footers), func(text string) bool { return text == footers[id].Text })
	text := others[o.rnd.IntN(len(others))]
	w, err := o.ho.wishFooterOf(ctx, footers, id, text)
	if err != nil {
		return fmt.Errorf("wishing %s the footer %q: %w", name, text, err)
	}
	o.say("operator wishes %s the footer %q (wish %d)", name, text, w.Number)
	return nil
}

// withdraw withdraws a wish drawn at random among those still on their
// way or waiting; with none, it wishes instead.
func (o *busyOperator) withdraw(ctx context.Context) error {
	list, err := o.ho.engine.Wishes(ctx, server.WishScope{})
	if err != nil {
		return fmt.Errorf("reading the wishes: %w", err)
	}
	open := slices.DeleteFunc(list.Wishes, func(w server.WishSummary) bool {
		return w.State != server.WishPending && w.State != server.WishWaiting
	})
	if len(open) == 0 {
		return o.wish(ctx)
	}
	w := open[o.rnd.IntN(len(open))]
	if err := o.ho.withdraw(ctx, w); err != nil {
		return fmt.Errorf("withdrawing wish %d of %s: %w", w.Number, o.ho.wishWords(w), err)
	}
	still := "still on its way"
	if w.State == server.WishWaiting {
		still = "still waiting: " + w.Reason
	}
	o.say("operator withdraws wish %d of %s, %s", w.Number, o.ho.wishWords(w), still)
	return nil
}

// rollOut rolls a footer out to every register, unless a rollout it
// started still runs: it wishes instead.
func (o *busyOperator) rollOut(ctx context.Context) error {
	if o.rollout != 0 {
		st, err := o.ho.engine.RolloutStatus(ctx, o.rollout)
		if err != nil {
			return fmt.Errorf("reading its rollout %d: %w", o.rollout, err)
		}
		if st.State == server.RolloutRunning {
			return o.wish(ctx)
		}
		o.rollout = 0
	}
	text := rolloutFooters[o.rolled%len(rolloutFooters)]
	r, err := o.ho.rollFooter(ctx, text)
	if err != nil {
		return fmt.Errorf("rolling the footer %q out: %w", text, err)
	}
	o.rollout = r.ID
	o.rolled++
	o.say("operator rolls the footer %q out to every register (rollout %d): %d of %d registers wished, the others once it is carried out", text, r.ID, r.Wished, r.Replicas)
	return nil
}
