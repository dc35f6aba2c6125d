// The host's side of the API: Identity, Uplink and its errors (SendError,
// Refusal), Settings and Lane, Clock, Received, and the package's errors.

package replica

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/enum"
)

// Identity says which replica this database is. It answers known=false
// until the replica has been set up; until then nothing goes up, and the
// host may write anything, the server's tables included.
type Identity interface {
	ID(ctx context.Context) (id uuid.UUID, known bool, err error)
}

// Me is the Identity of a replica that knows its id from the start.
func Me(id uuid.UUID) Identity { return me(id) }

type me uuid.UUID

func (m me) ID(context.Context) (uuid.UUID, bool, error) { return uuid.UUID(m), true, nil }

// Uplink carries a replica's upward messages to the server. Send returns
// nil only once the server has taken the message. Mark failures with
// TransportError so the engine knows whether to retry.
//
// A message Send did not take is sent again as it is, with the same
// sequence and bytes, until it is taken or refused for good (or Run stops
// with no call of it left running: then its rows go in a message gathered
// anew); only then does the lane gather its next message. So a copy that
// reaches the server late — the call failed or timed out after delivering
// it — is a repeat of what the server files anyway, never a message that
// arrives after a later one.
//
// Send must honour its context, whose deadline is SendTimeout, and return
// once it ends. A call still running a little after SendTimeout is given
// up on (a retryable failure, logged as a warning): the lane backs off,
// then starts no other call until that one returned, and takes what it
// returns as the outcome of the message — nil as taken. So a lane leaves
// at most one call behind, and the goroutine running it ends only when it
// returns; Run does not wait for it.
type Uplink interface {
	Send(ctx context.Context, replica uuid.UUID, lane string, msg []byte) error
}

// UplinkFunc adapts a function to an Uplink.
type UplinkFunc func(ctx context.Context, replica uuid.UUID, lane string, msg []byte) error

// Send calls f.
func (f UplinkFunc) Send(ctx context.Context, replica uuid.UUID, lane string, msg []byte) error {
	return f(ctx, replica, lane, msg)
}

// SendError is a failure of an Uplink: what the lane does about it
// depends on its Refusal.
type SendError struct {
	// Retryable is true for every failure after which the lane keeps the
	// message's rows and sends them again; false only when the server
	// judged the message's rows themselves and refused them for good.
	Retryable bool
	// Refusal says why the message was not taken.
	Refusal Refusal
	Err     error
}

// Refusal is why an uplink did not take a message, which decides what the
// lane does next.
type Refusal int

const (
	// Unreachable: the server is out of reach, or failed for now (a 5xx,
	// 408, 429). The lane backs off and sends the same message again.
	Unreachable Refusal = iota
	// Rejected: the server judged the message's rows and refused them for
	// good. They wait in the backlog until a different build starts.
	Rejected
	// Misconfigured: the server refuses the replica's calls for a reason
	// only its operator can fix — a token refused or rotated, a replica the
	// server does not know, a wrong address (401, 403, 404), or a message
	// the server cannot read. The rows stay queued; the lane backs off,
	// warns at every try and shows the reason in Status, and sends the same
	// message again once the configuration is mended.
	Misconfigured
	// TooLarge: the message is larger than the server accepts (413). The
	// lane halves the rows it puts in a message and gathers them again; a
	// lone row too large for the server is set aside in the backlog.
	TooLarge
	// OlderServer: the server speaks an older protocol than this replica.
	// The rows stay queued and the lane tries again after a long wait (ten
	// times BackoffMax): the fix is upgrading the server, after which this
	// same build sends them.
	OlderServer
)

var refusalNames = []string{
	Unreachable: "unreachable", Rejected: "rejected", Misconfigured: "misconfigured",
	TooLarge: "too large", OlderServer: "older server",
}

// String names the refusal.
func (k Refusal) String() string { return enum.Name(refusalNames, k, "Refusal") }

// Error describes the failure.
func (e *SendError) Error() string {
	switch e.Refusal {
	case Rejected:
		return "magicsync/replica: send refused for good: " + e.Err.Error()
	case Misconfigured:
		return "magicsync/replica: the server refuses this replica (fix its configuration; the rows stay queued): " + e.Err.Error()
	case TooLarge:
		return "magicsync/replica: the message is larger than the server accepts: " + e.Err.Error()
	case OlderServer:
		return "magicsync/replica: the server speaks an older protocol (upgrade it; the rows stay queued): " + e.Err.Error()
	}
	return "magicsync/replica: send failed, will retry: " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *SendError) Unwrap() error { return e.Err }

// TransportError marks an uplink's failure: retryable ones (the server out
// of reach, a 5xx, 408 or 429) are tried again after a backoff; others (the
// server judged the message's rows and refused them for good) set the
// message's rows aside in the backlog, and its reports of rows the replica
// could not take with them, until a different build of the replica starts
// — and the lane backs off all the same before it sends again. An unmarked
// error counts as retryable. Refusals that are not about the rows — the
// replica's credentials, the server's address, the message's size, the
// server's protocol — are marked with Refuse instead, and keep the rows.
func TransportError(retryable bool, err error) error {
	if retryable {
		return Refuse(Unreachable, err)
	}
	return Refuse(Rejected, err)
}

