package digest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/magicsync/magicsync/internal/testenv"
)

func rows(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		// A tuple of one int, as package wire lays it out.
		out[i] = []byte{1, 3, byte(i << 1)}
		if i >= 64 {
			out[i] = fmt.Appendf(nil, "row %d", i) // any bytes hash alike
		}
	}
	return out
}

func sumOf(rs [][]byte) Sum {
	var s Sum
	for _, r := range rs {
		s.Add(r)
	}
	return s
}

func TestZero(t *testing.T) {
	var s Sum
	if !s.IsZero() || s.Rows() != 0 {
		t.Fatalf("zero sum: IsZero %v, Rows %d", s.IsZero(), s.Rows())
	}
	if !bytes.Equal(s.Bytes(), make([]byte, Size)) {
		t.Fatalf("zero sum bytes %x, want %d zeros", s.Bytes(), Size)
	}
}

// TestKnownAnswer pins the algorithm: if it changes, replicas and servers of
// different builds stop agreeing.
func TestKnownAnswer(t *testing.T) {
	var s Sum
	s.Add([]byte{0x01, 0x03, 0x54}) // the tuple (42)
	s.Add([]byte{0x00})             // the empty tuple
	h1 := sha256.Sum256([]byte{0x01, 0x03, 0x54})
	h2 := sha256.Sum256([]byte{0x00})
	var want []byte
	for i := 0; i < 4; i++ {
		want = binary.BigEndian.AppendUint64(want,
			binary.BigEndian.Uint64(h1[8*i:])+binary.BigEndian.Uint64(h2[8*i:]))
	}
	want = binary.BigEndian.AppendUint64(want, 2)
	if !bytes.Equal(s.Bytes(), want) {
		t.Fatalf("sum %x, want %x", s.Bytes(), want)
	}
	// And the literal, so that a change to SHA-256 use or byte order shows.
	const lit = "36f4667134d9d10bb3515acb6b7a20f3e0d1a29b43438eac972f6296339194100000000000000002"
	if got := s.String(); got != lit {
		t.Fatalf("sum %s, want %s", got, lit)
	}
}

func TestOrderIndependent(t *testing.T) {
	rs := rows(200)
	want := sumOf(rs)
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for range 20 {
		rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		if got := sumOf(rs); !got.Equal(want) {
			t.Fatalf("shuffled sum %v, want %v", got, want)
		}
	}
	if want.Rows() != 200 {
		t.Fatalf("Rows %d, want 200", want.Rows())
	}
}

func TestAddRemoveInverse(t *testing.T) {
	rs := rows(100)
	s := sumOf(rs[:50])
	before := s
	for _, r := range rs[50:] {
		s.Add(r)
	}
	for _, r := range rs[50:] {
		s.Remove(r)
	}
	if !s.Equal(before) {
		t.Fatalf("after add and remove %v, want %v", s, before)
	}
	for _, r := range rs[:50] {
		s.Remove(r)
	}
	if !s.IsZero() {
		t.Fatalf("after removing everything %v, want zero", s)
	}
	// Removing first and adding later ends the same: the sum is a group.
	var t2 Sum
	t2.Remove(rs[0])
	t2.Add(rs[1])
	t2.Add(rs[0])
	var one Sum
	one.Add(rs[1])
	if !t2.Equal(one) {
		t.Fatalf("remove-then-add %v, want %v", t2, one)
	}
}

func TestUpdateIsRemoveThenAdd(t *testing.T) {
	old, changed := []byte{1, 5, 1, 'a'}, []byte{1, 5, 1, 'b'}
	s := sumOf([][]byte{{0}, old})
	s.Remove(old)
	s.Add(changed)
	if want := sumOf([][]byte{changed, {0}}); !s.Equal(want) {
		t.Fatalf("updated %v, want %v", s, want)
	}
}

func TestDifferentSetsDiffer(t *testing.T) {
	rs := rows(100)
	a := sumOf(rs[:50])
	cases := map[string]Sum{
		"one row fewer":   sumOf(rs[:49]),
		"one row more":    sumOf(rs[:51]),
		"one row changed": sumOf(append(append([][]byte{}, rs[:49]...), rs[60])),
		"twice one row":   sumOf(append(append([][]byte{}, rs[:50]...), rs[0])),
		"nothing":         {},
	}
	for name, b := range cases {
		if a.Equal(b) || bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%s: sums equal (%v)", name, a)
		}
	}
	// Same count, different rows: the lanes alone must tell them apart.
	x, y := sumOf(rs[:10]), sumOf(rs[10:20])
	if x.Rows() != y.Rows() || x.Equal(y) {
		t.Errorf("same count, different rows: %v and %v", x, y)
	}
}

func TestMerge(t *testing.T) {
	rs := rows(30)
	a, b := sumOf(rs[:10]), sumOf(rs[10:])
	a.Merge(b)
	if want := sumOf(rs); !a.Equal(want) {
		t.Fatalf("merged %v, want %v", a, want)
	}
}

func TestParse(t *testing.T) {
	s := sumOf(rows(7))
	got, err := Parse(s.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(s) || got.Rows() != 7 {
		t.Fatalf("parsed %v (%d rows), want %v", got, got.Rows(), s)
	}
	for _, n := range []int{0, 1, 32, Size - 1, Size + 1, 64} {
		_, err := Parse(make([]byte, n))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse of %d bytes: %v, want ErrMalformed", n, err)
		}
	}
	if b := s.AppendBytes([]byte("x")); !bytes.Equal(b[1:], s.Bytes()) || b[0] != 'x' {
		t.Fatalf("AppendBytes %x", b)
	}
}

func TestAddDoesNotAllocate(t *testing.T) {
	row := []byte(hex.EncodeToString(make([]byte, 100)))
	var s Sum
	if n := testing.AllocsPerRun(100, func() { s.Add(row); s.Remove(row) }); n != 0 {
		t.Fatalf("Add and Remove allocate %v times", n)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(make([]byte, Size))
	f.Add(sumOf(rows(3)).Bytes())
	f.Add([]byte{})
	f.Add(make([]byte, Size+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			if len(b) == Size {
				t.Fatalf("Parse of %d bytes: %v", len(b), err)
			}
			return
		}
		if !bytes.Equal(s.Bytes(), b) {
			t.Fatalf("Parse(%x).Bytes() = %x", b, s.Bytes())
		}
	})
}

func BenchmarkAdd(b *testing.B) {
	row := make([]byte, 120) // a typical row's tuple
	b.ReportAllocs()
	b.SetBytes(int64(len(row)))
	var s Sum
	for b.Loop() {
		s.Add(row)
	}
}

func BenchmarkRemove(b *testing.B) {
	row := make([]byte, 120)
	b.ReportAllocs()
	b.SetBytes(int64(len(row)))
	var s Sum
	for b.Loop() {
		s.Remove(row)
	}
}
