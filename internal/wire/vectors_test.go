package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// vectorsDir holds the language-neutral golden vectors PROTOCOL.md points
// replicas written in other languages to. Unlike testdata/golden (raw
// bytes, for this package's own regression tests and fuzz seeds), each
// vector there is hex and a JSON description another language's test can
// read. The same -update flag rewrites them:
//
//	go test ./internal/wire -run TestGoldenVectors -update
const vectorsDir = "../../proto/testdata"

// hexLine is how many hex characters a line of a .hex file holds.
const hexLine = 64

// vector is one language-neutral golden vector: a message built here, and
// what its JSON description says about it.
type vector struct {
	name        string
	description string
	toReplica   func() *syncpb.ToReplica
	toServer    func() *syncpb.ToServer
	// newer marks a message naming a protocol above Protocol: its receiver
	// must refuse it, unapplied and unacknowledged.
	newer bool
	// hashed holds, per digest's table, the rows its sum adds, so that
	// another language can check its digest against the vector.
	hashed map[string][][]Value
}

// Fixed ids, so that the vectors never change by themselves.
var (
	vecReplica = uuidOf("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
	vecOther   = uuidOf("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")
	vecProd1   = uuidOf("01890a5d-ac96-774b-bcce-b302099a8057")
	vecProd2   = uuidOf("01890a5d-ac96-774b-bcce-b302099a8058")
	vecProd3   = uuidOf("01890a5d-ac96-774b-bcce-b302099a8059")
	vecRcpt1   = uuidOf("0190c2a4-1c3e-7f00-8a11-000000000001")
	vecRcpt2   = uuidOf("0190c2a4-1c3e-7f00-8a11-000000000002")
	vecRcpt3   = uuidOf("0190c2a4-1c3e-7f00-8a11-000000000003")
)

// Fixed times, in UTC microseconds since the Unix epoch.
const (
	vecJan1     = 1704067200000000 // 2024-01-01T00:00:00Z
	vecJan1Noon = 1704110400123456 // 2024-01-01T12:00:00.123456Z
	vecJan2     = 1704153600000000 // 2024-01-02T00:00:00Z
)

// uuidOf parses a UUID's text form; it panics on a typo, which is a bug in
// this file.
func uuidOf(s string) [16]byte {
	var u [16]byte
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != 16 {
		panic(fmt.Sprintf("uuidOf(%q): %v", s, err))
	}
	copy(u[:], b)
	return u
}

// vecDown is a Down with three tables, parents first, every value kind
// (NULL included) in its upserts, single and composite keys, deletes, a
// wish and a withdrawn one.
func vecDown() *syncpb.ToReplica {
	return &syncpb.ToReplica{
		Protocol: 1,
		Id:       41,
		Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{
			Tables: []*syncpb.TableChanges{
				{
					Table:   "categories",
					Columns: []string{"id", "name", "parent"},
					Upserts: [][]byte{
						tuple(IntValue(1), TextValue("Bakery"), NullValue()),
						tuple(IntValue(2), TextValue("Pâtisserie"), IntValue(1)),
					},
					UpsertKeys: [][]byte{key(1), key(2)},
				},
				{
					Table:   "products",
					Columns: []string{"id", "category", "name", "price", "weight_kg", "active", "image", "updated_at"},
					Upserts: [][]byte{
						tuple(UUIDValue(vecProd1), IntValue(1), TextValue("Baguette"), DecimalValue("1.20"),
							FloatValue(0.25), BoolValue(true), BytesValue([]byte{0x89, 0x50, 0x4e, 0x47}), TimeValue(vecJan1)),
						tuple(UUIDValue(vecProd2), IntValue(2), TextValue("Éclair au café"), NullValue(),
							FloatValue(-1.5), BoolValue(false), BytesValue([]byte{}), TimeValue(vecJan1Noon)),
					},
					UpsertKeys: [][]byte{tuple(UUIDValue(vecProd1)), tuple(UUIDValue(vecProd2))},
					Deletes:    [][]byte{tuple(UUIDValue(vecProd3))},
				},
				{
					Table:   "prices",
					Deletes: [][]byte{tuple(UUIDValue(vecProd3), IntValue(-300))},
				},
			},
			Wishes: []*syncpb.Wish{
				{
					Table:    "register_settings",
					Key:      tuple(UUIDValue(vecReplica)),
					Wish:     vecJan1 + 1,
					Columns:  []string{"footer", "header"},
					Wanted:   tuple(TextValue("Merci !"), NullValue()),
					BasedOn:  tuple(IntValue(12)),
					Note:     "ann at the office",
					WishedAt: vecJan1,
				},
				{
					Table:     "register_settings",
					Key:       tuple(UUIDValue(vecOther)),
					Wish:      vecJan1 + 2,
					Withdrawn: true,
					WishedAt:  vecJan1Noon,
				},
			},
		}},
	}
}

