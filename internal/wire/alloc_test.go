package wire

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// allocBound is what a decoder may allocate for b: eight bytes for each of
// its bytes, and room for the decoder's own state, the checks' scratch and
// an error. The decoders promise maxDecodedPerByte per byte and
// decodedSlack besides; the rest is the checks' and the error's.
func allocBound(b []byte) uint64 { return uint64(maxDecodedPerByte*len(b)) + decodedSlack + 128<<10 }

// repeat appends n copies of the field num holding v.
func repeat(b []byte, num protowire.Number, v []byte, n int) []byte {
	for range n {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendBytes(b, v)
	}
	return b
}

// appendField appends the field num holding v.
func appendField(b []byte, num protowire.Number, v []byte) []byte { return repeat(b, num, v, 1) }

// toServerAround wraps the bytes of an Up in a ToServer that is otherwise
// sound.
func toServerAround(up []byte) []byte {
	b := protowire.AppendVarint([]byte{0x08}, uint64(Protocol))
	b = appendField(b, 2, replicaID)
	b = appendField(b, 3, []byte("main"))
	b = protowire.AppendVarint(append(b, 0x20), 1)
	return appendField(b, 5, up)
}

// toReplicaAround wraps the bytes of a body in a ToReplica with id 1.
func toReplicaAround(body protowire.Number, inner []byte) []byte {
	b := protowire.AppendVarint([]byte{0x08}, uint64(Protocol))
	b = protowire.AppendVarint(append(b, 0x10), 1)
	return appendField(b, body, inner)
}

