package wire

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

func tuple(vals ...Value) []byte { return AppendTuple(nil, vals) }

func key(i int64) []byte { return tuple(IntValue(i)) }

var replicaID = []byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// sampleDown is a Down with two tables, parents first, deletes and a wish.
func sampleDown() *syncpb.ToReplica {
	return &syncpb.ToReplica{
		Id: 41,
		Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{
			Tables: []*syncpb.TableChanges{
				{
					Table:      "categories",
					Columns:    []string{"id", "name"},
					Upserts:    [][]byte{tuple(IntValue(1), TextValue("Bakery"))},
					UpsertKeys: [][]byte{key(1)},
				},
				{
					Table:   "products",
					Columns: []string{"id", "category", "name", "price", "updated_at"},
					Upserts: [][]byte{
						tuple(IntValue(10), IntValue(1), TextValue("Baguette"), DecimalValue("1.20"), TimeValue(1704067200000000)),
						tuple(IntValue(11), IntValue(1), TextValue("Croissant"), NullValue(), TimeValue(1704067200000001)),
					},
					UpsertKeys: [][]byte{key(10), key(11)},
					Deletes:    [][]byte{key(7), key(8)},
				},
			},
			Wishes: []*syncpb.Wish{{
				Table:    "register_settings",
				Key:      tuple(UUIDValue([16]byte(replicaID))),
				Wish:     3,
				Columns:  []string{"footer"},
				Wanted:   tuple(TextValue("Merci !")),
				BasedOn:  tuple(IntValue(12)),
				Note:     "ann at the office",
				WishedAt: 1704067200000000,
			}},
		}},
	}
}

// sampleEndSnapshot switches a provisioning in.
func sampleEndSnapshot() *syncpb.ToReplica {
	return &syncpb.ToReplica{
		Id: 97,
		Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{
			Snapshot: 5,
			Own: []*syncpb.TableKeys{
				{Table: "receipts", Keys: [][]byte{tuple(UUIDValue([16]byte{1})), tuple(UUIDValue([16]byte{2}))}},
				{Table: "register_settings"},
			},
			Answers: []*syncpb.WishRef{{Table: "register_settings", Key: tuple(UUIDValue([16]byte(replicaID))), Wish: 3}},
			Tables:  []string{"categories", "products", "prices"},
		}},
	}
}

// sampleFiled confirms an upward message, with rows refused.
func sampleFiled() *syncpb.ToReplica {
	return &syncpb.ToReplica{
		Id: 98,
		Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{
			Lane:     "main",
			Sequence: 17,
			Refused: []*syncpb.Rejected{
				{Table: "receipts", Key: tuple(UUIDValue([16]byte{9})), Reason: "origin is another replica"},
				{Table: "receipts", Reason: "a row that does not decode"},
			},
		}},
	}
}

// sampleUp is a replica's message with rows, rejections, digests and answers.
func sampleUp() *syncpb.ToServer {
	var sum digest.Sum
	sum.Add(tuple(IntValue(10), IntValue(1), TextValue("Baguette"), DecimalValue("1.20"), TimeValue(1704067200000000)))
	sum.Add(tuple(IntValue(11), IntValue(1), TextValue("Croissant"), NullValue(), TimeValue(1704067200000001)))
	return &syncpb.ToServer{
		Replica:  replicaID,
		Lane:     "main",
		Sequence: 18,
		Up: &syncpb.Up{
			Tables: []*syncpb.TableChanges{{
				Table:      "receipts",
				Columns:    []string{"id", "origin", "total", "version"},
				Upserts:    [][]byte{tuple(UUIDValue([16]byte{3}), UUIDValue([16]byte(replicaID)), DecimalValue("3.60"), IntValue(2))},
				UpsertKeys: [][]byte{tuple(UUIDValue([16]byte{3}))},
				Deletes:    [][]byte{tuple(UUIDValue([16]byte{4}))},
			}},
			Rejected: []*syncpb.Rejected{
				{Table: "products", Key: key(12), Reason: "value 3: decimal into an int column", Message: 41},
			},
			LastApplied: 41,
			Digests: []*syncpb.Digest{
				{Table: "products", Sum: sum.Bytes(), Rows: 2, AsOf: 41},
				{Table: "categories", Sum: make([]byte, digest.Size), AsOf: 41},
			},
			Answers: []*syncpb.Answer{{
				Table: "register_settings", Key: tuple(UUIDValue([16]byte(replicaID))), Wish: 3,
				State: syncpb.WishState_WISH_STATE_REFUSED, Reason: "the printer is off", AnsweredAt: 1704067260000000,
			}},
			Build:   "register 2.4.1",
			Unsent:  []*syncpb.Count{{Table: "receipts", Rows: 12}},
			Backlog: 1,
		},
	}
}

