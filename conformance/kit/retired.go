package kit

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// retired is the case of the Retired rule (PROTOCOL.md, section 4,
// "Routes and table options"): the head office retires two coupons the
// replica holds, one a redemption of the replica points at. The replica
// must let the other go at once, keep the pointed-at one marked retired —
// reporting nothing, and leaving it out of its digest, so that the head
// office does not provision it again — and let it go as soon as nothing
// points at it, without waiting for a message.
func retired(ctx context.Context, r *run) error {
	if err := r.exec(ctx, `INSERT INTO kit.coupons (id, name) VALUES ('ckept', 'ten off, redeemed'), ('cgone', 'five off')`); err != nil {
		return err
	}
	if err := r.eventually(ctx, func() (bool, string) {
		got, err := r.replicaCoupons(ctx)
		if err != nil {
			return false, "reading the replica's coupons: " + err.Error()
		}
		if _, ok := got["ckept"]; !ok {
			return false, "the replica does not hold coupons row ckept, which the head office inserted"
		}
		if _, ok := got["cgone"]; !ok {
			return false, "the replica does not hold coupons row cgone, which the head office inserted"
		}
		return true, ""
	}); err != nil {
		return err
	}
	// The replica's application redeems ckept: its own row points at it.
	if err := r.writeReplica(ctx, "INSERT INTO redemptions (replica_id, id, coupon_id) VALUES (?, 'u001', 'ckept')", r.id.String()); err != nil {
		return err
	}
	if err := r.eventually(ctx, func() (bool, string) {
		n, err := r.count(ctx, "SELECT count(*) FROM kit.redemptions WHERE replica_id = $1 AND id = 'u001'", r.id)
		if err != nil || n == 0 {
			return false, "the replica did not send its redemptions row u001 up"
		}
		return true, ""
	}); err != nil {
		return err
	}
	m := r.mark()
	if err := r.exec(ctx, `UPDATE kit.coupons SET retired = true WHERE id IN ('ckept', 'cgone')`); err != nil {
		return err
	}
	if err := r.eventually(ctx, func() (bool, string) {
		got, err := r.replicaCoupons(ctx)
		if err != nil {
			return false, "reading the replica's coupons: " + err.Error()
		}
		if _, ok := got["cgone"]; ok {
			return false, "the replica still holds coupons row cgone, retired and pointed at by none of its rows: it must let it go"
		}
		kept, ok := got["ckept"]
		switch {
		case !ok:
			return false, "the replica let coupons row ckept go, though its redemptions row u001 points at it: it must keep it, marked retired"
		case !kept:
			return false, "the replica keeps coupons row ckept, which its redemption points at, but not marked retired (retired must be true)"
		}
		return true, ""
	}); err != nil {
		return err
	}
	// Two digests of the coupons taken since the replica kept ckept: were
	// it counted in them, the head office would provision the replica.
	kept := r.mark()
	if err := r.eventually(ctx, func() (bool, string) {
		_, _, ups := r.since(kept)
		digests := 0
		for _, u := range ups {
			if u.status == 0 && slices.ContainsFunc(u.msg.GetUp().GetDigests(), func(d *syncpb.Digest) bool { return d.GetTable() == "coupons" }) {
				digests++
			}
		}
		return digests >= 2, fmt.Sprintf("the replica sent %d digests of coupons while it kept coupons row ckept; want 2 within the case (every MAGICSYNC_DIGESTS_EVERY)", digests)
	}); err != nil {
		return err
	}
	srv, _, _ := r.since(m)
	if i := slices.IndexFunc(srv, func(s served) bool { return s.original.GetEndSnapshot() != nil }); i >= 0 || r.provisioning(ctx) {
		return fmt.Errorf("the head office provisions the replica again while it keeps the retired coupons row ckept: its digest of coupons must leave out the rows it keeps retired")
	}
	if why, ok, err := r.rejectedRow(ctx, "coupons", "ckept"); err != nil || ok {
		if err != nil {
			return err
		}
		return fmt.Errorf("the replica reported coupons row ckept as a row it could not take (%s): a row it keeps retired is not reported", why)
	}
	// The redemption goes: nothing points at ckept any more.
	if err := r.writeReplica(ctx, "DELETE FROM redemptions WHERE replica_id = ? AND id = 'u001'", r.id.String()); err != nil {
		return err
	}
	return r.eventually(ctx, func() (bool, string) {
		got, err := r.replicaCoupons(ctx)
		if err != nil {
			return false, "reading the replica's coupons: " + err.Error()
		}
		if _, ok := got["ckept"]; ok {
			return false, "the replica still holds coupons row ckept, retired, though its redemption u001 is gone: it must let it go once nothing points at it, without waiting for a message"
		}
		return true, ""
	})
}

// openReplica opens the replica's file: read-only unless write.
func (r *run) openReplica(write bool) (*sql.DB, error) {
	mode := "mode=ro&"
	if write {
		mode = ""
	}
	return sql.Open("sqlite", "file:"+(&url.URL{Path: r.file}).EscapedPath()+"?"+mode+"_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)")
}

// writeReplica runs a statement on the replica's file, as the replica's
// application would.
func (r *run) writeReplica(ctx context.Context, query string, args ...any) error {
	db, err := r.openReplica(true)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, query, args...); err != nil {
		return fmt.Errorf("the kit's write into the replica's file failed (%s): %w", strings.Fields(query)[0], err)
	}
	return nil
}

// replicaCoupons reads the coupons the replica's file holds, and whether
// each is marked retired.
func (r *run) replicaCoupons(ctx context.Context) (map[string]bool, error) {
	db, err := r.openReplica(false)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT id, coalesce(retired, 0) <> 0 FROM coupons")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		var retired bool
		if err := rows.Scan(&id, &retired); err != nil {
			return nil, err
		}
		out[id] = retired
	}
	return out, rows.Err()
}

// provisioning says whether the head office is provisioning the replica.
func (r *run) provisioning(ctx context.Context) bool {
	engine, _ := r.o.current()
	all, err := engine.Status(ctx)
	if err != nil {
		return false
	}
	for _, st := range all {
		if st.ID == r.id {
			return st.Provisioning
		}
	}
	return false
}

// count runs a count at the head office.
func (r *run) count(ctx context.Context, query string, args ...any) (int, error) {
	_, pool := r.o.current()
	var n int
	err := pool.QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}

// rejectedRow returns the reason the head office's status gives for a row
// of table (keyed by one text value) the replica reported it could not
// take, if it does.
func (r *run) rejectedRow(ctx context.Context, table, id string) (string, bool, error) {
	engine, _ := r.o.current()
	all, err := engine.Status(ctx)
	if err != nil {
		return "", false, err
	}
	key := string(productKey(id))
	for _, st := range all {
		if st.ID != r.id {
			continue
		}
		for _, row := range st.Rejected {
			if row.Side == server.SideReplica && strings.HasSuffix(row.Table, table) && string(row.Key) == key {
				return row.Reason, true, nil
			}
		}
	}
	return "", false, nil
}