// vecDownEdgeValues is a Down of one row holding every value kind's edge
// cases: the extremes of varints, -0, NaN payloads, empty and long text.
func vecDownEdgeValues() *syncpb.ToReplica {
	vals := allKinds()
	cols := make([]string, len(vals))
	for i := range cols {
		cols[i] = fmt.Sprintf("c%02d", i+1)
	}
	return &syncpb.ToReplica{
		Protocol: 1,
		Id:       42,
		Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: []*syncpb.TableChanges{{
			Table:      "edge_values",
			Columns:    cols,
			Upserts:    [][]byte{AppendTuple(nil, vals)},
			UpsertKeys: [][]byte{key(1)},
		}}}},
	}
}

// vecDownBadRow is a Down whose second upsert does not decode: the message
// is well formed, and the replica leaves that row out alone.
func vecDownBadRow() *syncpb.ToReplica {
	return &syncpb.ToReplica{
		Protocol: 1,
		Id:       43,
		Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: []*syncpb.TableChanges{{
			Table:   "categories",
			Columns: []string{"id", "name", "parent"},
			Upserts: [][]byte{
				tuple(IntValue(3), TextValue("Drinks"), NullValue()),
				{0x03, 0x03, 0x08, 0x05, 0x02, 0xc3, 0x28, 0x00}, // text of invalid UTF-8
			},
			UpsertKeys: [][]byte{key(3), key(4)},
		}}}},
	}
}

// vecDownSnapshot is one staged part of a provisioning.
func vecDownSnapshot() *syncpb.ToReplica {
	return &syncpb.ToReplica{
		Protocol: 1,
		Id:       100,
		Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{
			Snapshot: 100,
			Tables: []*syncpb.TableChanges{{
				Table:      "categories",
				Columns:    []string{"id", "name", "parent"},
				Upserts:    [][]byte{tuple(IntValue(1), TextValue("Bakery"), NullValue())},
				UpsertKeys: [][]byte{key(1)},
			}},
			Wishes: []*syncpb.Wish{{
				Table:    "register_settings",
				Key:      tuple(UUIDValue(vecReplica)),
				Wish:     vecJan1 + 1,
				Columns:  []string{"footer"},
				Wanted:   tuple(TextValue("Merci !")),
				WishedAt: vecJan1,
			}},
		}},
	}
}

// vecEndSnapshot switches the provisioning above in.
func vecEndSnapshot() *syncpb.ToReplica {
	return &syncpb.ToReplica{
		Protocol: 1,
		Id:       101,
		Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{
			Snapshot: 100,
			// Own lists setting tables only: a record the server filed is
			// the head office's for good (PROTOCOL.md, section 6).
			Own: []*syncpb.TableKeys{
				{Table: "register_settings", Keys: [][]byte{tuple(UUIDValue(vecReplica))}},
			},
			Answers: []*syncpb.WishRef{{Table: "register_settings", Key: tuple(UUIDValue(vecReplica)), Wish: vecJan1 + 1}},
			Tables:  []string{"categories", "products", "prices"},
		}},
	}
}

// vecFiled confirms three uploads of a lane, merged, with refused rows: one
// of an earlier upload, one of sequence, one whose key did not read.
func vecFiled() *syncpb.ToReplica {
	return &syncpb.ToReplica{
		Protocol: 1,
		Id:       102,
		Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{
			Lane:     "main",
			Sequence: 19,
			Earlier:  []uint64{17, 18},
			Refused: []*syncpb.Rejected{
				{Table: "receipts", Key: tuple(UUIDValue(vecRcpt1)), Reason: "origin is another replica", Message: 17},
				{Table: "receipts", Key: tuple(UUIDValue(vecRcpt2)), Reason: "the database refused the row"},
				{Table: "receipts", Reason: "a row that does not decode"},
			},
		}},
	}
}

// vecFiledOne confirms one upload, with nothing refused.
func vecFiledOne() *syncpb.ToReplica {
	return &syncpb.ToReplica{
		Protocol: 1,
		Id:       103,
		Body:     &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "main", Sequence: 20}},
	}
}

// vecDownNewer is a Down from a newer build: a replica speaking protocol 1
// neither applies nor acknowledges it.
func vecDownNewer() *syncpb.ToReplica {
	m := vecDown()
	m.Protocol = Protocol + 1
	m.Id = 104
	return m
}