func mustEncodeToReplica(t testing.TB, m *syncpb.ToReplica) []byte {
	t.Helper()
	b, err := EncodeToReplica(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustEncodeToServer(t testing.TB, m *syncpb.ToServer) []byte {
	t.Helper()
	b, err := EncodeToServer(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestToReplicaRoundTrip(t *testing.T) {
	for _, m := range []*syncpb.ToReplica{sampleDown(), sampleEndSnapshot(), sampleFiled(),
		{Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{}}},
		{Id: 2, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Snapshot: 5, Tables: []*syncpb.TableChanges{{Table: "t"}}}}},
		{Id: 3, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{Snapshot: 1}}},
		{Id: 4, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "l", Sequence: 1}}},
	} {
		b := mustEncodeToReplica(t, m)
		if m.Protocol != 0 {
			t.Fatalf("EncodeToReplica changed the caller's message: protocol %d", m.Protocol)
		}
		got, err := DecodeToReplica(b)
		if err != nil {
			t.Fatalf("message %d: %v", m.Id, err)
		}
		if got.Protocol != Protocol {
			t.Errorf("message %d: protocol %d, want %d", m.Id, got.Protocol, Protocol)
		}
		m.Protocol = Protocol
		if !proto.Equal(got, m) {
			t.Errorf("message %d: decoded\n%v\nwant\n%v", m.Id, got, m)
		}
		if again := mustEncodeToReplica(t, got); !bytes.Equal(again, b) {
			t.Errorf("message %d: re-encoded differently", m.Id)
		}
	}
}

func TestToServerRoundTrip(t *testing.T) {
	for _, m := range []*syncpb.ToServer{sampleUp(),
		{Replica: replicaID, Lane: "telemetry", Sequence: 1, Up: &syncpb.Up{}},
		{Replica: replicaID, Lane: "main", Sequence: 2, Up: &syncpb.Up{Resent: true, Tables: []*syncpb.TableChanges{
			{Table: "receipts", Deletes: [][]byte{key(1)}}}}},
	} {
		b := mustEncodeToServer(t, m)
		if m.Protocol != 0 {
			t.Fatalf("EncodeToServer changed the caller's message: protocol %d", m.Protocol)
		}
		got, err := DecodeToServer(b)
		if err != nil {
			t.Fatalf("%s %d: %v", m.Lane, m.Sequence, err)
		}
		m.Protocol = Protocol
		if !proto.Equal(got, m) {
			t.Errorf("%s %d: decoded\n%v\nwant\n%v", m.Lane, m.Sequence, got, m)
		}
		if again := mustEncodeToServer(t, got); !bytes.Equal(again, b) {
			t.Errorf("%s %d: re-encoded differently", m.Lane, m.Sequence)
		}
	}
}

// TestBadUpsertIsTheEngines checks that one upsert that does not decode
// leaves the rest of the message to be applied.
func TestBadUpsertIsTheEngines(t *testing.T) {
	m := sampleDown()
	tc := m.GetDown().Tables[1]
	tc.Upserts[0] = []byte{0x01, 0x05, 0x01, 0xff} // text that is not UTF-8
	tc.Upserts[1] = []byte{}
	got, err := DecodeToReplica(mustEncodeToReplica(t, m))
	if err != nil {
		t.Fatalf("a message with a bad upsert: %v", err)
	}
	ups := got.GetDown().Tables[1].Upserts
	if _, err := DecodeTuple(ups[0], nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("the bad upsert decodes: %v", err)
	}
	if _, err := DecodeTuple(got.GetDown().Tables[0].Upserts[0], nil); err != nil {
		t.Fatalf("the good upsert: %v", err)
	}

	u := sampleUp()
	u.Up.Tables[0].Upserts[0] = []byte{0x02, 0x00}
	if _, err := DecodeToServer(mustEncodeToServer(t, u)); err != nil {
		t.Fatalf("an up with a bad upsert: %v", err)
	}
}

