package wire

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// update rewrites the golden vectors from the messages built below:
//
//	go test ./internal/wire/ -run TestGolden -update
//
// Only do so on purpose: a changed vector is a changed protocol, which every
// replica in the field must still read.
var update = flag.Bool("update", false, "rewrite testdata/golden from the messages the tests build")

const goldenDir = "testdata/golden"

// golden is one committed vector: its file, and how it was built.
type golden struct {
	file      string
	toReplica func() *syncpb.ToReplica
	toServer  func() *syncpb.ToServer
	tuple     []Value
	// check looks at a few decoded fields, so that the vector is known to
	// mean what its name says.
	check func(t *testing.T, m proto.Message)
}

var goldens = []golden{
	{file: "down.bin", toReplica: sampleDown, check: func(t *testing.T, pm proto.Message) {
		m := pm.(*syncpb.ToReplica)
		d := m.GetDown()
		if m.Protocol != 1 || m.Id != 41 || d == nil || len(d.Tables) != 2 {
			t.Fatalf("down: %v", m)
		}
		if d.Tables[0].Table != "categories" || d.Tables[1].Table != "products" {
			t.Errorf("tables %q, %q: parents come first", d.Tables[0].Table, d.Tables[1].Table)
		}
		if len(d.Tables[1].Deletes) != 2 || !bytes.Equal(d.Tables[1].Deletes[1], key(8)) {
			t.Errorf("deletes % x", d.Tables[1].Deletes)
		}
		vals, err := DecodeTuple(d.Tables[1].Upserts[0], nil)
		if err != nil || len(vals) != 5 || vals[2].S != "Baguette" || vals[3].Kind != Decimal || vals[3].S != "1.20" {
			t.Errorf("first product %+v, %v", vals, err)
		}
		if w := d.Wishes; len(w) != 1 || w[0].Wish != 3 || w[0].Columns[0] != "footer" {
			t.Errorf("wishes %v", w)
		}
	}},
	{file: "end_snapshot.bin", toReplica: sampleEndSnapshot, check: func(t *testing.T, pm proto.Message) {
		m := pm.(*syncpb.ToReplica)
		e := m.GetEndSnapshot()
		if m.Id != 97 || e == nil || e.Snapshot != 5 || len(e.Own) != 2 || len(e.Own[0].Keys) != 2 || len(e.Tables) != 3 {
			t.Fatalf("end snapshot: %v", m)
		}
		if e.Answers[0].Wish != 3 {
			t.Errorf("answers %v", e.Answers)
		}
	}},
	{file: "filed.bin", toReplica: sampleFiled, check: func(t *testing.T, pm proto.Message) {
		m := pm.(*syncpb.ToReplica)
		f := m.GetFiled()
		if f == nil || f.Lane != "main" || f.Sequence != 17 || len(f.Refused) != 2 {
			t.Fatalf("filed: %v", m)
		}
		if f.Refused[0].Reason != "origin is another replica" || len(f.Refused[1].Key) != 0 {
			t.Errorf("refused %v", f.Refused)
		}
	}},
	{file: "filed_merged.bin", toReplica: sampleFiledMerged, check: func(t *testing.T, pm proto.Message) {
		m := pm.(*syncpb.ToReplica)
		f := m.GetFiled()
		if f == nil || f.Lane != "main" || f.Sequence != 19 || len(f.Earlier) != 2 || f.Earlier[0] != 17 || f.Earlier[1] != 18 {
			t.Fatalf("filed: %v", m)
		}
		if len(f.Refused) != 2 || f.Refused[0].Message != 17 || f.Refused[1].Message != 0 {
			t.Errorf("refused %v: the first of upload 17, the second of 19", f.Refused)
		}
	}},
	{file: "up.bin", toServer: sampleUp, check: func(t *testing.T, pm proto.Message) {
		m := pm.(*syncpb.ToServer)
		u := m.Up
		if m.Protocol != 1 || m.Lane != "main" || m.Sequence != 18 || !bytes.Equal(m.Replica, replicaID) || u == nil {
			t.Fatalf("up: %v", m)
		}
		if u.LastApplied != 41 || len(u.Tables) != 1 || len(u.Rejected) != 1 || len(u.Digests) != 2 || u.Backlog != 1 {
			t.Errorf("up: %v", u)
		}
		s, err := digest.Parse(u.Digests[0].Sum)
		if err != nil || s.Rows() != 2 {
			t.Errorf("digest %v (%d rows), %v", s, s.Rows(), err)
		}
		if a := u.Answers[0]; a.State != syncpb.WishState_WISH_STATE_REFUSED || a.Reason != "the printer is off" {
			t.Errorf("answer %v", a)
		}
	}},
	{file: "tuple_all_kinds.bin", tuple: allKinds()},
}

func (g golden) encode(t *testing.T) []byte {
	switch {
	case g.toReplica != nil:
		return mustEncodeToReplica(t, g.toReplica())
	case g.toServer != nil:
		return mustEncodeToServer(t, g.toServer())
	}
	return AppendTuple(nil, g.tuple)
}

func TestGolden(t *testing.T) {
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, g := range goldens {
			if err := os.WriteFile(filepath.Join(goldenDir, g.file), g.encode(t), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(goldenDir, g.file))
			if err != nil {
				t.Fatal(err)
			}
			// Today's encoder must produce the committed bytes...
			if built := g.encode(t); !bytes.Equal(built, b) {
				t.Errorf("the encoding changed: built\n% x\ncommitted\n% x", built, b)
			}
			// ...and the committed bytes must decode and encode again as
			// they are.
			var again []byte
			switch {
			case g.toReplica != nil:
				m, err := DecodeToReplica(b)
				if err != nil {
					t.Fatal(err)
				}
				g.check(t, m)
				again = mustEncodeToReplica(t, m)
			case g.toServer != nil:
				m, err := DecodeToServer(b)
				if err != nil {
					t.Fatal(err)
				}
				g.check(t, m)
				again = mustEncodeToServer(t, m)
			default:
				vals, err := DecodeTuple(b, nil)
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range vals {
					if !v.Equal(g.tuple[i]) {
						t.Errorf("value %d: %+v, want %+v", i, v, g.tuple[i])
					}
				}
				again = AppendTuple(nil, vals)
			}
			if !bytes.Equal(again, b) {
				t.Errorf("decoded and encoded again, differs:\n% x\n% x", again, b)
			}
		})
	}
}

// goldenFiles returns the committed vectors, for fuzz seeds.
func goldenFiles(f *testing.F) [][]byte {
	var out [][]byte
	for _, g := range goldens {
		b, err := os.ReadFile(filepath.Join(goldenDir, g.file))
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}