// adversarial returns inputs of about size bytes, each packed with the
// smallest entries of one repeated field, empty or the least that passes
// the checks, as someone trying to make a decoder allocate would send.
func adversarial(size int) map[string][]byte {
	key := []byte{0x01, 0x00}
	table := appendField(nil, 1, []byte("t"))
	n := func(each int) int { return size / each }
	tc := func(fields []byte) []byte { return append(append([]byte{}, table...), fields...) }
	cases := map[string][]byte{
		"up: empty rejected":       toServerAround(repeat(nil, 2, nil, n(2))),
		"up: rejected, table":      toServerAround(repeat(nil, 2, table, n(5))),
		"up: empty tables":         toServerAround(repeat(nil, 1, nil, n(2))),
		"up: tables, table":        toServerAround(repeat(nil, 1, table, n(5))),
		"up: empty digests":        toServerAround(repeat(nil, 4, nil, n(2))),
		"up: empty answers":        toServerAround(repeat(nil, 5, nil, n(2))),
		"up: answers, minimal":     toServerAround(repeat(nil, 5, append(appendField(table, 2, key), 0x20, 0x01), n(11))),
		"up: empty unsent":         toServerAround(repeat(nil, 8, nil, n(2))),
		"up: unsent, table":        toServerAround(repeat(nil, 8, table, n(5))),
		"up: empty undecodable":    toServerAround(repeat(nil, 11, nil, n(2))),
		"up: undecodable, minimal": toServerAround(repeat(nil, 11, []byte{0x08, 0x01}, n(4))),
		"up: empty upserts": toServerAround(appendField(nil, 1, tc(
			repeat(appendField(nil, 2, []byte("c")), 3, nil, n(2))))),
		"up: empty upserts, keys": toServerAround(appendField(nil, 1, tc(
			repeat(repeat(appendField(nil, 2, []byte("c")), 3, nil, n(6)), 4, key, n(6))))),
		"up: deletes, minimal":      toServerAround(appendField(nil, 1, tc(repeat(nil, 5, key, n(4))))),
		"up: empty deletes":         toServerAround(appendField(nil, 1, tc(repeat(nil, 5, nil, n(2))))),
		"up: columns":               toServerAround(appendField(nil, 1, tc(repeat(nil, 2, []byte("c"), n(3))))),
		"up: tables of 17 columns":  toServerAround(repeat(nil, 1, tc(manyColumns(17)), n(5+17*4))),
		"up: unknown fields":        toServerAround(bytes.Repeat([]byte{0xf8, 0x01, 0x00}, n(3))),
		"up: empty unknown strings": toServerAround(bytes.Repeat([]byte{0xfa, 0x01, 0x00}, n(3))),
		"to server: unknown fields": append(toServerAround(nil), bytes.Repeat([]byte{0xf8, 0x01, 0x00}, n(3))...),
		"up: rejected with unknown": toServerAround(repeat(nil, 2, []byte{0xf8, 0x01, 0x00}, n(5))),

		"down: empty tables":    toReplicaAround(fieldDown, repeat(nil, 1, nil, n(2))),
		"down: tables, table":   toReplicaAround(fieldDown, repeat(nil, 1, table, n(5))),
		"down: empty wishes":    toReplicaAround(fieldDown, repeat(nil, 3, nil, n(2))),
		"down: wishes, minimal": toReplicaAround(fieldDown, repeat(nil, 3, append(appendField(table, 2, key), 0x48, 0x01), n(11))),
		"down: empty upserts, keys": toReplicaAround(fieldDown, appendField(nil, 1, tc(
			repeat(repeat(appendField(nil, 2, []byte("c")), 3, nil, n(6)), 4, key, n(6))))),
		"down: deletes":             toReplicaAround(fieldDown, appendField(nil, 1, tc(repeat(nil, 5, key, n(4))))),
		"snapshot: empty own":       toReplicaAround(fieldEndSnapshot, append([]byte{0x08, 0x01}, repeat(nil, 2, nil, n(2))...)),
		"snapshot: own, table":      toReplicaAround(fieldEndSnapshot, append([]byte{0x08, 0x01}, repeat(nil, 2, table, n(5))...)),
		"snapshot: own keys":        toReplicaAround(fieldEndSnapshot, append([]byte{0x08, 0x01}, appendField(nil, 2, tc(repeat(nil, 2, key, n(4))))...)),
		"snapshot: empty answers":   toReplicaAround(fieldEndSnapshot, append([]byte{0x08, 0x01}, repeat(nil, 3, nil, n(2))...)),
		"snapshot: answers, key":    toReplicaAround(fieldEndSnapshot, append([]byte{0x08, 0x01}, repeat(nil, 3, appendField(table, 2, key), n(9))...)),
		"snapshot: empty tables":    toReplicaAround(fieldEndSnapshot, append([]byte{0x08, 0x01}, repeat(nil, 4, nil, n(2))...)),
		"snapshot: tables":          toReplicaAround(fieldEndSnapshot, append([]byte{0x08, 0x01}, repeat(nil, 4, []byte("t"), n(3))...)),
		"filed: empty refused":      toReplicaAround(fieldFiled, append(appendField(nil, 1, []byte("l")), append([]byte{0x10, 0x01}, repeat(nil, 3, nil, n(2))...)...)),
		"filed: refused, table":     toReplicaAround(fieldFiled, append(appendField(nil, 1, []byte("l")), append([]byte{0x10, 0x01}, repeat(nil, 3, table, n(5))...)...)),
		"filed: earlier, packed":    toReplicaAround(fieldFiled, append(appendField(nil, 1, []byte("l")), append([]byte{0x10, 0x01}, appendField(nil, 4, bytes.Repeat([]byte{0x01}, n(1)))...)...)),
		"filed: earlier, unpacked":  toReplicaAround(fieldFiled, append(appendField(nil, 1, []byte("l")), append([]byte{0x10, 0x01}, bytes.Repeat([]byte{0x20, 0x01}, n(2))...)...)),
		"to replica: unknown bytes": append(toReplicaAround(fieldFiled, []byte{0x0a, 0x01, 'l', 0x10, 0x01}), bytes.Repeat([]byte{0xfa, 0x01, 0x00}, n(3))...),
	}
	return cases
}

// manyColumns is the columns field of a table part holding n distinct
// two-letter names.
func manyColumns(n int) []byte {
	var b []byte
	for i := range n {
		b = appendField(b, 2, []byte{'a' + byte(i/26), 'a' + byte(i%26)})
	}
	return b
}