// marshal encodes m as it is, unchecked, the way a faulty or foreign sender
// might.
func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestToReplicaMalformed(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(m *syncpb.ToReplica)
		where string // a piece of the error's text
	}{
		{"no protocol", func(m *syncpb.ToReplica) { m.Protocol = 0 }, "no protocol"},
		{"id 0", func(m *syncpb.ToReplica) { m.Id = 0 }, "id 0"},
		{"no body", func(m *syncpb.ToReplica) { m.Body = nil }, "no body"},
		{"no table name", func(m *syncpb.ToReplica) { m.GetDown().Tables[1].Table = "" }, "down.tables[1]: malformed: no table name"},
		{"fewer keys than upserts", func(m *syncpb.ToReplica) {
			tc := m.GetDown().Tables[1]
			tc.UpsertKeys = tc.UpsertKeys[:1]
		}, "1 upsert keys for 2 upserts"},
		{"more keys than upserts", func(m *syncpb.ToReplica) {
			tc := m.GetDown().Tables[0]
			tc.UpsertKeys = append(tc.UpsertKeys, key(3))
		}, "2 upsert keys for 1 upserts"},
		{"bad upsert key", func(m *syncpb.ToReplica) { m.GetDown().Tables[1].UpsertKeys[1] = []byte{1, 3} }, `"products": upsert_keys[1]`},
		{"empty upsert key", func(m *syncpb.ToReplica) { m.GetDown().Tables[1].UpsertKeys[1] = []byte{0} }, "no values"},
		{"missing upsert key", func(m *syncpb.ToReplica) { m.GetDown().Tables[1].UpsertKeys[1] = nil }, "upsert_keys[1]"},
		{"bad delete", func(m *syncpb.ToReplica) { m.GetDown().Tables[1].Deletes[0] = []byte{1, 3, 0, 0} }, "deletes[0]"},
		{"upserts without columns", func(m *syncpb.ToReplica) { m.GetDown().Tables[0].Columns = nil }, "no columns"},
		{"empty column", func(m *syncpb.ToReplica) { m.GetDown().Tables[0].Columns[1] = "" }, "columns[1]"},
		{"column twice", func(m *syncpb.ToReplica) { m.GetDown().Tables[0].Columns[1] = "id" }, "named twice"},
		{"wish without table", func(m *syncpb.ToReplica) { m.GetDown().Wishes[0].Table = "" }, "down.wishes[0]"},
		{"wish bad key", func(m *syncpb.ToReplica) { m.GetDown().Wishes[0].Key = []byte{1, 8, 1} }, "key"},
		{"wish bad wanted", func(m *syncpb.ToReplica) { m.GetDown().Wishes[0].Wanted = []byte{1} }, "wanted"},
		{"wish no wanted", func(m *syncpb.ToReplica) { m.GetDown().Wishes[0].Wanted = nil }, "wanted"},
		{"wish wanted count", func(m *syncpb.ToReplica) { m.GetDown().Wishes[0].Columns = []string{"a", "b"} }, "1 values for 2 columns"},
		{"wish bad based_on", func(m *syncpb.ToReplica) { m.GetDown().Wishes[0].BasedOn = []byte{9} }, "based_on"},
	}
	for _, c := range cases {
		m := sampleDown()
		m.Protocol = Protocol
		c.edit(m)
		checkMalformedToReplica(t, c.name, m, c.where)
	}

	more := []struct {
		name  string
		m     *syncpb.ToReplica
		where string
	}{
		{"snapshot 0", &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{}}}, "snapshot 0"},
		{"own without table", &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{
			Snapshot: 1, Own: []*syncpb.TableKeys{{Keys: [][]byte{key(1)}}}}}}, "end_snapshot.own[0]"},
		{"own bad key", &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{
			Snapshot: 1, Own: []*syncpb.TableKeys{{Table: "r", Keys: [][]byte{key(1), {}}}}}}}, "keys[1]"},
		{"answer ref bad key", &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{
			Snapshot: 1, Answers: []*syncpb.WishRef{{Table: "s"}}}}}, "end_snapshot.answers[0]"},
		{"snapshot empty table", &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{
			Snapshot: 1, Tables: []string{"a", ""}}}}, "end_snapshot.tables[1]"},
		{"filed no lane", &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Sequence: 1}}}, "no lane"},
		{"filed sequence 0", &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "main"}}}, "sequence 0"},
		{"refused bad key", &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "main", Sequence: 1,
			Refused: []*syncpb.Rejected{{Table: "r", Key: []byte{1, 3}}}}}}, "filed.refused[0]"},
		{"refused no table", &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "main", Sequence: 1,
			Refused: []*syncpb.Rejected{{}}}}}, "filed.refused[0]"},
	}
	for _, c := range more {
		c.m.Protocol = Protocol
		checkMalformedToReplica(t, c.name, c.m, c.where)
	}
}