// Refuse marks an uplink's failure with why the message was not taken;
// see Refusal for what the lane does about each.
func Refuse(why Refusal, err error) error {
	if err == nil {
		err = errors.New("unknown failure")
	}
	return &SendError{Retryable: why != Rejected, Refusal: why, Err: err}
}

// Lane is one upward stream with its own order, backoff and timeout.
type Lane struct {
	// Name is sent to the uplink with every message of the lane.
	Name string
	// Tables lists the tables (by name, without schema) whose writes go up
	// in this lane. The lane named "main" takes every table no other lane
	// names, and what the engine itself has to say.
	Tables []string
}

// Settings tune a replica. The zero value is sensible throughout.
type Settings struct {
	// Lanes are the upward streams; empty means one lane, "main".
	Lanes []Lane
	// Idle is how often the upward loop looks for something to send when
	// nobody nudges it. Zero means 1 second.
	Idle time.Duration
	// SendTimeout abandons one lane's hung send (the lane then waits for
	// it before it sends again, while the other lanes go on), and bounds
	// how long Run waits for the send in flight once its context ended.
	// Zero means 30 seconds.
	SendTimeout time.Duration
	// ResendAfter is how long a sent message may go unconfirmed before its
	// rows are sent again. Zero means 1 minute.
	ResendAfter time.Duration
	// BackoffMin and BackoffMax bound the jittered exponential backoff of a
	// lane after a failure, retryable or not. Zero means 100 milliseconds
	// and 30 seconds.
	BackoffMin, BackoffMax time.Duration
	// DigestsEvery is how often the replica fingerprints what it holds and
	// sends it up. Zero means 1 hour; negative means never.
	DigestsEvery time.Duration
	// MaxRows bounds the rows of one upward message. Zero means 5000.
	MaxRows int
	// Build names this build of the host program. Rows the server refused
	// for good wait in the backlog until a different build starts. Empty
	// means the main module's version and VCS revision. It is kept and
	// reported made safe: at most 256 bytes, bytes that are not UTF-8 and
	// NUL replaced by U+FFFD.
	Build string
	// Logger receives the engine's logs. Nil means slog.Default().
	Logger *slog.Logger
	// Clock is the time source; nil means the system clock. Tests pass a
	// fake one.
	Clock Clock
	// Wishes holds the handlers that carry out the server's wishes of the
	// setting tables, one per setting table (see Handle). New refuses a
	// setting table without one.
	Wishes Wishes
	// WishesTimeout bounds how long a handler may take to carry out one
	// wish; one that has not answered by then leaves the wish waiting.
	// Zero means 30 seconds.
	WishesTimeout time.Duration
	// WishesEvery is how often a wish that waits (a handler answered
	// Later, panicked or timed out, or the row is not held yet) is offered
	// again. Zero means 1 minute. Commands delivered are looked for as
	// often, besides whenever a message brings one.
	WishesEvery time.Duration
	// Commands holds the handlers of the commands this build runs, by
	// name (see CommandHandler). A command of another name fails, saying
	// this build has no handler for it.
	Commands Commands
	// CommandsTimeout bounds how long a command's handler may run; its
	// context ends then, and a handler that returns no error after it
	// fails the command all the same. Zero means 5 minutes.
	CommandsTimeout time.Duration
	// CommandsKept is how long a command that ended, and that the server
	// filed and no longer asks, is kept: its answer goes up again after a
	// provisioning, which sets straight a server restored from an older
	// copy. Zero means 30 days.
	CommandsKept time.Duration
}

// Clock is a source of time and timers, replaceable in tests.
type Clock interface {
	Now() time.Time
	// After is like time.After.
	After(d time.Duration) <-chan time.Time
}

// Received says what Receive did with a message.
type Received struct {
	// Applied lists, per table, the keys of the rows the message applied
	// (upserted or deleted).
	Applied map[string][]magicsync.Key
	// Rejected counts rows left out because they did not decode or a
	// constraint refused them; they are reported up.
	Rejected int
	// Redelivered is true when the message's id is at or below the last
	// applied: it changed nothing. That is a redelivery of a message
	// applied before — or, from a server restored from an older backup
	// that issued an old id again, another message, which the replica
	// cannot take: the transport tells the server where the replica stands
	// (LastApplied), and that server provisions it again.
	Redelivered bool
	// Staged is true when the message was one part of a provisioning, held
	// until its EndSnapshot.
	Staged bool
	// Provisioned is true when the message switched a provisioning in: the
	// server's tables were replaced whole, and Applied is empty.
	Provisioned bool
	// LastApplied is the id of the last message the replica has applied,
	// this one included: the message's id once applied, the replica's
	// last applied for a redelivery. A transport tells the server on its
	// next request for a message (httpsync's applied parameter, see
	// server.Endpoint.Next), so that a server restored from an older
	// backup learns it before it issues anything more.
	LastApplied uint64
}

// ErrUnsafe is wrapped by the errors New and Receive return for a
// connection without the durability the engine needs.
var ErrUnsafe = errors.New("magicsync/replica: unsafe SQLite connection")

// ErrMalformed is wrapped by the error Receive returns for a message that
// does not decode at all. Do not acknowledge it: that would move the
// replica past changes it never had. Report it (ReportUndecodable) once
// it comes again with the same fault: the server provisions the replica
// again.
var ErrMalformed = errors.New("magicsync/replica: malformed message")

// ErrClosed is returned by Receive after Close.
var ErrClosed = errors.New("magicsync/replica: the replica is closed")