// vecUpRows carries rows of a record table: upserts and a delete.
func vecUpRows() *syncpb.ToServer {
	return &syncpb.ToServer{
		Protocol: 1,
		Replica:  vecReplica[:],
		Lane:     "main",
		Sequence: 18,
		Up: &syncpb.Up{
			Tables: []*syncpb.TableChanges{{
				Table:   "receipts",
				Columns: []string{"id", "origin", "total", "paid", "at", "version"},
				Upserts: [][]byte{
					tuple(UUIDValue(vecRcpt1), UUIDValue(vecReplica), DecimalValue("3.60"), BoolValue(true), TimeValue(vecJan1Noon), IntValue(2)),
					tuple(UUIDValue(vecRcpt2), UUIDValue(vecReplica), DecimalValue("0.00"), BoolValue(false), NullValue(), IntValue(1)),
				},
				UpsertKeys: [][]byte{tuple(UUIDValue(vecRcpt1)), tuple(UUIDValue(vecRcpt2))},
				Deletes:    [][]byte{tuple(UUIDValue(vecRcpt3))},
			}},
			LastApplied: 41,
			Build:       "register 2.4.1",
		},
	}
}

// vecUpRejected reports rows the replica could not take, one own row it
// could not read (its key as text), and clears an earlier report.
func vecUpRejected() *syncpb.ToServer {
	return &syncpb.ToServer{
		Protocol: 1,
		Replica:  vecReplica[:],
		Lane:     "main",
		Sequence: 21,
		Up: &syncpb.Up{
			Rejected: []*syncpb.Rejected{
				{Table: "products", Key: tuple(UUIDValue(vecProd2)), Reason: "column price: decimal into an int column", Message: 41},
				{Table: "categories", Key: key(4), Reason: "value 2: text of invalid UTF-8", Message: 43},
				{Table: "receipts", Key: tuple(TextValue("r-17")), Reason: "column id: text \"r-17\" is not a uuid"},
			},
			Cleared:     []*syncpb.Rejected{{Table: "receipts", Key: tuple(UUIDValue(vecRcpt3))}},
			LastApplied: 43,
			Backlog:     1,
		},
	}
}

// vecUpAnswers answers wishes, in each state a replica reports.
func vecUpAnswers() *syncpb.ToServer {
	k := tuple(UUIDValue(vecReplica))
	return &syncpb.ToServer{
		Protocol: 1,
		Replica:  vecReplica[:],
		Lane:     "settings",
		Sequence: 3,
		Up: &syncpb.Up{
			Answers: []*syncpb.Answer{
				{Table: "register_settings", Key: k, Wish: vecJan1 + 1, State: syncpb.WishState_WISH_STATE_APPLIED, AnsweredAt: vecJan1 + 60_000_000},
				{Table: "printer_settings", Key: k, Wish: vecJan1 + 3, State: syncpb.WishState_WISH_STATE_REFUSED, Reason: "the printer is off", AnsweredAt: vecJan1 + 61_000_000},
				{Table: "drawer_settings", Key: k, Wish: vecJan1 + 4, State: syncpb.WishState_WISH_STATE_WAITING, Reason: "a sale is open", AnsweredAt: vecJan1 + 62_000_000},
				{Table: "scale_settings", Key: k, Wish: vecJan1 + 5, State: syncpb.WishState_WISH_STATE_SUPERSEDED, AnsweredAt: vecJan1 + 63_000_000},
			},
			LastApplied: 41,
		},
	}
}

// vecDigestRows are the rows vecUpDigests fingerprints, per table.
func vecDigestRows() map[string][][]Value {
	return map[string][][]Value{
		"categories": {
			{IntValue(1), TextValue("Bakery"), NullValue()},
			{IntValue(2), TextValue("Pâtisserie"), IntValue(1)},
		},
		"prices": nil,
		"sync_wishes": {
			{TextValue("register_settings"), BytesValue(tuple(UUIDValue(vecReplica))), IntValue(vecJan1 + 1), IntValue(int64(syncpb.WishState_WISH_STATE_APPLIED))},
		},
	}
}

// vecUpDigests fingerprints two catalogs (one empty) and the answers.
func vecUpDigests() *syncpb.ToServer {
	rows := vecDigestRows()
	up := &syncpb.Up{LastApplied: 103}
	for _, table := range []string{"categories", "prices", "sync_wishes"} {
		var s digest.Sum
		for _, r := range rows[table] {
			s.Add(AppendTuple(nil, r))
		}
		up.Digests = append(up.Digests, &syncpb.Digest{Table: table, Sum: s.Bytes(), Rows: s.Rows(), AsOf: 103})
	}
	return &syncpb.ToServer{Protocol: 1, Replica: vecReplica[:], Lane: "main", Sequence: 22, Up: up}
}

// vecUpStatus says only where the replica stands: nothing to confirm.
func vecUpStatus() *syncpb.ToServer {
	return &syncpb.ToServer{
		Protocol: 1,
		Replica:  vecReplica[:],
		Lane:     "main",
		Sequence: 23,
		Up: &syncpb.Up{
			LastApplied: 103,
			Build:       "register 2.4.1",
			Unsent:      []*syncpb.Count{{Table: "receipts", Rows: 12}, {Table: "register_settings", Rows: 1}},
			Backlog:     2,
		},
	}
}