func checkMalformedToReplica(t *testing.T, name string, m *syncpb.ToReplica, where string) {
	t.Helper()
	_, err := DecodeToReplica(marshal(t, m))
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("%s: decoding: %v, want ErrMalformed", name, err)
	} else if !strings.Contains(err.Error(), where) {
		t.Errorf("%s: decoding: %q does not say %q", name, err, where)
	}
	if m.Protocol == 0 {
		return // the encoder fills it in
	}
	if _, err := EncodeToReplica(m); !errors.Is(err, ErrMalformed) {
		t.Errorf("%s: encoding: %v, want ErrMalformed", name, err)
	}
}

func TestToServerMalformed(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(m *syncpb.ToServer)
		where string
	}{
		{"no protocol", func(m *syncpb.ToServer) { m.Protocol = 0 }, "no protocol"},
		{"no replica", func(m *syncpb.ToServer) { m.Replica = nil }, "0 bytes"},
		{"short replica", func(m *syncpb.ToServer) { m.Replica = m.Replica[:15] }, "15 bytes"},
		{"no lane", func(m *syncpb.ToServer) { m.Lane = "" }, "no lane"},
		{"sequence 0", func(m *syncpb.ToServer) { m.Sequence = 0 }, "sequence 0"},
		{"no up", func(m *syncpb.ToServer) { m.Up = nil }, "no up"},
		{"table no name", func(m *syncpb.ToServer) { m.Up.Tables[0].Table = "" }, "up.tables[0]"},
		{"keys count", func(m *syncpb.ToServer) { m.Up.Tables[0].UpsertKeys = nil }, "0 upsert keys for 1 upserts"},
		{"bad delete", func(m *syncpb.ToServer) { m.Up.Tables[0].Deletes[0] = []byte{1, 8} }, "deletes[0]"},
		{"rejected bad key", func(m *syncpb.ToServer) { m.Up.Rejected[0].Key = []byte{1, 3, 0x80} }, "up.rejected[0]"},
		{"digest no table", func(m *syncpb.ToServer) { m.Up.Digests[1].Table = "" }, "up.digests[1]"},
		{"digest short", func(m *syncpb.ToServer) { m.Up.Digests[0].Sum = m.Up.Digests[0].Sum[:32] }, "32 bytes"},
		{"digest rows", func(m *syncpb.ToServer) { m.Up.Digests[0].Rows = 3 }, "sum counts 2 rows"},
		{"answer no table", func(m *syncpb.ToServer) { m.Up.Answers[0].Table = "" }, "up.answers[0]"},
		{"answer no key", func(m *syncpb.ToServer) { m.Up.Answers[0].Key = nil }, "key"},
		{"answer unspecified", func(m *syncpb.ToServer) { m.Up.Answers[0].State = 0 }, "state 0"},
		{"answer unknown state", func(m *syncpb.ToServer) { m.Up.Answers[0].State = 99 }, "state 99"},
		{"unsent no table", func(m *syncpb.ToServer) { m.Up.Unsent[0].Table = "" }, "up.unsent[0]"},
	}
	for _, c := range cases {
		m := sampleUp()
		m.Protocol = Protocol
		c.edit(m)
		_, err := DecodeToServer(marshal(t, m))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: decoding: %v, want ErrMalformed", c.name, err)
		} else if !strings.Contains(err.Error(), c.where) {
			t.Errorf("%s: decoding: %q does not say %q", c.name, err, c.where)
		}
		if m.Protocol != 0 {
			if _, err := EncodeToServer(m); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: encoding: %v, want ErrMalformed", c.name, err)
			}
		}
	}
}

