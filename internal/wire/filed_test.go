package wire

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// sampleFiledMerged is a Filed that confirms three uploads of a lane,
// merged while they waited: 19, and 17 and 18 in earlier; a row refused
// in 17 names it, one refused in 19 names none.
func sampleFiledMerged() *syncpb.ToReplica {
	return &syncpb.ToReplica{
		Id: 99,
		Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{
			Lane:     "main",
			Sequence: 19,
			Earlier:  []uint64{17, 18},
			Refused: []*syncpb.Rejected{
				{Table: "receipts", Key: tuple(UUIDValue([16]byte{9})), Reason: "origin is another replica", Message: 17},
				{Table: "receipts", Key: tuple(UUIDValue([16]byte{10})), Reason: "the database refused the row"},
			},
		}},
	}
}

// filedAround wraps the fields of a Filed in a ToReplica with id 1.
func filedAround(fields []byte) []byte {
	return toReplicaAround(fieldFiled, append([]byte{0x0a, 0x04, 'm', 'a', 'i', 'n', 0x10, 0x13}, fields...))
}

// TestMergedFiledDocumented checks the merged Filed PROTOCOL.md takes
// apart.
func TestMergedFiledDocumented(t *testing.T) {
	const documented = "08 01 10 63 62 0c 0a 04 6d 61 69 6e 10 13 22 02 11 12"
	b := mustEncodeToReplica(t, &syncpb.ToReplica{Id: 99, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{
		Lane: "main", Sequence: 19, Earlier: []uint64{17, 18}}}})
	if want := unhex(t, documented); !bytes.Equal(b, want) {
		t.Fatalf("encodes as % x, PROTOCOL.md says % x", b, want)
	}
	doc, err := os.ReadFile("../../proto/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), documented) {
		t.Fatalf("PROTOCOL.md does not show %q", documented)
	}
}

// TestFiledEarlierPackedOrNot checks that earlier reads as proto.Unmarshal
// reads it whichever way it is written — packed, one varint field per
// entry, or both, in order — and that a packed field holding anything but
// whole varints is refused, as proto.Unmarshal refuses it.
func TestFiledEarlierPackedOrNot(t *testing.T) {
	unpacked := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = protowire.AppendVarint(protowire.AppendTag(b, 4, protowire.VarintType), v)
		}
		return b
	}
	packed := func(vs ...uint64) []byte {
		var v []byte
		for _, x := range vs {
			v = protowire.AppendVarint(v, x)
		}
		return appendField(nil, 4, v)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want []uint64
	}{
		{"packed", filedAround(packed(17, 18, 300)), []uint64{17, 18, 300}},
		{"unpacked", filedAround(unpacked(17, 18, 300)), []uint64{17, 18, 300}},
		{"both, in order", filedAround(append(append(unpacked(3), packed(17, 18)...), unpacked(1<<40)...)), []uint64{3, 17, 18, 1 << 40}},
		{"packed twice", filedAround(append(packed(5, 6), packed(7)...)), []uint64{5, 6, 7}},
		{"empty packed", filedAround(packed()), nil},
	} {
		m, err := DecodeToReplica(c.b)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := new(syncpb.ToReplica)
		if err := proto.Unmarshal(c.b, want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(m, want) {
			t.Errorf("%s: decoded\n%v\nproto.Unmarshal reads\n%v", c.name, m, want)
		}
		if got := m.GetFiled().GetEarlier(); !slices.Equal(got, c.want) {
			t.Errorf("%s: earlier %v, want %v", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"a varint cut short", filedAround(appendField(nil, 4, []byte{0x11, 0x80}))},
		{"a varint too long", filedAround(appendField(nil, 4, bytes.Repeat([]byte{0xff}, 11)))},
	} {
		_, err := DecodeToReplica(c.b)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "filed.earlier") {
			t.Errorf("%s: %v, want malformed, naming filed.earlier", c.name, err)
		}
		if err := proto.Unmarshal(c.b, new(syncpb.ToReplica)); err == nil {
			t.Errorf("%s: proto.Unmarshal takes it", c.name)
		}
	}
}
