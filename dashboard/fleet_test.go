package dashboard

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/server"
)

// A fake of the data source: fixed statuses, or a fixed error.
type fakeSource struct {
	st  []server.ReplicaStatus
	err error
}

func (f fakeSource) Status(context.Context) ([]server.ReplicaStatus, error) { return f.st, f.err }

var testNow = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

func id(n int) uuid.UUID { return uuid.MustParse(fmt.Sprintf("00000000-0000-4000-8000-%012d", n)) }

func textKey(s string) magicsync.Key { return magicsync.Key(codec.KeyOfValues(wire.TextValue(s))) }

const (
	evilTable  = `<script>alert("t")</script>`
	evilReason = `"><img src=x onerror=alert(1)> & </pre>`
)

// fleet is a fleet in every state the dashboard shows, listed in an order
// the dashboard must change.
func fleet() []server.ReplicaStatus {
	return []server.ReplicaStatus{
		{ID: id(1), Online: true, LastSeen: testNow.Add(-3 * time.Second), LastApplied: 1042, Build: "shop 1.4.2 (a1b2c3d)",
			Tables: []server.TableStatus{
				{Table: "products", Holds: 7, Should: 7},
				{Table: "receipts", Unsent: 0, Filed: 1204},
			}},
		{ID: id(2), Online: true, LastSeen: testNow.Add(-1 * time.Second), Queued: 2, LastApplied: 1040, Build: "shop 1.4.2 (a1b2c3d)",
			Tables: []server.TableStatus{
				{Table: "products", Holds: 5, Should: 7},
				{Table: "receipts", Unsent: 3, Filed: 988},
			}},
		{ID: id(10), Online: false, LastSeen: testNow.Add(-2*time.Hour - 5*time.Minute), Queued: 4, LastApplied: 1001, Build: "shop 1.4.1 (9f8e7d6)",
			Tables: []server.TableStatus{
				{Table: "products", Holds: 7, Should: 7},
				{Table: "receipts", Unsent: 12, Filed: 310},
			}},
		{ID: id(3), Online: true, LastSeen: testNow.Add(-12 * time.Second), Provisioning: true, Queued: 1, LastApplied: 977, Build: "shop 1.4.2 (a1b2c3d)",
			ProvisionReason: "digest of products disagrees: replica holds 5 rows, server expects 7",
			Tables: []server.TableStatus{
				{Table: "products", Holds: 7, Should: 7},
				{Table: "receipts", Filed: 45},
			}},
		{ID: id(4), Online: true, LastSeen: testNow.Add(-2 * time.Second), LastApplied: 1042, Backlog: 2, Build: "shop 1.4.2 (a1b2c3d)",
			Wishes: map[server.WishState]int{server.WishApplied: 3, server.WishWaiting: 1, server.WishRefused: 1},
			Tables: []server.TableStatus{
				{Table: "products", Holds: 7, Should: 7},
				{Table: "receipts", Filed: 2210},
			},
			Rejected: []server.RejectedRow{
				{Table: "receipts", Key: textKey("R-4-0017"), Side: "server", At: testNow.Add(-4 * time.Minute),
					Reason: "row belongs to another replica (register_id 00000000-0000-4000-8000-000000000002)"},
				{Table: "products", Key: textKey("SKU-991"), Side: "replica", At: testNow.Add(-90 * time.Second),
					Reason: "UNIQUE constraint failed: products.barcode"},
			}},
		{ID: id(5), Online: false, Build: ""},
		{ID: id(6), Online: true, LastSeen: testNow.Add(-5 * time.Second), LastApplied: 12, Build: "shop 1.4.2 (a1b2c3d)",
			Tables: []server.TableStatus{{Table: evilTable, Holds: 1, Should: 1}},
			Rejected: []server.RejectedRow{
				{Table: evilTable, Key: textKey(`</code><b>key</b>`), Side: "replica", At: testNow.Add(-time.Minute), Reason: evilReason},
			}},
	}
}

// fleetNames names the fleet's replicas; id(5) is left unnamed.
func fleetNames(u uuid.UUID) string {
	switch u {
	case id(1):
		return "register 1"
	case id(2):
		return "register 2"
	case id(3):
		return "register 3"
	case id(4):
		return "register 4"
	case id(6):
		return "kiosk <i>6</i>"
	case id(10):
		return "register 10"
	}
	return ""
}

func hexKey(s string) (magicsync.Key, error) {
	b, err := hex.DecodeString(s)
	return magicsync.Key(b), err
}
