package main

// floors.go holds the floors of the ratios to a baseline, in one place:
// the least acceptable figure over its baseline, measured in the same
// run. The run enforces each at full sizes and, with its value for short
// sizes, under -short (CI). A ratio means the same at any size, only
// noisier at small ones; and on a machine whose cores other work keeps
// busy, the side that spends more CPU (the engine's, mostly) loses more
// than the one that waits for the disk, so a ratio also sinks as the load
// rises. The short floors lie below the lowest ratio measured at short
// sizes on a 2-core machine shared with other work, at load averages from
// 5 to 17: that is their margin, stated with each. They catch a
// regression that makes the engine's side about twice as slow as it is,
// not a small one; the full run, on a quieter machine, judges closer.

const (
	// applyBatchFloor (1): a message of rows applied against the same
	// upserts in one bare transaction, the fastest of several runs of
	// each. Short sizes: 0.46 to 0.64 at most loads, 0.31 at a load
	// average of 14 on 2 cores, 0.86 at best, over 18 runs.
	applyBatchFloor      = 0.5
	applyBatchFloorShort = 0.25

	// applyMessagesFloor (2): one-row messages against one-row
	// transactions, in alternating rounds. Short sizes: 0.60 to 1.24
	// over 30 runs.
	applyMessagesFloor      = 0.7
	applyMessagesFloorShort = 0.5

	// uploadFloor (3): an upload filed against COPY of as many rows, the
	// median of 5 alternating runs of each. Short sizes: 0.37 to 1.05
	// over 14 runs.
	uploadFloor      = 0.3
	uploadFloorShort = 0.25

	// hostWritesFloor (11): the host's writes with the engine's triggers
	// (and Run planning what they note) against the same writes without
	// them, in alternating rounds. Short sizes: 0.37 to 0.97 over 6 runs
	// of 5 rounds; 0.38 to 1.31 over 14 runs of one round each.
	hostWritesFloor      = 0.5
	hostWritesFloorShort = 0.3

	// wishesFloor (12): wishes answered per second against rows fanned
	// out per second, both to the server's record. Short sizes: 0.19 to
	// 0.45 over 14 runs. Full size: 0.19 and 0.20 measured with the
	// baseline timed to the replicas' Receive, which made the ratio
	// smaller.
	wishesFloor      = 0.15
	wishesFloorShort = 0.12

	// followsFloor (13): followers moved with their parents against as
	// many grouped rows moved alone: following may cost its query per
	// moved parent, not the fleet. Full size: 0.68, 0.93 and 1.18 on a
	// shared 2-core machine, one move each. Short sizes: 0.55 to 2.14
	// over 17 runs.
	followsFloor      = 0.5
	followsFloorShort = 0.4
)
