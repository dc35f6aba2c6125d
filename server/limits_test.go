package server_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// undecodableRows is a part of n receipts whose tuples do not decode: the
// tiniest rows a replica can send that the server must look at one by one.
func undecodableRows(n int) *syncpb.TableChanges {
	tc := &syncpb.TableChanges{Table: "receipts", Columns: []string{"register_id", "id", "total_cents", "note", "changed_at"}}
	tc.Upserts = make([][]byte, n)
	tc.UpsertKeys = make([][]byte, n)
	bad := []byte{0xff}
	for i := range n {
		tc.Upserts[i] = bad
		tc.UpsertKeys[i] = wire.AppendTuple(nil, []wire.Value{{Kind: wire.Int, I: int64(i % 64)}})
	}
	return tc
}

// allocated runs f and returns the bytes the process allocated meanwhile.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// inChild runs the test named name alone in a process of its own (the test
// binary again), where what the process allocates is the test's alone,
// and reports whether this is that process.
func inChild(t *testing.T, name string) bool {
	t.Helper()
	const env = "MAGICSYNC_ALLOC_CHILD"
	if os.Getenv(env) == name {
		return true
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"="+name)
	out, err := cmd.CombinedOutput()
	t.Logf("in a process of its own:\n%s", out)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("%s did not run", name)
	}
	return false
}

// The bound on what one upload may make the head office allocate: 8 times
// its body (what internal/wire lets it decode into), 8 times the bound on
// a confirmation (its refusals, gathered before they are found too many)
// and 4 MiB besides (the transaction, the error).
func uploadBound(body, maxMessage int) uint64 {
	return uint64(8*body + 8*maxMessage + 4<<20)
}

// An upload of 1.8 million tiny rows that do not decode (12 MiB) is refused
// as too large — permanently, naming the bound, so that the replica sends
// its rows in smaller uploads — before it is decoded: it allocates next to
// nothing and writes nothing, where it took over a gigabyte and half a
// minute, and then failed for a Filed above the message limit. An upload
// of undecodable rows under MaxUploadRows whose refusals would not fit in
// one Filed is refused the same way, within the bound on what it may make
// the server allocate.
func TestHostileUploadOfUndecodableRowsIsRefusedAsTooLargeWithinItsMemoryBound(t *testing.T) {
	t.Parallel()
	if !inChild(t, "TestHostileUploadOfUndecodableRowsIsRefusedAsTooLargeWithinItsMemoryBound") {
		return
	}
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	const maxMessage = 1 << 20 // Options.MaxMessageBytes's default
	for _, c := range []struct {
		name string
		rows int
		say  string
	}{
		{"1.8 M rows", 1_800_000, fmt.Sprintf("it holds 1800000 rows, more than the %d taken in one message (MaxUploadRows is %d)", server.MaxUploadRows, server.MaxUploadRows)},
		{"refusals beyond one Filed", server.MaxUploadRows / 2, "would not fit in one confirmation of 1048576 bytes (Options.MaxMessageBytes)"},
	} {
		r.seq++
		body, err := wire.EncodeToServer(&syncpb.ToServer{Replica: r.id[:], Lane: "main", Sequence: r.seq,
			Up: &syncpb.Up{Tables: []*syncpb.TableChanges{undecodableRows(c.rows)}}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got := allocated(func() { err = sh.s.Endpoint().Receive(sh.ctx, r.id, "main", body) })
		took := time.Since(start)
		t.Logf("%s: %d bytes of body, %d allocated (%.2f×), %v: %v", c.name, len(body), got, float64(got)/float64(len(body)), took, err)
		if !errors.Is(err, server.ErrTooLarge) || !errors.Is(err, server.ErrPermanent) || !strings.Contains(err.Error(), c.say) {
			t.Errorf("%s: %v; want ErrTooLarge, permanent, saying %q", c.name, err, c.say)
		}
		if bound := uploadBound(len(body), maxMessage); got > bound {
			t.Errorf("%s: %d bytes allocated for %d bytes of body, more than %d (8× body + 8× MaxMessageBytes + 4 MiB)", c.name, got, len(body), bound)
		}
	}
	if n := sh.count(`SELECT count(*) FROM public.sync_rejected`) + sh.count(`SELECT count(*) FROM public.sync_filed`) +
		sh.count(`SELECT count(*) FROM public.sync_outbox WHERE kind = 'filed'`); n != 0 {
		t.Errorf("%d records of uploads refused as too large; want none", n)
	}
}

// The rows of an upload refused because their refusals would not fit in one
// Filed are taken in smaller uploads, as the replica sends them after a
// 413: each is filed, and its Filed names every row it refused.
func TestRowsOfAnUploadTooLargeForItsRefusalsAreFiledInSmallerUploads(t *testing.T) {
	t.Parallel()
	const maxMessage = 32 << 10
	sh := newShop(t, server.Options{MaxMessageBytes: maxMessage})
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	rows := undecodableRows(400)
	err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{rows}})
	if !errors.Is(err, server.ErrTooLarge) {
		t.Fatalf("400 refusals for a Filed of %d bytes: %v, want ErrTooLarge", maxMessage, err)
	}
	refused := 0
	for half := range 2 {
		part := &syncpb.TableChanges{Table: rows.Table, Columns: rows.Columns,
			Upserts: rows.Upserts[half*200 : half*200+200], UpsertKeys: rows.UpsertKeys[half*200 : half*200+200]}
		if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{part}}); err != nil {
			t.Fatalf("half %d: %v", half, err)
		}
		f := lastFiled(t, r)
		b, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: 1 << 40, Body: &syncpb.ToReplica_Filed{Filed: f}})
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > maxMessage {
			t.Errorf("half %d: a Filed of %d bytes, above %d", half, len(b), maxMessage)
		}
		refused += len(f.Refused)
	}
	if refused != 400 {
		t.Errorf("%d rows refused in the Filed of the halves; want 400", refused)
	}
}

