package wire

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// upOfEveryRow returns a message to the server holding n rows of each kind
// DecodeToServerRows counts.
func upOfEveryRow(t *testing.T, n int) []byte {
	t.Helper()
	key := AppendTuple(nil, []Value{{Kind: Int, I: 1}})
	tc := &syncpb.TableChanges{Table: "t", Columns: []string{"id"}}
	up := &syncpb.Up{Tables: []*syncpb.TableChanges{tc}}
	for range n {
		tc.Upserts = append(tc.Upserts, key)
		tc.UpsertKeys = append(tc.UpsertKeys, key)
		tc.Deletes = append(tc.Deletes, key)
		up.Rejected = append(up.Rejected, &syncpb.Rejected{Table: "t", Key: key})
		up.Cleared = append(up.Cleared, &syncpb.Rejected{Table: "t", Key: key})
		up.Unsent = append(up.Unsent, &syncpb.Count{Table: "t", Rows: 1})
		up.Answers = append(up.Answers, &syncpb.Answer{Table: "t", Key: key, State: syncpb.WishState_WISH_STATE_PENDING})
	}
	b, err := EncodeToServer(&syncpb.ToServer{Replica: make([]byte, 16), Lane: "main", Sequence: 1, Up: up})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every kind of entry counts as a row: upserts (not their keys), deletes,
// rejected and cleared rows, answers and unsent counts.
func TestDecodeToServerRowsCountsEveryKindOfRow(t *testing.T) {
	t.Parallel()
	const kinds = 6
	b := upOfEveryRow(t, 10)
	if _, err := DecodeToServerRows(b, 0, kinds*10); err != nil {
		t.Fatalf("%d rows, bound %d: %v", kinds*10, kinds*10, err)
	}
	_, err := DecodeToServerRows(b, 0, kinds*10-1)
	if !errors.Is(err, ErrTooManyRows) || !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrMalformed) {
		t.Fatalf("%d rows, bound %d: %v; want ErrTooManyRows, not ErrMalformed", kinds*10, kinds*10-1, err)
	}
	if want := "it holds 60 rows, more than the 59"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if _, err := DecodeToServerLimit(b, 0); err != nil {
		t.Errorf("DecodeToServerLimit bounds no rows: %v", err)
	}
}

// A message of tiny rows beyond the bound is refused by the scan, before
// anything is decoded: what is allocated is the error's, whatever its size.
// (Not parallel: it reads the process's allocation count, as the package's
// other allocation tests do.)
func TestDecodeToServerRowsRefusesBeforeAllocating(t *testing.T) {
	row := AppendTuple(nil, []Value{{Kind: Int, I: 1}})
	var tc []byte
	tc = protowire.AppendTag(tc, 1, protowire.BytesType)
	tc = protowire.AppendString(tc, "t")
	tc = protowire.AppendTag(tc, 2, protowire.BytesType)
	tc = protowire.AppendString(tc, "id")
	const n = 1 << 20
	tc = repeat(tc, 3, []byte{0xff}, n)
	tc = repeat(tc, 4, row, n)
	b := toServerAround(appendField(nil, 1, tc))
	var err error
	got := bytesAllocated(2, func() { _, err = DecodeToServerRows(b, 0, 50_000) })
	if !errors.Is(err, ErrTooManyRows) {
		t.Fatalf("%d rows: %v, want ErrTooManyRows", n, err)
	}
	t.Logf("%d bytes of %d rows refused, %d bytes allocated: %v", len(b), n, got, err)
	if got > 4<<10 {
		t.Errorf("%d bytes allocated to refuse %d bytes", got, len(b))
	}
}
