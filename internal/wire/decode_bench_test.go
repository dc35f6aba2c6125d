// This file holds benchmarks of the message decoders: a replica's message
// of 10,000 six-column rows, as bench 8 decodes it, and an upload of as
// many rows with a rejection each.

package wire

import (
	"fmt"
	"testing"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// benchRows is the number of rows in a benchmark's message.
const benchRows = 10_000

// benchTable is a table's part of benchRows six-column rows.
func benchTable() *syncpb.TableChanges {
	tc := &syncpb.TableChanges{Table: "items", Columns: []string{"id", "name", "price", "qty", "weight", "updated_at"}}
	for i := range benchRows {
		id := UUIDValue([16]byte{byte(i), byte(i >> 8), 7})
		tc.Upserts = append(tc.Upserts, tuple(id, TextValue(fmt.Sprintf("item number %d", i)),
			IntValue(int64(100+i)), IntValue(int64(i%50)), FloatValue(float64(i)/7), TimeValue(1704067200000000+int64(i))))
		tc.UpsertKeys = append(tc.UpsertKeys, tuple(id))
	}
	return tc
}

func BenchmarkDecodeToReplica(b *testing.B) {
	msg := mustEncodeToReplica(b, &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: []*syncpb.TableChanges{benchTable()}}}})
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeToReplica(msg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
}

func BenchmarkDecodeToServer(b *testing.B) {
	up := &syncpb.Up{Tables: []*syncpb.TableChanges{benchTable()}}
	for i := range benchRows {
		up.Rejected = append(up.Rejected, &syncpb.Rejected{Table: "items", Key: key(int64(i)), Reason: "a constraint", Message: 3})
	}
	msg := mustEncodeToServer(b, &syncpb.ToServer{Replica: replicaID, Lane: "main", Sequence: 1, Up: up})
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeToServer(msg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
}