func TestNilsAreErrorsNotPanics(t *testing.T) {
	if _, err := EncodeToReplica(nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("nil ToReplica: %v", err)
	}
	if _, err := EncodeToServer(nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("nil ToServer: %v", err)
	}
	for name, m := range map[string]*syncpb.ToReplica{
		"nil down":         {Id: 1, Body: &syncpb.ToReplica_Down{}},
		"nil end snapshot": {Id: 1, Body: &syncpb.ToReplica_EndSnapshot{}},
		"nil filed":        {Id: 1, Body: &syncpb.ToReplica_Filed{}},
		"nil table":        {Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: []*syncpb.TableChanges{nil}}}},
		"nil wish":         {Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Wishes: []*syncpb.Wish{nil}}}},
		"nil own":          {Id: 1, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{Snapshot: 1, Own: []*syncpb.TableKeys{nil}}}},
		"nil answer ref":   {Id: 1, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{Snapshot: 1, Answers: []*syncpb.WishRef{nil}}}},
		"nil refused":      {Id: 1, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "l", Sequence: 1, Refused: []*syncpb.Rejected{nil}}}},
	} {
		if _, err := EncodeToReplica(m); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	for name, up := range map[string]*syncpb.Up{
		"nil table":    {Tables: []*syncpb.TableChanges{nil}},
		"nil rejected": {Rejected: []*syncpb.Rejected{nil}},
		"nil digest":   {Digests: []*syncpb.Digest{nil}},
		"nil answer":   {Answers: []*syncpb.Answer{nil}},
		"nil count":    {Unsent: []*syncpb.Count{nil}},
	} {
		m := &syncpb.ToServer{Replica: replicaID, Lane: "l", Sequence: 1, Up: up}
		if _, err := EncodeToServer(m); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestNewerProtocol(t *testing.T) {
	m := sampleDown()
	m.Protocol = Protocol + 1
	b, err := EncodeToReplica(m)
	if err != nil {
		t.Fatalf("encoding a newer protocol's message, as a test would: %v", err)
	}
	// What follows the protocol need not make sense to this build: a newer
	// one may have changed it.
	nonsense := protowire.AppendTag(nil, fieldDown, protowire.BytesType)
	nonsense = protowire.AppendBytes(nonsense, []byte{0x0a, 0x03, 0x0a, 0x01, 0xff}) // a table named 0xff
	for name, b := range map[string][]byte{
		"newer":              b,
		"newer and nonsense": append(protowire.AppendVarint([]byte{0x08}, 7), nonsense...),
		"newer, two bodies":  append(marshal(t, &syncpb.ToReplica{Protocol: 2, Id: 1, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{}}}), nonsense...),
	} {
		_, err := DecodeToReplica(b)
		var newer *NewerProtocolError
		if !errors.As(err, &newer) {
			t.Fatalf("%s: %v, want a NewerProtocolError", name, err)
		}
		if newer.Speak != Protocol || newer.Got <= Protocol {
			t.Errorf("%s: %+v", name, newer)
		}
		if errors.Is(err, ErrMalformed) {
			t.Errorf("%s: a newer protocol is not malformed: %v", name, err)
		}
	}
	// The same nonsense at this protocol is malformed.
	if _, err := DecodeToReplica(append(protowire.AppendVarint([]byte{0x08}, 1), nonsense...)); !errors.Is(err, ErrMalformed) {
		t.Errorf("nonsense at protocol 1: %v", err)
	}

	u := sampleUp()
	u.Protocol = 9
	_, err = DecodeToServer(marshal(t, u))
	var newer *NewerProtocolError
	if !errors.As(err, &newer) || newer.Got != 9 || newer.Speak != Protocol {
		t.Fatalf("newer up: %v", err)
	}
	if !strings.Contains(err.Error(), "protocol 9") {
		t.Errorf("error %q does not name the protocol", err)
	}
}

func TestEnvelopeMalformed(t *testing.T) {
	down := marshal(t, &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{}}})
	filed := protowire.AppendTag(nil, fieldFiled, protowire.BytesType)
	filed = protowire.AppendBytes(filed, marshal(t, &syncpb.Filed{Lane: "l", Sequence: 1}))
	cases := map[string][]byte{
		"empty":                  nil,
		"no protocol":            down,
		"protocol as bytes":      append([]byte{0x0a, 0x01, 0x01}, down...),
		"protocol above 32 bits": append(protowire.AppendVarint([]byte{0x08}, 1<<32+1), down...),
		"two bodies":             append(append(protowire.AppendVarint([]byte{0x08}, 1), down...), filed...),
		"the same body twice":    append(append(protowire.AppendVarint([]byte{0x08}, 1), down...), down[len(down)-2:]...),
		"bad tag":                {0x08, 0x01, 0x00},
		"cut short":              {0x08, 0x01, 0x52, 0x05, 0x0a},
		"varint cut short":       {0x08, 0x81},
		"end group alone":        {0x08, 0x01, 0x0c},
	}
	for name, b := range cases {
		if _, err := DecodeToReplica(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("to replica, %s: %v, want ErrMalformed", name, err)
		}
		if _, err := DecodeToServer(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("to server, %s: %v, want ErrMalformed", name, err)
		}
	}
	// A table name that is not UTF-8 is refused by the scan, as protobuf does.
	bad := marshal(t, &syncpb.ToReplica{Protocol: 1, Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{
		Tables: []*syncpb.TableChanges{{Table: "x"}}}}})
	bad[len(bad)-1] = 0xff
	if _, err := DecodeToReplica(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("table name not UTF-8: %v", err)
	}
}

