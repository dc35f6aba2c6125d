package wire

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Run each for a while before a release, e.g.
//
//	go test -run='^$' -fuzz=FuzzDecodeToReplica -fuzztime=30s ./internal/wire/
//
// Whatever they find goes into testdata/fuzz, and runs with every go test.

// nearValid returns b and inputs a byte or two away from it.
func nearValid(b []byte) [][]byte {
	out := [][]byte{b}
	if len(b) > 1 {
		out = append(out, b[:len(b)-1], b[1:], b[:len(b)/2])
		flipped := append([]byte{}, b...)
		flipped[len(b)/2] ^= 0x80
		out = append(out, flipped)
	}
	return append(out, append(append([]byte{}, b...), 0))
}

// checkError checks that a decoder's error says malformed or newer, never
// both, never something else.
func checkError(t *testing.T, err error) {
	t.Helper()
	var newer *NewerProtocolError
	isNewer, isMalformed := errors.As(err, &newer), errors.Is(err, ErrMalformed)
	if isNewer == isMalformed {
		t.Fatalf("error %v: newer %v, malformed %v", err, isNewer, isMalformed)
	}
	if isNewer && newer.Got <= Protocol {
		t.Fatalf("newer protocol error for protocol %d", newer.Got)
	}
}

func FuzzDecodeTuple(f *testing.F) {
	for _, b := range goldenFiles(f) {
		for _, s := range nearValid(b) {
			f.Add(s)
		}
	}
	for _, v := range allKinds() {
		for _, s := range nearValid(AppendTuple(nil, []Value{v, v})) {
			f.Add(s)
		}
	}
	f.Add(AppendTuple(nil, workedExample))
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{0x80, 0x00})
	f.Add([]byte{0x01, 0x03, 0x80, 0x00})
	f.Add([]byte{0x01, 0x05, 0x01, 0xff})
	f.Add([]byte{0x01, 0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, err := DecodeTuple(b, nil)
		n, verr := ValidateTuple(b)
		if (err == nil) != (verr == nil) {
			t.Fatalf("DecodeTuple: %v; ValidateTuple: %v", err, verr)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) || !errors.Is(verr, ErrMalformed) {
				t.Fatalf("errors %v, %v do not wrap ErrMalformed", err, verr)
			}
			return
		}
		if n != len(vals) {
			t.Fatalf("ValidateTuple counts %d, DecodeTuple %d", n, len(vals))
		}
		// One encoding per value: what decodes encodes back into itself.
		again := AppendTuple(nil, vals)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded\n% x\nfrom\n% x", again, b)
		}
		vals2, err := DecodeTuple(again, nil)
		if err != nil || len(vals2) != len(vals) {
			t.Fatalf("decoding again: %d values, %v", len(vals2), err)
		}
		for i := range vals {
			if !vals[i].Equal(vals2[i]) {
				t.Fatalf("value %d: %+v, then %+v", i, vals[i], vals2[i])
			}
		}
	})
}

func FuzzDecodeToReplica(f *testing.F) {
	for _, b := range goldenFiles(f) {
		for _, s := range nearValid(b) {
			f.Add(s)
		}
	}
	newer := append(protowire.AppendVarint([]byte{0x08}, uint64(Protocol)+1), mustEncodeToReplica(f, sampleFiled())[2:]...)
	f.Add(newer)
	f.Add([]byte{0x08, 0x01})
	f.Add([]byte{0x08, 0x01, 0x10, 0x01, 0x52, 0x00})
	f.Add([]byte{0x08, 0x01, 0x10, 0x01, 0x5a, 0x02, 0x08, 0x01})
	f.Add([]byte{0x08, 0x01, 0x10, 0x01, 0x52, 0x00, 0x62, 0x00})
	f.Add(toReplicaAround(fieldDown, repeat(nil, 1, appendField(nil, 1, []byte("t")), 1000)))
	f.Add(toReplicaAround(fieldEndSnapshot, append([]byte{0x08, 0x01}, repeat(nil, 4, []byte("t"), 1000)...)))
	f.Add(filedAround([]byte{0x20, 0x11, 0x22, 0x02, 0x12, 0x13, 0x20, 0x14})) // earlier, unpacked and packed
	f.Add(filedAround(appendField(nil, 4, bytes.Repeat([]byte{0x01}, 1000))))  // earlier, many
	f.Add(mustEncodeToReplica(f, sampleCommands()))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m *syncpb.ToReplica
		var err error
		checkAllocated(t, b, func() { m, err = DecodeToReplica(b) })
		checkAgreesWithProto(t, b, m, err, new(syncpb.ToReplica))
		if err != nil {
			checkError(t, err)
			return
		}
		// What an engine does next: decode every row, which may fail.
		for _, tc := range m.GetDown().GetTables() {
			for _, u := range tc.Upserts {
				if _, err := DecodeTuple(u, nil); err != nil && !errors.Is(err, ErrMalformed) {
					t.Fatalf("upsert: %v", err)
				}
			}
		}
		enc, err := EncodeToReplica(m)
		if err != nil {
			t.Fatalf("decoded, but does not encode: %v", err)
		}
		m2, err := DecodeToReplica(enc)
		if err != nil {
			t.Fatalf("encoded, but does not decode: %v", err)
		}
		if !proto.Equal(m, m2) {
			t.Fatalf("decoded\n%v\nthen\n%v", m, m2)
		}
		if enc2 := mustEncodeToReplica(t, m2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoded twice, differs:\n% x\n% x", enc, enc2)
		}
	})
}

