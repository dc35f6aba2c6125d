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
// 4 to 17: that is their margin; each states the ratios measured. They
// catch a regression that makes the engine's side about twice as slow as
// it is, not a small one; the full run, on a quieter machine, judges
// closer.

const (
	// applyBatchFloor (1): a message of rows applied against the same
	// upserts in one bare transaction, the fastest of several runs of
	// each, alternating. Short sizes: 0.31 to 0.96 over 24 runs, 0.46 or
	// more but at a load average of 14.
	applyBatchFloor      = 0.5
	applyBatchFloorShort = 0.25

	// applyMessagesFloor (2): one-row messages against one-row
	// transactions, in alternating rounds. Short sizes: 0.63 to 1.15
	// over 34 runs. Full size: 0.71 in the run of 0b9d56d; 0.61 to 0.67
	// over 6 runs of 69c130f and fd2fd54 alternating, on a machine whose
	// baseline ran faster.
	applyMessagesFloor      = 0.6
	applyMessagesFloorShort = 0.5

	// uploadFloor (3): an upload filed against COPY of as many rows, the
	// median of 5 alternating runs of each. Short sizes: 0.25 to 1.05
	// over 29 runs, 0.35 or more but at a load average of 17.
	uploadFloor      = 0.3
	uploadFloorShort = 0.2

	// hostWritesFloor (11): the host's writes with the engine capturing
	// them (and Run planning what it notes) against the same writes
	// without, in alternating rounds; the same floor in both capture
	// modes. Short sizes: 0.33 to 0.99 over 12 runs of totals, and once
	// 0.24 in CI, when a stall of the disk fell on the engine's rounds;
	// since each side is the median of its rounds: 0.42 to 1.27 over 10
	// runs. On the durable cluster with wal_level=logical both modes run
	// on since, at load averages of 3 to 6: triggers 0.32 to 0.96,
	// logical replication 0.70 to 2.3 over 4 runs at short sizes; 0.57
	// to 0.59 and 0.54 to 0.61 over 3 full runs.
	hostWritesFloor      = 0.5
	hostWritesFloorShort = 0.25

	// wishesFloor (12): wishes answered per second against rows fanned
	// out per second, both to the server's record. Short sizes: 0.19 to
	// 0.45 over 21 runs; full size: 0.32 (0.19 and 0.20 when the rows
	// were timed to the replicas' Receive and the wishes to a poll of
	// the server, which made the ratio smaller); 0.15 in the run of
	// 0b9d56d, 0.13 to 0.14 over 3 runs of fd2fd54 (and of 69c130f, the
	// same), whose baseline ran at 25,000 rows/s where it ran at 15,700.
	wishesFloor      = 0.12
	wishesFloorShort = 0.12

	// followsFloor (13): followers moved with their parents against as
	// many grouped rows moved alone: following may cost its query per
	// moved parent, not the fleet. Full size: 1.37, the fastest of 3
	// moves each (0.68, 0.93 and 1.18 with one move each). Short sizes:
	// 0.56 to 1.72 over 12 runs.
	followsFloor      = 0.5
	followsFloorShort = 0.4
)