// vecUpResent sends own rows again after a provisioning.
func vecUpResent() *syncpb.ToServer {
	return &syncpb.ToServer{
		Protocol: 1,
		Replica:  vecReplica[:],
		Lane:     "main",
		Sequence: 24,
		Up: &syncpb.Up{
			Tables: []*syncpb.TableChanges{
				{
					Table:      "receipts",
					Columns:    []string{"id", "origin", "total", "paid", "at", "version"},
					Upserts:    [][]byte{tuple(UUIDValue(vecRcpt1), UUIDValue(vecReplica), DecimalValue("3.60"), BoolValue(true), TimeValue(vecJan1Noon), IntValue(2))},
					UpsertKeys: [][]byte{tuple(UUIDValue(vecRcpt1))},
					Deletes:    [][]byte{tuple(UUIDValue(vecRcpt2))},
				},
				{
					Table:      "register_settings",
					Columns:    []string{"id", "footer", "header", "version"},
					Upserts:    [][]byte{tuple(UUIDValue(vecReplica), TextValue("Merci !"), NullValue(), IntValue(13))},
					UpsertKeys: [][]byte{tuple(UUIDValue(vecReplica))},
				},
			},
			Answers: []*syncpb.Answer{
				{Table: "register_settings", Key: tuple(UUIDValue(vecReplica)), Wish: vecJan1 + 1, State: syncpb.WishState_WISH_STATE_APPLIED, AnsweredAt: vecJan1 + 60_000_000},
			},
			Resent:      true,
			LastApplied: 101,
		},
	}
}

// vecUpNewer is an Up from a newer build: a server speaking protocol 1
// neither files nor confirms it.
func vecUpNewer() *syncpb.ToServer {
	m := vecUpRows()
	m.Protocol = Protocol + 1
	m.Sequence = 25
	return m
}

var vectors = []vector{
	{name: "to_replica_down", toReplica: vecDown,
		description: "A Down of three tables, parents first: upserts with their keys alongside, values of every kind (NULL too), a composite key among the deletes, a wish and a withdrawn wish."},
	{name: "to_replica_down_edge_values", toReplica: vecDownEdgeValues,
		description: "A Down of one row whose values are every kind's edge cases: NULL, both bools, the extreme integers and times, -0, infinities and NaNs with their payload, empty, long and NUL-holding text, empty and long bytes, odd decimals."},
	{name: "to_replica_down_bad_row", toReplica: vecDownBadRow,
		description: "A well-formed Down whose second upsert is a malformed tuple (text that is not UTF-8): the replica applies the first row, leaves the second out and reports it by its upsert key (PROTOCOL.md section 5)."},
	{name: "to_replica_down_snapshot", toReplica: vecDownSnapshot,
		description: "A staged Down, one part of provisioning 100: its rows and wish are staged, not applied, until the EndSnapshot of snapshot 100."},
	{name: "to_replica_end_snapshot", toReplica: vecEndSnapshot,
		description: "The EndSnapshot of snapshot 100: the tables it replaces, the setting rows of the replica the server records (never records), the wishes whose answers it records."},
	{name: "to_replica_filed", toReplica: vecFiled,
		description: "A merged Filed confirming sequences 19, 17 and 18 of lane main, with a row refused in 17 (message 17), one refused in 19 (message 0) and one whose key could not be read (no key)."},
	{name: "to_replica_filed_one", toReplica: vecFiledOne,
		description: "A Filed confirming one upload, nothing refused."},
	{name: "to_replica_down_newer_protocol", toReplica: vecDownNewer, newer: true,
		description: "The Down of to_replica_down naming protocol 2: a replica speaking protocol 1 must refuse it, neither applying nor acknowledging it, before it looks at anything else."},
	{name: "to_server_up_rows", toServer: vecUpRows,
		description: "An Up carrying rows of a record table: two upserts with their keys alongside and a delete."},
	{name: "to_server_up_rejected", toServer: vecUpRejected,
		description: "An Up reporting rows the replica could not take (with the ids of the messages that carried them), an own row it could not read (its key spelled as text, message 0), and clearing an earlier report."},
	{name: "to_server_up_answers", toServer: vecUpAnswers,
		description: "An Up answering four wishes, one in each state a replica reports: applied, refused, waiting and superseded."},
	{name: "to_server_up_digests", toServer: vecUpDigests, hashed: vecDigestRows(),
		description: "An Up with digests: a catalog of two rows, an empty one (all zeros), and the answers' digest under sync_wishes. digests lists the rows each sum adds (PROTOCOL.md section 9)."},
	{name: "to_server_up_status", toServer: vecUpStatus,
		description: "A status-only Up: last applied, build, unsent counts and backlog, no rows. The server does not confirm it."},
	{name: "to_server_up_resent", toServer: vecUpResent,
		description: "An Up after a provisioning, resent set: the replica's own rows and answers as it holds them now, taken whatever their version."},
	{name: "to_server_up_newer_protocol", toServer: vecUpNewer, newer: true,
		description: "The Up of to_server_up_rows naming protocol 2: a server speaking protocol 1 neither files nor confirms it."},
}

