package main

import (
	"sync"
)

// tally.go holds the count of faults injected, by kind.

// fault is a kind of fault the soak injects.
type fault string

// The faults, in the order the report lists them.
const (
	faultLostBefore   fault = "request lost before the head office"
	faultLostAfter    fault = "answer lost after the head office"
	faultDoubled      fault = "request sent twice"
	faultDelayed      fault = "request delayed"
	faultHeldBack     fault = "request held back, later ones passing it"
	faultCutRequest   fault = "request body cut mid-way"
	faultCutAnswer    fault = "answer body cut mid-way"
	faultPartitioned  fault = "request of a partitioned register"
	faultPartition    fault = "register partitioned for a while"
	faultKillReg      fault = "register SIGKILLed"
	faultKillInWish   fault = "register SIGKILLed inside a wish handler"
	faultKillOffice   fault = "head-office process SIGKILLed"
	faultOldCopy      fault = "register's file restored from an older copy"
	faultPGRestart    fault = "PostgreSQL restarted"
	faultPGDump       fault = "PostgreSQL restored from a dump"
	faultDiskFull     fault = "register's disk full"
	faultDiskReadOnly fault = "register's disk read-only"
	faultClock        fault = "register's clock stepped back or forward"
	faultPrices       fault = "catalog write at the head office"
	// loadMoves is load, not a fault: a register moved to the other shop.
	loadMoves fault = "register moved to another shop"
	// faultStoppedWithError is not injected: a program that stopped with
	// an error it named (its database away as it started) and was
	// started again, as a supervisor would.
	faultStoppedWithError fault = "program stopped with an error and started again"
)

// faultOrder lists every kind, as reported.
var faultOrder = []fault{
	faultLostBefore, faultLostAfter, faultDoubled, faultDelayed, faultHeldBack,
	faultCutRequest, faultCutAnswer, faultPartition, faultPartitioned,
	faultKillReg, faultKillInWish, faultKillOffice, faultOldCopy, faultDiskFull, faultDiskReadOnly,
	faultPGRestart, faultPGDump, faultClock,
}

// tally counts what happened, by kind; it is shared by the links and the
// scheduler.
type tally struct {
	mu sync.Mutex
	n  map[fault]int
}

// newTally returns an empty tally.
func newTally() *tally { return &tally{n: map[fault]int{}} }

// add counts one of f.
func (t *tally) add(f fault) {
	t.mu.Lock()
	t.n[f]++
	t.mu.Unlock()
}

// get returns the count of f.
func (t *tally) get(f fault) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[f]
}

// faults is how many faults were injected in all (catalog writes and
// registers moved are load, not faults).
func (t *tally) faults() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, f := range faultOrder {
		n += t.n[f]
	}
	return n
}
