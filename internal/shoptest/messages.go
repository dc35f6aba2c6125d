// This file holds the builders of the messages the tests send a server as
// a replica would.

package shoptest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Changes returns rows, all of one table of codecs, as a replica uploads
// them: every column, each row's tuple and key. It ends the test when a row
// is not of codecs or does not encode.
func Changes[T magicsync.Declarer](t testing.TB, codecs *magicsync.Codecs, rows ...T) *syncpb.TableChanges {
	t.Helper()
	tc, err := codec.TableOf[T](codecs)
	if err != nil {
		t.Fatal(err)
	}
	ch := &syncpb.TableChanges{Table: tc.Name, Columns: tc.ColumnNames(nil)}
	for _, r := range rows {
		vals, err := tc.Values(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		ch.Upserts = append(ch.Upserts, tc.EncodeRow(nil, vals, nil))
		ch.UpsertKeys = append(ch.UpsertKeys, []byte(tc.KeyOfRow(vals)))
	}
	return ch
}

// Upload returns the body of an upward message: up, sent by replica in lane
// under sequence seq. It ends the test when up does not encode.
func Upload(t testing.TB, replica uuid.UUID, lane string, seq uint64, up *syncpb.Up) []byte {
	t.Helper()
	body, err := wire.EncodeToServer(&syncpb.ToServer{Replica: replica[:], Lane: lane, Sequence: seq, Up: up})
	if err != nil {
		t.Fatal(err)
	}
	return body
}