// tupleFields are the bytes fields that hold a tuple of section 3 of
// PROTOCOL.md; rawFields are the other bytes fields. Every bytes field of
// the schema is one or the other (TestGoldenVectors checks it), so a new
// one cannot go undescribed.
var (
	tupleFields = map[protoreflect.FullName]bool{
		"magicsync.v1.TableChanges.upserts":     true,
		"magicsync.v1.TableChanges.upsert_keys": true,
		"magicsync.v1.TableChanges.deletes":     true,
		"magicsync.v1.TableKeys.keys":           true,
		"magicsync.v1.Wish.key":                 true,
		"magicsync.v1.Wish.wanted":              true,
		"magicsync.v1.Wish.based_on":            true,
		"magicsync.v1.WishRef.key":              true,
		"magicsync.v1.Rejected.key":             true,
		"magicsync.v1.Answer.key":               true,
	}
	rawFields = map[protoreflect.FullName]bool{
		"magicsync.v1.ToServer.replica":     true,
		"magicsync.v1.Digest.sum":           true,
		"magicsync.v1.Command.id":           true,
		"magicsync.v1.Command.params":       true,
		"magicsync.v1.CommandAnswer.id":     true,
		"magicsync.v1.CommandAnswer.result": true,
	}
)

// bytesAt is one tuple, or one digest sum, and where it sits in a message.
type bytesAt struct {
	path string
	b    []byte
	// table is, for a digest sum, the digest's table.
	table string
}

// tuplesOf walks m in field-number order and returns its tuples, and its
// digest sums, each with its path in the protojson form of m (as
// "down.tables[1].upsertKeys[0]").
func tuplesOf(m protoreflect.Message, prefix string) (tuples, sums []bytesAt) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		path := prefix + fd.JSONName()
		v := m.Get(fd)
		add := func(path string, b []byte) {
			switch {
			case tupleFields[fd.FullName()]:
				tuples = append(tuples, bytesAt{path: path, b: b})
			case fd.FullName() == "magicsync.v1.Digest.sum":
				table := m.Get(fields.ByName("table")).String()
				sums = append(sums, bytesAt{path: path, b: b, table: table})
			}
		}
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			for j := 0; j < v.List().Len(); j++ {
				t, s := tuplesOf(v.List().Get(j).Message(), fmt.Sprintf("%s[%d].", path, j))
				tuples, sums = append(tuples, t...), append(sums, s...)
			}
		case fd.IsList() && fd.Kind() == protoreflect.BytesKind:
			for j := 0; j < v.List().Len(); j++ {
				add(fmt.Sprintf("%s[%d]", path, j), v.List().Get(j).Bytes())
			}
		case fd.Kind() == protoreflect.MessageKind:
			t, s := tuplesOf(v.Message(), path+".")
			tuples, sums = append(tuples, t...), append(sums, s...)
		case fd.Kind() == protoreflect.BytesKind:
			add(path, v.Bytes())
		}
	}
	return tuples, sums
}

// valueJSON describes one value as the .json files do: its kind as
// section 3 of PROTOCOL.md names it, and its value in a form JSON holds
// exactly (64-bit integers as decimal strings, floats with their bits).
func valueJSON(v Value) map[string]any {
	out := map[string]any{"kind": v.Kind.String()}
	switch v.Kind {
	case Bool:
		out["value"] = v.I != 0
	case Int:
		out["value"] = strconv.FormatInt(v.I, 10)
	case Float:
		out["bits"] = fmt.Sprintf("%016x", math.Float64bits(v.F))
		switch {
		case math.IsNaN(v.F):
			out["value"] = "NaN"
		case math.IsInf(v.F, 1):
			out["value"] = "Infinity"
		case math.IsInf(v.F, -1):
			out["value"] = "-Infinity"
		default:
			out["value"] = v.F
		}
	case Text, Decimal:
		out["value"] = v.S
	case Bytes:
		out["value"] = hex.EncodeToString(v.B)
	case Time:
		out["value"] = strconv.FormatInt(v.I, 10)
		// RFC 3339 spells years 0000 to 9999 only; the extremes of the
		// wire's range go without.
		if t := time.UnixMicro(v.I).UTC(); v.I > math.MinInt64/2 && v.I < math.MaxInt64/2 && t.Year() >= 0 && t.Year() <= 9999 {
			out["rfc3339"] = t.Format("2006-01-02T15:04:05.999999Z07:00")
		}
	case UUID:
		u := hex.EncodeToString(v.U[:])
		out["value"] = u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
	}
	return out
}