func FuzzDecodeToServer(f *testing.F) {
	for _, b := range goldenFiles(f) {
		for _, s := range nearValid(b) {
			f.Add(s)
		}
	}
	up := mustEncodeToServer(f, sampleUp())
	f.Add(append(protowire.AppendVarint([]byte{0x08}, uint64(Protocol)+1), up[2:]...))
	f.Add(mustEncodeToServer(f, sampleUpMinimal()))
	f.Add(mustEncodeToServer(f, sampleCommandAnswers()))
	f.Add([]byte{0x08, 0x01})
	f.Add(toServerAround(repeat(nil, 2, appendField(nil, 1, []byte("t")), 1000)))
	f.Add(toServerAround(appendField(nil, 1, append(appendField(nil, 1, []byte("t")), repeat(nil, 5, []byte{1, 0}, 1000)...))))
	f.Add(toServerAround(repeat(nil, 11, append([]byte{0x08, 0x2a}, appendField(nil, 2, []byte("truncated"))...), 3))) // undecodable messages
	f.Fuzz(func(t *testing.T, b []byte) {
		var m *syncpb.ToServer
		var err error
		checkAllocated(t, b, func() { m, err = DecodeToServer(b) })
		checkAgreesWithProto(t, b, m, err, new(syncpb.ToServer))
		if err != nil {
			checkError(t, err)
			return
		}
		for _, tc := range m.GetUp().GetTables() {
			for _, u := range tc.Upserts {
				if _, err := DecodeTuple(u, nil); err != nil && !errors.Is(err, ErrMalformed) {
					t.Fatalf("upsert: %v", err)
				}
			}
		}
		enc, err := EncodeToServer(m)
		if err != nil {
			t.Fatalf("decoded, but does not encode: %v", err)
		}
		m2, err := DecodeToServer(enc)
		if err != nil {
			t.Fatalf("encoded, but does not decode: %v", err)
		}
		if !proto.Equal(m, m2) {
			t.Fatalf("decoded\n%v\nthen\n%v", m, m2)
		}
		if enc2 := mustEncodeToServer(t, m2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoded twice, differs:\n% x\n% x", enc, enc2)
		}
	})
}

// checkAllocated checks that decode, decoding b, allocates within
// allocBound.
func checkAllocated(t *testing.T, b []byte, decode func()) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	decode()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > allocBound(b) {
		t.Fatalf("%d bytes allocated decoding %d, more than %d", got, len(b), allocBound(b))
	}
}

// checkAgreesWithProto checks that a message the decoder took, m, is what
// proto.Unmarshal makes of b, unknown fields included: the decoder refuses
// more, never reads differently.
func checkAgreesWithProto(t *testing.T, b []byte, m proto.Message, err error, want proto.Message) {
	t.Helper()
	if err != nil {
		return
	}
	if perr := proto.Unmarshal(b, want); perr != nil {
		t.Fatalf("decoded, but proto.Unmarshal refuses it: %v", perr)
	}
	if !proto.Equal(m, want) {
		t.Fatalf("decoded\n%v\nproto.Unmarshal reads\n%v", m, want)
	}
}

// sampleUpMinimal is the least a replica sends: who, which lane, and an
// empty Up.
func sampleUpMinimal() *syncpb.ToServer {
	return &syncpb.ToServer{Replica: replicaID, Lane: "main", Sequence: 1, Up: &syncpb.Up{}}
}
