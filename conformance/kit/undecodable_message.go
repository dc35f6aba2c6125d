package kit

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// undecodableMessage is the case of a message that cannot be decoded:
// the first message carrying a new product is served damaged — cut in
// half, ending in a byte no decoder takes — every time it is served. The
// replica must neither apply nor acknowledge it, report it up (an Up whose
// undecodable names its id), and, provisioned again by the head office,
// come to hold the product.
func undecodableMessage(ctx context.Context, r *run) error {
	m := r.mark()
	var mu sync.Mutex
	var target uint64
	r.p.hooks(func(msg *syncpb.ToReplica) verdict {
		mu.Lock()
		defer mu.Unlock()
		if target == 0 && carries(msg, "pdamaged") {
			target = msg.GetId()
		}
		if target == 0 || msg.GetId() != target {
			return verdict{}
		}
		body, err := proto.Marshal(msg)
		if err != nil || len(body) < 2 {
			return verdict{}
		}
		return verdict{raw: append(slices.Clone(body[:len(body)/2]), 0xff)}
	}, nil, nil)
	if err := r.exec(ctx, `INSERT INTO kit.products (id, name, price) VALUES ('pdamaged', 'damaged every time it is served', 40)`); err != nil {
		return err
	}
	return r.eventually(ctx, func() (bool, string) {
		mu.Lock()
		id := target
		mu.Unlock()
		if id == 0 {
			return false, "the head office sent no message carrying pdamaged"
		}
		srv, acks, ups := r.since(m)
		if slices.Contains(acks, id) {
			return false, fmt.Sprintf("the replica acknowledged message %d, which does not decode: it must not", id)
		}
		reported := slices.ContainsFunc(ups, func(u upload) bool {
			return slices.ContainsFunc(u.msg.GetUp().GetUndecodable(), func(d *syncpb.Undecodable) bool { return d.GetMessage() == id })
		})
		if !reported {
			return false, fmt.Sprintf("no upload reports message %d in undecodable: a replica that cannot decode a message it was handed again must report it", id)
		}
		if !slices.ContainsFunc(srv, func(s served) bool {
			return s.id > id && s.original.GetEndSnapshot() != nil && slices.Contains(acks, s.id)
		}) {
			return false, fmt.Sprintf("no provisioning after message %d was acknowledged through its EndSnapshot", id)
		}
		return r.inSync(ctx)
	})
}