// valueFromJSON reads a value the way another language's test would, from
// the kind and value alone (and a float's bits), so that the JSON is known
// to be enough to build the bytes.
func valueFromJSON(m map[string]any) (Value, error) {
	s, _ := m["value"].(string)
	switch m["kind"] {
	case "null":
		return NullValue(), nil
	case "bool":
		b, ok := m["value"].(bool)
		if !ok {
			return Value{}, fmt.Errorf("bool value %v", m["value"])
		}
		return BoolValue(b), nil
	case "int", "time":
		i, err := strconv.ParseInt(s, 10, 64)
		if m["kind"] == "time" {
			return TimeValue(i), err
		}
		return IntValue(i), err
	case "float":
		bits, err := strconv.ParseUint(m["bits"].(string), 16, 64)
		return FloatValue(math.Float64frombits(bits)), err
	case "text":
		return TextValue(s), nil
	case "decimal":
		return DecimalValue(s), nil
	case "bytes":
		b, err := hex.DecodeString(s)
		return BytesValue(b), err
	case "uuid":
		b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
		if err != nil || len(b) != 16 {
			return Value{}, fmt.Errorf("uuid %q", s)
		}
		return UUIDValue([16]byte(b)), nil
	}
	return Value{}, fmt.Errorf("unknown kind %v", m["kind"])
}

// tupleJSON describes one tuple: its hex, and its values or, for a tuple
// that does not decode, that it does not.
func tupleJSON(path string, b []byte) map[string]any {
	out := map[string]any{"hex": hex.EncodeToString(b)}
	if path != "" {
		out["path"] = path
	}
	vals, err := DecodeTuple(b, nil)
	if err != nil {
		// Not the error's text: that is this decoder's, not the protocol's.
		out["malformed"] = true
		return out
	}
	described := make([]any, len(vals))
	for i, v := range vals {
		described[i] = valueJSON(v)
	}
	out["values"] = described
	return out
}

// describe is the .json file of a vector whose message is m.
func describe(v vector, m proto.Message) ([]byte, error) {
	pj, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	// protojson's spacing is unstable on purpose; decoding it and encoding
	// it again sorts its keys and fixes its layout. UseNumber keeps its
	// numbers as protojson wrote them.
	dec := json.NewDecoder(bytes.NewReader(pj))
	dec.UseNumber()
	var message any
	if err := dec.Decode(&message); err != nil {
		return nil, err
	}
	tuples, sums := tuplesOf(m.ProtoReflect(), "")
	doc := map[string]any{
		"name":        v.name,
		"description": v.description,
		"type":        string(m.ProtoReflect().Descriptor().FullName()),
		"expect":      "ok",
		"message":     message,
	}
	if v.newer {
		doc["expect"] = "newer_protocol"
	}
	if len(tuples) > 0 {
		described := make([]any, len(tuples))
		for i, t := range tuples {
			described[i] = tupleJSON(t.path, t.b)
		}
		doc["tuples"] = described
	}
	if len(sums) > 0 {
		described := make([]any, len(sums))
		for i, s := range sums {
			d := map[string]any{"path": s.path, "hex": hex.EncodeToString(s.b)}
			if len(s.b) == digest.Size {
				lanes := make([]any, 4)
				for j := range lanes {
					lanes[j] = strconv.FormatUint(binary.BigEndian.Uint64(s.b[8*j:]), 10)
				}
				d["sums"] = lanes
				d["rows"] = strconv.FormatUint(binary.BigEndian.Uint64(s.b[32:]), 10)
			}
			// The rows a sum adds are known only to the vector.
			if rows, ok := v.hashed[s.table]; ok {
				hashed := make([]any, len(rows))
				for j, r := range rows {
					hashed[j] = tupleJSON("", AppendTuple(nil, r))
				}
				d["hashed"] = hashed
			}
			described[i] = d
		}
		doc["digests"] = described
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// formatHex is the .hex file of b: lowercase hex, hexLine characters a
// line, each line ended by a newline.
func formatHex(b []byte) []byte {
	h := hex.EncodeToString(b)
	var out bytes.Buffer
	for len(h) > hexLine {
		out.WriteString(h[:hexLine] + "\n")
		h = h[hexLine:]
	}
	out.WriteString(h + "\n")
	return out.Bytes()
}

// build encodes the vector's message with the project's encoder.
func (v vector) build(t *testing.T) ([]byte, proto.Message) {
	if v.toReplica != nil {
		m := v.toReplica()
		return mustEncodeToReplica(t, m), m
	}
	m := v.toServer()
	return mustEncodeToServer(t, m), m
}

// vectorDoc is what a test reads of a .json file, as one in another
// language would.
type vectorDoc struct {
	Type    string          `json:"type"`
	Expect  string          `json:"expect"`
	Message json.RawMessage `json:"message"`
	Tuples  []struct {
		Path      string           `json:"path"`
		Hex       string           `json:"hex"`
		Values    []map[string]any `json:"values"`
		Malformed bool             `json:"malformed"`
	} `json:"tuples"`
	Digests []struct {
		Path   string `json:"path"`
		Hex    string `json:"hex"`
		Hashed []struct {
			Values []map[string]any `json:"values"`
		} `json:"hashed"`
	} `json:"digests"`
}

// TestGoldenVectors checks the vectors of proto/testdata both ways: the
// project's encoder builds the committed bytes, its decoder reads them into
// what the JSON describes and encodes them again unchanged, and the JSON
// alone (protojson and the tuples' values) builds the same bytes again.
func TestGoldenVectors(t *testing.T) {
	t.Parallel()
	if *update {
		if err := writeVectors(t); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("every bytes field is described", func(t *testing.T) {
		t.Parallel()
		checkBytesFieldsClassified(t, (&syncpb.ToReplica{}).ProtoReflect().Descriptor().ParentFile())
	})
	t.Run("no stray files", func(t *testing.T) {
		t.Parallel()
		entries, err := os.ReadDir(vectorsDir)
		if err != nil {
			t.Fatal(err)
		}
		known := map[string]bool{"README.md": true}
		for _, v := range vectors {
			known[v.name+".hex"], known[v.name+".json"] = true, true
		}
		for _, e := range entries {
			if !known[e.Name()] {
				t.Errorf("%s/%s is no vector of this test: remove it, or add it to vectors", vectorsDir, e.Name())
			}
		}
	})
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			checkVector(t, v)
		})
	}
}