func TestUnknownFieldsKept(t *testing.T) {
	b := mustEncodeToReplica(t, sampleFiled())
	b = protowire.AppendTag(b, 99, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("from a later minor version"))
	m, err := DecodeToReplica(b)
	if err != nil {
		t.Fatalf("an unknown field: %v", err)
	}
	again := mustEncodeToReplica(t, m)
	if !bytes.Equal(again, b) {
		t.Errorf("unknown field lost:\n% x\n% x", again, b)
	}
}

func TestTruncatedMessages(t *testing.T) {
	for _, b := range [][]byte{mustEncodeToReplica(t, sampleDown()), mustEncodeToServer(t, sampleUp())} {
		for i := range len(b) {
			// A prefix may happen to be a whole message; it must never
			// panic, and an error must say malformed.
			if _, err := DecodeToReplica(b[:i]); err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("prefix %d: %v", i, err)
			}
			if _, err := DecodeToServer(b[:i]); err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("prefix %d: %v", i, err)
			}
		}
	}
}

func TestSizeBound(t *testing.T) {
	b := mustEncodeToReplica(t, sampleDown())
	if _, err := DecodeToReplicaLimit(b, len(b)); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	_, err := DecodeToReplicaLimit(b, len(b)-1)
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrMalformed) {
		t.Fatalf("above the bound: %v, want ErrTooLarge and ErrMalformed", err)
	}
	u := mustEncodeToServer(t, sampleUp())
	if _, err := DecodeToServerLimit(u, len(u)-1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("up above the bound: %v, want ErrTooLarge", err)
	}
	if _, err := DecodeToServerLimit(u, 0); err != nil {
		t.Fatalf("bound 0 is the default: %v", err)
	}

	if testing.Short() {
		return
	}
	big := &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: []*syncpb.TableChanges{{
		Table: "blobs", Columns: []string{"b"},
		Upserts: [][]byte{make([]byte, MaxMessageBytes)}, UpsertKeys: [][]byte{key(1)},
	}}}}}
	if _, err := EncodeToReplica(big); !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrMalformed) {
		t.Fatalf("encoding above the bound: %v, want ErrTooLarge alone", err)
	}
	huge := marshal(t, big)
	if _, err := DecodeToReplica(huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("decoding above the bound: %v, want ErrTooLarge", err)
	}
}

// TestDocumentedMessage checks the message PROTOCOL.md takes apart.
func TestDocumentedMessage(t *testing.T) {
	const documented = "08 01 10 62 62 08 0a 04 6d 61 69 6e 10 11"
	b := mustEncodeToReplica(t, &syncpb.ToReplica{Id: 98, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "main", Sequence: 17}}})
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
