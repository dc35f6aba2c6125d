package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/server"
)

// The commands' page (GET /commands): the one-shot actions the server
// asked of replicas, those needing attention first, and the commands
// rolled out to many replicas, each counted as a rollout is.

// CommandLister is a Source that can list the commands issued to the
// replicas and those rolled out (see [server.IssueCommand] and
// [server.RollCommand]); [*server.Server] is one. With it, the dashboard
// serves the commands' page (GET /commands).
type CommandLister interface {
	Commands(ctx context.Context, scope server.CommandScope) (server.CommandList, error)
	CommandRollouts(ctx context.Context) ([]server.CommandRolloutStatus, error)
}

// commandStates lists the states of a command in the order the page
// counts them: those needing attention first.
var commandStates = []server.CommandState{server.CommandFailed, server.CommandInterrupted, server.CommandExpired,
	server.CommandRunning, server.CommandDelivered, server.CommandQueued, server.CommandSucceeded, server.CommandCancelled}

// commandWords says a command's state in plain words.
func commandWords(s server.CommandState) string {
	switch s {
	case server.CommandQueued:
		return "on its way"
	case server.CommandDelivered:
		return "waiting its turn"
	case server.CommandInterrupted:
		return "interrupted"
	}
	return s.String()
}

// CommandCount is how many commands stand in one state.
type CommandCount struct {
	State, Words string
	N            int
}

// commandCounts orders counts by state as the page shows them.
func commandCounts(counts map[server.CommandState]int) []CommandCount {
	var out []CommandCount
	for _, st := range commandStates {
		if n := counts[st]; n > 0 {
			out = append(out, CommandCount{State: st.String(), Words: commandWords(st), N: n})
		}
	}
	return out
}

// commandEntry is one command as the page shows it.
type commandEntry struct {
	server.Command
	// Name is the replica's display name; Action, the command's name.
	Name, Action string
	State, Words string
	// Result is the handler's result as text, when it is text.
	Result string
	Now    time.Time
}

// commandRolloutEntry is a command rollout as the page shows it.
type commandRolloutEntry struct {
	server.CommandRolloutStatus
	Scope   string
	Counts  []CommandCount
	Waiting int
	Now     time.Time
}

// commandsHead is the page's head: the counts, and what each state asks.
type commandsHead struct {
	Counts             []CommandCount
	Empty, More        bool
	Listed             int
	Failed, Interrupts bool
	Expired            bool
}

// commandsView is the commands' page.
func (h *handler) commandsView(r *http.Request) view {
	v := view{Title: "Commands · " + h.title, Heading: "Commands", At: h.now()}
	cl, ok := h.src.(CommandLister)
	if !ok {
		v.Parts = []part{h.render("nocommands", true, "nocommands", "")}
		return v
	}
	var scope server.CommandScope
	if q := r.URL.Query().Get("replica"); q != "" {
		id, err := uuid.Parse(q)
		if err != nil {
			v.Parts = []part{h.render("badscope", true, "badscope", q)}
			return v
		}
		scope.Replica = id
	}
	list, err := cl.Commands(r.Context(), scope)
	if errors.Is(err, server.ErrCommandsOff) {
		v.Parts = []part{h.render("nocommands", true, "nocommands", "off")}
		return v
	}
	if err != nil {
		return h.failedView(v, fmt.Errorf("reading the commands: %w", err), h.noteFailure(r, "reading the commands", err, v.At))
	}
	rollouts, err := cl.CommandRollouts(r.Context())
	if err != nil {
		return h.failedView(v, fmt.Errorf("reading the command rollouts: %w", err), h.noteFailure(r, "reading the command rollouts", err, v.At))
	}
	h.answered()
	head := commandsHead{Counts: commandCounts(list.Counts), Empty: len(list.Commands) == 0, More: list.More, Listed: len(list.Commands),
		Failed: list.Counts[server.CommandFailed] > 0, Interrupts: list.Counts[server.CommandInterrupted] > 0, Expired: list.Counts[server.CommandExpired] > 0}
	v.Parts = append(v.Parts, h.render("commands-head", true, "commands-head", head))
	for _, ro := range rollouts {
		e := commandRolloutEntry{CommandRolloutStatus: ro, Counts: commandCounts(ro.Counts), Waiting: max(ro.Replicas-ro.Issued, 0), Now: v.At}
		switch {
		case ro.Scope.All:
			e.Scope = "every replica"
		case ro.Scope.Group != "":
			e.Scope = "the replicas of the group " + ro.Scope.Group
		default:
			e.Scope = "a list of replicas"
		}
		v.Parts = append(v.Parts, h.render("cro-"+strconv.FormatInt(ro.ID, 10), true, "command-rollout", e))
	}
	for _, c := range list.Commands {
		e := commandEntry{Command: c, Name: h.nameOf(c.Replica), Action: c.Name, State: c.State.String(), Words: commandWords(c.State), Now: v.At}
		if isText(c.Result) {
			e.Result = string(c.Result)
		}
		v.Parts = append(v.Parts, h.render("c-"+c.ID.String(), true, "command", e))
	}
	return v
}

// isText says whether b reads as text a page may show.
func isText(b []byte) bool {
	if len(b) == 0 || len(b) > 1024 {
		return false
	}
	for _, r := range string(b) {
		if r == 0xFFFD || (r < 0x20 && r != '\n' && r != '\t') {
			return false
		}
	}
	return true
}