// decodeEither decodes b as the message its shape says it is.
func decodeEither(b []byte, toServer bool) (proto.Message, error) {
	if toServer {
		return DecodeToServer(b)
	}
	return DecodeToReplica(b)
}

// TestDecodersAllocateWithinABoundOfTheInput feeds the decoders messages
// packed with tiny entries of every repeated field, refused or not, and
// checks that none makes them allocate more than allocBound.
func TestDecodersAllocateWithinABoundOfTheInput(t *testing.T) {
	size := 1 << 20
	if testing.Short() {
		size = 64 << 10
	}
	for name, b := range adversarial(size) {
		toServer := strings.HasPrefix(name, "up") || strings.HasPrefix(name, "to server")
		var err error
		got := bytesAllocated(2, func() { _, err = decodeEither(b, toServer) })
		if err != nil {
			checkError(t, err)
		}
		t.Logf("%s: %d bytes, %d allocated (%.1f×), %v", name, len(b), got, float64(got)/float64(len(b)), err)
		if bound := allocBound(b); got > bound {
			t.Errorf("%s: %d bytes allocated for %d bytes of message, more than %d", name, got, len(b), bound)
		}
	}
}

// TestDecoderRefusesBeforeAllocating checks that a message packed with
// entries the checks refuse anyway is refused before it is decoded, saying
// where.
func TestDecoderRefusesBeforeAllocating(t *testing.T) {
	const n = 100_000
	for _, c := range []struct {
		name     string
		b        []byte
		toServer bool
		where    string
	}{
		{"empty rejected", toServerAround(repeat(nil, 2, nil, n)), true, "up.rejected[0]: malformed: no table name"},
		{"empty tables", toServerAround(repeat(nil, 1, appendField(nil, 1, []byte("t")), 1)), true, ""},
		{"empty table second", toServerAround(repeat(repeat(nil, 1, appendField(nil, 1, []byte("t")), 1), 1, nil, n)), true, "up.tables[1]: malformed: no table name"},
		{"empty refused", toReplicaAround(fieldFiled, append([]byte{0x0a, 0x01, 'l', 0x10, 0x01}, repeat(nil, 3, nil, n)...)), false, "filed.refused[0]: malformed: no table name"},
		{"empty own", toReplicaAround(fieldEndSnapshot, append([]byte{0x08, 0x01}, repeat(nil, 2, nil, n)...)), false, "end_snapshot.own[0]: malformed: no table name"},
		{"empty wishes", toReplicaAround(fieldDown, repeat(nil, 3, nil, n)), false, "down.wishes[0]: malformed: no table name"},
		{"up twice", append(toServerAround(nil), appendField(nil, 5, nil)...), true, "up twice"},
		{"crowded", toServerAround(repeat(nil, 2, appendField(nil, 1, []byte("t")), n)), true, "entries of up.rejected"},
	} {
		var err error
		got := bytesAllocated(2, func() { _, err = decodeEither(c.b, c.toServer) })
		if c.where == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.where) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.where)
		}
		// Refused before decoding: what is allocated is the error's.
		if got > 4<<10 {
			t.Errorf("%s: %d bytes allocated to refuse %d bytes", c.name, got, len(c.b))
		}
	}
}

