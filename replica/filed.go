// Applying Filed: the server's confirmation of an upload, which forgets the
// rows it filed and the reports and answers it heard, and sets aside the
// rows it refused.

package replica

import (
	"context"
	"fmt"
	"slices"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// filed forgets the rows the server confirmed, unless written again since,
// and sets aside the rows it refused: for each upload it confirms — its
// sequence, and those of earlier, confirmations the server merged while
// they waited — as a Filed of that upload alone would, with the rows
// refused in that upload (a refused row names its upload's sequence in
// its message field when it is one of earlier).
func (a *applier) filed(ctx context.Context, f *syncpb.Filed) error {
	earlier := f.GetEarlier()
	refused := map[uint64][]*syncpb.Rejected{}
	for _, ref := range f.GetRefused() {
		of := ref.GetMessage()
		if of == 0 || !slices.Contains(earlier, of) {
			of = f.GetSequence()
		}
		refused[of] = append(refused[of], ref)
	}
	for _, seq := range append([]uint64{f.GetSequence()}, earlier...) {
		if err := a.filedOne(ctx, f.GetLane(), seq, refused[seq]); err != nil {
			return err
		}
		delete(refused, seq) // a sequence named twice is confirmed again, refusing nothing more
	}
	return nil
}

// filedOne forgets the rows the server confirmed filing in the upload seq
// of lane, unless written again since, and sets aside those it refused.
func (a *applier) filedOne(ctx context.Context, lane string, seq uint64, refused []*syncpb.Rejected) error {
	for _, ref := range refused {
		tc, err := a.r.codecs.Table(ref.GetTable())
		if err != nil || tc.Mirror == codec.Catalog {
			continue
		}
		args, err := keyArgs(tc, ref.GetKey())
		if err != nil {
			continue
		}
		q := fmt.Sprintf(holdRefusedFormat, keyExpr(tc, "?"))
		all := append([]any{a.r.build, "the server refused it: " + ref.GetReason(), tc.Name}, args...)
		if _, err := a.exec(ctx, q, append(all, lane, seq)...); err != nil {
			return err
		}
		a.r.log.Warn("magicsync/replica: the server refused a row; it waits in the backlog", "table", tc.Name, "key", codec.Key(ref.GetKey()), "reason", ref.GetReason())
	}
	if _, err := a.exec(ctx, deleteFiled,
		lane, seq); err != nil {
		return err
	}
	if _, err := a.exec(ctx, unmarkFiled,
		lane, seq); err != nil {
		return err
	}
	if lane == "main" {
		if _, err := a.exec(ctx, markReportsFiled, seq); err != nil {
			return err
		}
		// A clearing the server confirmed leaves nothing to keep.
		if _, err := a.exec(ctx, deleteClearingsFiled, seq); err != nil {
			return err
		}
		// Nor does an answer it filed, until the wish changes.
		if _, err := a.exec(ctx, markAnswersFiled, seq); err != nil {
			return err
		}
		if _, err := a.exec(ctx, markCommandAnswersFiled, seq); err != nil {
			return err
		}
	}
	return nil
}