// writeVectors rewrites every vector's files from the messages built above.
func writeVectors(t *testing.T) error {
	if err := os.MkdirAll(vectorsDir, 0o755); err != nil {
		return fmt.Errorf("making %s: %w", vectorsDir, err)
	}
	for _, v := range vectors {
		b, m := v.build(t)
		desc, err := describe(v, m)
		if err != nil {
			return fmt.Errorf("describing %s: %w", v.name, err)
		}
		if err := os.WriteFile(filepath.Join(vectorsDir, v.name+".hex"), formatHex(b), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(vectorsDir, v.name+".json"), desc, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// checkBytesFieldsClassified fails for a bytes field of the schema that is
// neither a tuple nor a known raw field: its vectors would not say what it
// holds.
func checkBytesFieldsClassified(t *testing.T, fd protoreflect.FileDescriptor) {
	var walk func(protoreflect.MessageDescriptors)
	walk = func(mds protoreflect.MessageDescriptors) {
		for i := 0; i < mds.Len(); i++ {
			md := mds.Get(i)
			for j := 0; j < md.Fields().Len(); j++ {
				f := md.Fields().Get(j)
				if f.Kind() == protoreflect.BytesKind && !tupleFields[f.FullName()] && !rawFields[f.FullName()] {
					t.Errorf("bytes field %s is in neither tupleFields nor rawFields: say which, and regenerate the vectors", f.FullName())
				}
			}
			walk(md.Messages())
		}
	}
	walk(fd.Messages())
}

// checkVector checks one vector's two files.
func checkVector(t *testing.T, v vector) {
	base := filepath.Join(vectorsDir, v.name)
	hexText, err := os.ReadFile(base + ".hex")
	if err != nil {
		t.Fatalf("%v: regenerate the vectors with go test ./internal/wire -run TestGoldenVectors -update", err)
	}
	jsonText, err := os.ReadFile(base + ".json")
	if err != nil {
		t.Fatalf("%v: regenerate the vectors with go test ./internal/wire -run TestGoldenVectors -update", err)
	}
	b, err := hex.DecodeString(strings.ReplaceAll(string(hexText), "\n", ""))
	if err != nil {
		t.Fatalf("%s.hex: %v", base, err)
	}
	if !bytes.Equal(hexText, formatHex(b)) {
		t.Errorf("%s.hex is not lowercase hex in lines of %d characters, each ended by a newline", base, hexLine)
	}

	// Today's encoder must build the committed bytes.
	built, want := v.build(t)
	if !bytes.Equal(built, b) {
		t.Errorf("the encoding changed: built\n%s\ncommitted\n%s", formatHex(built), hexText)
	}

	// The project's decoder must read them into the message built, and
	// its encoder write them again as they are.
	decoded, again := decodeVector(t, v, b)
	if !proto.Equal(decoded, want) {
		t.Errorf("decoded\n%v\nbuilt\n%v", decoded, want)
	}
	if !bytes.Equal(again, b) {
		t.Errorf("decoded and encoded again, differs:\n%s\ncommitted\n%s", formatHex(again), hexText)
	}

	// The JSON must describe the committed bytes, exactly as describe
	// writes it.
	desc, err := describe(v, decoded)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(desc, jsonText) {
		t.Errorf("%s.json does not describe %s.hex: it should read\n%s", base, base, desc)
	}

	checkFromJSON(t, v, jsonText, b, decoded)
}

// decodeVector decodes a vector's bytes with the project's decoder and
// encodes them again with its encoder. A newer protocol's message must be
// refused by the decoder; it is then read as plain protobuf, for its
// description.
func decodeVector(t *testing.T, v vector, b []byte) (proto.Message, []byte) {
	var m proto.Message
	var err error
	if v.toReplica != nil {
		m, err = DecodeToReplica(b)
	} else {
		m, err = DecodeToServer(b)
	}
	var newer *NewerProtocolError
	switch {
	case v.newer && (!errors.As(err, &newer) || newer.Got != Protocol+1 || newer.Speak != Protocol):
		t.Fatalf("decoding a newer protocol's message: %v, want a NewerProtocolError", err)
	case v.newer:
		if v.toReplica != nil {
			m = &syncpb.ToReplica{}
		} else {
			m = &syncpb.ToServer{}
		}
		if err := proto.Unmarshal(b, m); err != nil {
			t.Fatal(err)
		}
	case err != nil:
		t.Fatalf("decoding: %v", err)
	}
	return m, encodeEither(t, m)
}

// encodeEither encodes m with the project's encoder of its type.
func encodeEither(t *testing.T, m proto.Message) []byte {
	if r, ok := m.(*syncpb.ToReplica); ok {
		return mustEncodeToReplica(t, r)
	}
	return mustEncodeToServer(t, m.(*syncpb.ToServer))
}

// checkFromJSON builds, from the JSON alone, what another language's test
// would: the message through protojson, each tuple from its values, each
// digest from the rows it adds; each must give the committed bytes.
func checkFromJSON(t *testing.T, v vector, jsonText, b []byte, decoded proto.Message) {
	var doc vectorDoc
	if err := json.Unmarshal(jsonText, &doc); err != nil {
		t.Fatalf("%s.json: %v", v.name, err)
	}
	if want := map[bool]string{false: "ok", true: "newer_protocol"}[v.newer]; doc.Expect != want {
		t.Errorf("expect %q, want %q", doc.Expect, want)
	}
	if doc.Type != string(decoded.ProtoReflect().Descriptor().FullName()) {
		t.Errorf("type %q, the message is a %s", doc.Type, decoded.ProtoReflect().Descriptor().FullName())
	}

	fromJSON := decoded.ProtoReflect().New().Interface()
	if err := protojson.Unmarshal(doc.Message, fromJSON); err != nil {
		t.Fatalf("message: %v", err)
	}
	if got := encodeEither(t, fromJSON); !bytes.Equal(got, b) {
		t.Errorf("the JSON's message encodes into\n%s\nnot the committed\n%s", formatHex(got), formatHex(b))
	}

	tuples, sums := tuplesOf(decoded.ProtoReflect(), "")
	if len(doc.Tuples) != len(tuples) {
		t.Fatalf("the JSON describes %d tuples, the message holds %d", len(doc.Tuples), len(tuples))
	}
	for i, dt := range doc.Tuples {
		tb := tuples[i]
		if dt.Path != tb.path || dt.Hex != hex.EncodeToString(tb.b) {
			t.Errorf("tuple %d: %s %s, the message holds %s %x", i, dt.Path, dt.Hex, tb.path, tb.b)
		}
		if dt.Malformed {
			if _, err := DecodeTuple(tb.b, nil); err == nil {
				t.Errorf("%s: described malformed, decodes", dt.Path)
			}
			continue
		}
		if got := tupleFromJSON(t, dt.Path, dt.Values); !bytes.Equal(got, tb.b) {
			t.Errorf("%s: its values encode into %x, not %x", dt.Path, got, tb.b)
		}
	}

	if len(doc.Digests) != len(sums) {
		t.Fatalf("the JSON describes %d digests, the message holds %d", len(doc.Digests), len(sums))
	}
	for i, dd := range doc.Digests {
		if dd.Path != sums[i].path || dd.Hex != hex.EncodeToString(sums[i].b) {
			t.Errorf("digest %d: %s %s, the message holds %s %x", i, dd.Path, dd.Hex, sums[i].path, sums[i].b)
		}
		if dd.Hashed == nil {
			continue
		}
		var s digest.Sum
		for _, h := range dd.Hashed {
			row := tupleFromJSON(t, dd.Path, h.Values)
			// The sum is spelled out here as section 9 of PROTOCOL.md
			// does, not only through package digest.
			hash := sha256.Sum256(row)
			s.AddHash(hash)
		}
		if !bytes.Equal(s.Bytes(), sums[i].b) {
			t.Errorf("%s: the rows listed sum to %x, not %x", dd.Path, s.Bytes(), sums[i].b)
		}
	}
}

// tupleFromJSON encodes a tuple from the values a .json file lists.
func tupleFromJSON(t *testing.T, path string, described []map[string]any) []byte {
	vals := make([]Value, len(described))
	for i, d := range described {
		v, err := valueFromJSON(d)
		if err != nil {
			t.Fatalf("%s: value %d: %v", path, i, err)
		}
		vals[i] = v
	}
	return AppendTuple(nil, vals)
}