// TestRealisticMessagesAreNotCrowded checks that messages a server and a
// replica really send, with small rows, stay clear of the bound on what a
// message decodes into.
func TestRealisticMessagesAreNotCrowded(t *testing.T) {
	const rows = 50_000
	tc := &syncpb.TableChanges{Table: "tags", Columns: []string{"id"}}
	for i := range rows {
		k := key(int64(i))
		tc.Upserts = append(tc.Upserts, k)
		tc.UpsertKeys = append(tc.UpsertKeys, k)
		tc.Deletes = append(tc.Deletes, key(int64(rows+i)))
	}
	down := &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: []*syncpb.TableChanges{tc}}}}
	up := &syncpb.ToServer{Replica: replicaID, Lane: "main", Sequence: 1, Up: &syncpb.Up{Tables: []*syncpb.TableChanges{tc}}}
	for i := range rows {
		up.Up.Rejected = append(up.Up.Rejected, &syncpb.Rejected{Table: "tags", Key: key(int64(i)), Reason: "a constraint"})
	}
	end := &syncpb.ToReplica{Id: 2, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{Snapshot: 1}}}
	for i := range rows {
		e := end.GetEndSnapshot()
		k := tuple(UUIDValue([16]byte(replicaID)), UUIDValue([16]byte{byte(i), byte(i >> 8), byte(i >> 16)}))
		e.Answers = append(e.Answers, &syncpb.WishRef{Table: "settings", Key: k, Wish: uint64(i)})
	}
	for name, b := range map[string][]byte{
		"down":         mustEncodeToReplica(t, down),
		"up":           mustEncodeToServer(t, up),
		"end snapshot": mustEncodeToReplica(t, end),
	} {
		s, err := scanMessage(b, name != "up")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		per := float64(s.total()) / float64(len(b))
		t.Logf("%s: %d bytes decode into %.1f bytes each", name, len(b), per)
		if per > maxDecodedPerByte*3/4 {
			t.Errorf("%s: decodes into %.1f bytes per byte, too near %d", name, per, maxDecodedPerByte)
		}
	}
}

// TestDecoderAgreesWithProto checks the decoder against proto.Unmarshal on
// every message the tests build, with unknown fields at every level.
func TestDecoderAgreesWithProto(t *testing.T) {
	var msgs [][]byte
	for _, m := range []*syncpb.ToReplica{sampleDown(), sampleEndSnapshot(), sampleFiled()} {
		msgs = append(msgs, mustEncodeToReplica(t, m))
	}
	msgs = append(msgs, mustEncodeToServer(t, sampleUp()), mustEncodeToServer(t, sampleUpMinimal()))
	for i, b := range msgs {
		toServer := i >= 3
		for _, v := range withUnknownFields(b, toServer) {
			got, err := decodeEither(v, toServer)
			if err != nil {
				t.Fatalf("message %d: %v\n% x", i, err, v)
			}
			want := got.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(v, want); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Errorf("message %d: decoded\n%v\nproto.Unmarshal\n%v", i, got, want)
			}
		}
	}
}

// withUnknownFields returns b, and b with fields no build knows added at
// the top, in the body, and in each entry of its first repeated field.
func withUnknownFields(b []byte, toServer bool) [][]byte {
	extra := appendField(protowire.AppendVarint([]byte{0xf8, 0x01}, 7), 32, []byte("later"))
	extra = append(extra, 0x2d, 1, 2, 3, 4) // field 5, fixed32: a known number of another type
	out := [][]byte{b, append(append([]byte{}, b...), extra...)}
	// Rebuild with extra inside the body and its entries.
	var top []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		body := (toServer && num == 5) || (!toServer && num >= fieldDown)
		if !body || typ != protowire.BytesType {
			top = append(top, b[:n+m]...)
			b = b[n+m:]
			continue
		}
		v, _ := protowire.ConsumeBytes(b[n:])
		var inner []byte
		for len(v) > 0 {
			num, typ, n := protowire.ConsumeTag(v)
			m := protowire.ConsumeFieldValue(num, typ, v[n:])
			if typ == protowire.BytesType && num <= 4 {
				e, _ := protowire.ConsumeBytes(v[n:])
				if len(e) > 0 && e[0] == 0x0a { // an entry with a table name
					inner = appendField(inner, num, append(append([]byte{}, e...), extra...))
					v = v[n+m:]
					continue
				}
			}
			inner = append(inner, v[:n+m]...)
			v = v[n+m:]
		}
		top = appendField(top, num, append(inner, extra...))
		b = b[n+m:]
	}
	return append(out, top)
}