// A replica's reports of rows it could not take are kept up to a bound, the
// newest; the older ones are counted in one row.
func TestRejectedReportsOfAReplicaAreCappedKeepingTheNewest(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	report := func(from, n int) []*syncpb.Rejected {
		var rs []*syncpb.Rejected
		for i := from; i < from+n; i++ {
			rs = append(rs, &syncpb.Rejected{Table: "products", Key: wire.AppendTuple(nil, []wire.Value{{Kind: wire.Int, I: int64(i)}}),
				Reason: strings.Repeat("x", 4000)})
		}
		return rs
	}
	if err := r.send(&syncpb.Up{Rejected: report(0, 1500)}); err != nil {
		t.Fatal(err)
	}
	if err := r.send(&syncpb.Up{Rejected: report(1500, 10)}); err != nil {
		t.Fatal(err)
	}
	if n := sh.count(`SELECT count(*) FROM public.sync_rejected WHERE replica = $1 AND tbl <> ''`, r.id); n != 1000 {
		t.Errorf("%d reports kept; want 1000", n)
	}
	if n := sh.count(`SELECT count(*) FROM public.sync_rejected WHERE replica = $1 AND tbl = 'products' AND key = $2`,
		r.id, wire.AppendTuple(nil, []wire.Value{{Kind: wire.Int, I: 1505}})); n != 1 {
		t.Errorf("the newest report is not kept")
	}
	if n := sh.count(`SELECT max(length(reason)) FROM public.sync_rejected WHERE replica = $1`, r.id); n > 512 {
		t.Errorf("a reason of %d characters kept", n)
	}
	var summary string
	if err := sh.pool.QueryRow(sh.ctx, `SELECT reason FROM public.sync_rejected WHERE replica = $1 AND tbl = ''`, r.id).Scan(&summary); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(summary, "510 older rows not kept") {
		t.Errorf("the rows not kept are counted as %q; want 510", summary)
	}
}

// Reports naming tables the server does not declare are counted in one row
// per side, not kept one by one; the Filed still names each row refused,
// for the replica to set it aside; unsent counts and digests of such tables
// are not kept; a build is kept cut to a sane length.
func TestReportsOfUndeclaredTablesAreCountedInOneRow(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	key := wire.AppendTuple(nil, []wire.Value{{Kind: wire.Int, I: 1}})
	up := &syncpb.Up{Build: strings.Repeat("b", 100_000)}
	for i := range 300 {
		name := fmt.Sprintf("nosuch_%d", i)
		up.Rejected = append(up.Rejected, &syncpb.Rejected{Table: name, Key: key, Reason: "no"})
		up.Unsent = append(up.Unsent, &syncpb.Count{Table: name, Rows: 1})
		up.Tables = append(up.Tables, &syncpb.TableChanges{Table: name, Deletes: [][]byte{key}})
	}
	if err := r.send(up); err != nil {
		t.Fatal(err)
	}
	if f := lastFiled(t, r); len(f.Refused) != 300 {
		t.Errorf("the Filed names %d rows refused; want 300", len(f.Refused))
	}
	if n := sh.count(`SELECT count(*) FROM public.sync_rejected WHERE replica = $1`, r.id); n != 2 {
		t.Errorf("%d rows kept of the reports and refusals of undeclared tables; want one per side", n)
	}
	for _, side := range []string{"replica", "server"} {
		var reason string
		if err := sh.pool.QueryRow(sh.ctx, `SELECT reason FROM public.sync_rejected WHERE replica = $1 AND side = $2`, r.id, side).Scan(&reason); err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		if !strings.HasPrefix(reason, "300 rows of tables the server does not declare") {
			t.Errorf("%s: counted as %q; want 300", side, reason)
		}
	}
	if n := sh.count(`SELECT count(*) FROM public.sync_replica_tables WHERE replica = $1 AND tbl LIKE 'nosuch%'`, r.id); n != 0 {
		t.Errorf("%d rows kept of undeclared tables' counts", n)
	}
	if n := sh.count(`SELECT length(build) FROM public.sync_replicas WHERE id = $1`, r.id); n == 0 || n > 256 {
		t.Errorf("a build of %d characters kept; want it cut to at most 256", n)
	}
}
