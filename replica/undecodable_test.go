package replica

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// A message that does not decode is not applied; reported once (however
// often), the main lane sends the report up — its id and why, made safe
// to keep and send — again until a Filed confirms it, and Status lists
// it, with no table. (Before, the replica had no way to say so: the
// message came again for ever.)
func TestAMessageThatDoesNotDecodeIsReportedUpUntilFiled(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		ctx := context.Background()
		db := shopDB(t, d)
		up := newRecorder()
		r, err := New(ctx, db, shopCodecs(t), Me(register), up, quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		b := builder{t, shopCodecs(t)}
		good := b.down(7, b.upserts(Product{ID: uuid.New(), Name: "apple", PriceCents: 100, UpdatedAt: time.Now().UTC()}))
		bad := append(good[:len(good)/2:len(good)/2], 0xff)
		if _, err := r.Endpoint().Receive(ctx, bad); !errors.Is(err, ErrMalformed) {
			t.Fatalf("Receive of a truncated message = %v; want ErrMalformed", err)
		}
		reason := "proto: truncated \xff\x00 " + strings.Repeat("x", 1000)
		for range 3 {
			if err := r.Endpoint().ReportUndecodable(ctx, 7, reason); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Endpoint().ReportUndecodable(ctx, 0, "none"); err == nil {
			t.Fatal("a report of message 0 was taken")
		}
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Rejected) != 1 || st.Rejected[0].Table != "" || st.Rejected[0].Message != 7 || st.Rejected[0].Reported {
			t.Fatalf("status lists %+v; want the one message not decoded, not yet reported", st.Rejected)
		}
		runReplica(t, r)
		var report *syncpb.ToServer
		for report == nil {
			if s := up.next(t); s.lane == "main" && len(s.msg.GetUp().GetUndecodable()) > 0 {
				report = s.msg
			}
		}
		us := report.GetUp().GetUndecodable()
		if len(us) != 1 || us[0].GetMessage() != 7 || len(report.GetUp().GetRejected()) != 0 {
			t.Fatalf("the report says %v, rejected %v; want message 7 alone, as undecodable", us, report.GetUp().GetRejected())
		}
		if why := us[0].GetReason(); len(why) > maxUndecodableReason || strings.ContainsRune(why, 0) || !strings.HasPrefix(why, "proto: truncated \uFFFD ") {
			t.Fatalf("the reason sent is %q; want it valid UTF-8, without NUL, at most %d bytes", why, maxUndecodableReason)
		}
		// Confirmed, it goes no more, and Status says it was heard of.
		if _, err := r.Endpoint().Receive(ctx, b.filed(8, "main", report.GetSequence())); err != nil {
			t.Fatal(err)
		}
		st, err = r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Rejected) != 1 || !st.Rejected[0].Reported {
			t.Fatalf("status lists %+v; want the report confirmed", st.Rejected)
		}
		if n := count(t, db, "SELECT count(*) FROM sync_rejected WHERE tbl = '' AND filed = 0"); n != 0 {
			t.Fatalf("%d reports of undecodable messages left to send after the Filed", n)
		}
	})
}