// TestEncodersRefuseCrowdedMessages checks that what the decoders would
// refuse as crowded is not sent.
func TestEncodersRefuseCrowdedMessages(t *testing.T) {
	up := &syncpb.Up{}
	filed := &syncpb.Filed{Lane: "main", Sequence: 1}
	for range 100_000 {
		up.Rejected = append(up.Rejected, &syncpb.Rejected{Table: "t"})
		filed.Refused = append(filed.Refused, &syncpb.Rejected{Table: "t"})
	}
	_, err := EncodeToServer(&syncpb.ToServer{Replica: replicaID, Lane: "main", Sequence: 1, Up: up})
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "crowded") {
		t.Errorf("to the server: %v, want a crowded message refused", err)
	}
	_, err = EncodeToReplica(&syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Filed{Filed: filed}})
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "crowded") {
		t.Errorf("to a replica: %v, want a crowded message refused", err)
	}
}

// TestDecoderKnowsEveryField fills every field of every message, twice
// over for lists, and checks that the decoder reads each as proto.Unmarshal
// does: a field added to sync.proto and not to the decoder would be kept
// as unknown, and differ.
func TestDecoderKnowsEveryField(t *testing.T) {
	for _, m := range []proto.Message{new(syncpb.ToServer), new(syncpb.ToReplica)} {
		_, toServer := m.(*syncpb.ToServer)
		bodies := 1
		if !toServer {
			bodies = 3
		}
		for body := range bodies {
			populate(m.ProtoReflect(), body)
			b := marshal(t, m)
			s, err := scanMessage(b, !toServer)
			if err != nil {
				t.Fatalf("%T: %v", m, err)
			}
			d := newDecoder(s)
			var got proto.Message
			if toServer {
				got = d.toServer(b)
			} else {
				got = d.toReplica(b)
			}
			if !proto.Equal(got, m) {
				t.Errorf("decoded\n%v\nwant\n%v", got, m)
			}
			if len(got.ProtoReflect().GetUnknown()) > 0 {
				t.Errorf("%T: unknown fields %x", got, got.ProtoReflect().GetUnknown())
			}
			if d.text.Len() != s.text || len(d.bytes) != s.bytes {
				t.Errorf("%T: the scan counted %d bytes of text and %d of bytes, the decoder used %d and %d",
					m, s.text, s.bytes, d.text.Len(), len(d.bytes))
			}
		}
	}
}

// populate sets every field of m to something other than its zero value,
// lists to two entries, and the oneof to its body-th member.
func populate(m protoreflect.Message, body int) {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if od := fd.ContainingOneof(); od != nil && od.Fields().Get(body) != fd {
			continue
		}
		value := func(n int) protoreflect.Value {
			switch fd.Kind() {
			case protoreflect.BoolKind:
				return protoreflect.ValueOfBool(true)
			case protoreflect.EnumKind:
				return protoreflect.ValueOfEnum(protoreflect.EnumNumber(3 + n))
			case protoreflect.Int64Kind:
				return protoreflect.ValueOfInt64(-1 - int64(n))
			case protoreflect.Uint32Kind:
				return protoreflect.ValueOfUint32(7 + uint32(n))
			case protoreflect.Uint64Kind:
				return protoreflect.ValueOfUint64(1<<40 + uint64(n))
			case protoreflect.StringKind:
				return protoreflect.ValueOfString(fmt.Sprintf("%s é %d", fd.Name(), n))
			case protoreflect.BytesKind:
				return protoreflect.ValueOfBytes([]byte{byte(fd.Number()), byte(n)})
			case protoreflect.MessageKind:
				var sub protoreflect.Message
				if fd.IsList() {
					sub = m.Mutable(fd).List().NewElement().Message()
				} else {
					sub = m.NewField(fd).Message()
				}
				populate(sub, 0)
				return protoreflect.ValueOfMessage(sub)
			}
			panic(fd.Kind())
		}
		if fd.IsList() {
			l := m.Mutable(fd).List()
			l.Append(value(0))
			l.Append(value(1))
			continue
		}
		m.Set(fd, value(0))
	}
}
