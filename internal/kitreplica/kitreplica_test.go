package kitreplica

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

func setEnv(t *testing.T, id uuid.UUID) {
	t.Setenv("MAGICSYNC_URL", "nats://127.0.0.1:4222")
	t.Setenv("MAGICSYNC_REPLICA", id.String())
	t.Setenv("MAGICSYNC_TOKEN", "token")
	t.Setenv("MAGICSYNC_DB", "/tmp/replica.db")
	for _, name := range []string{"MAGICSYNC_DIGESTS_EVERY", "MAGICSYNC_RESEND_AFTER", "MAGICSYNC_WISHES_EVERY"} {
		t.Setenv(name, "")
	}
}

func TestReadEnvReadsTheKitsContract(t *testing.T) {
	id := uuid.New()
	setEnv(t, id)
	t.Setenv("MAGICSYNC_RESEND_AFTER", "300ms")
	e, err := ReadEnv()
	if err != nil {
		t.Fatal(err)
	}
	want := Env{URL: "nats://127.0.0.1:4222", Replica: id, Token: "token", DB: "/tmp/replica.db",
		DigestsEvery: time.Second, ResendAfter: 300 * time.Millisecond, WishesEvery: time.Second}
	if e != want {
		t.Fatalf("ReadEnv = %+v; want %+v", e, want)
	}
}

// An error names the variable missing or malformed.
func TestReadEnvNamesWhatIsWrong(t *testing.T) {
	for name, value := range map[string]string{
		"MAGICSYNC_TOKEN":         "",
		"MAGICSYNC_REPLICA":       "not a uuid",
		"MAGICSYNC_WISHES_EVERY":  "soon",
		"MAGICSYNC_DIGESTS_EVERY": "1 s",
	} {
		t.Run(name, func(t *testing.T) {
			setEnv(t, uuid.New())
			t.Setenv(name, value)
			if _, err := ReadEnv(); err == nil || !strings.Contains(err.Error(), "$"+name) {
				t.Fatalf("ReadEnv with $%s=%q = %v; want an error naming it", name, value, err)
			}
		})
	}
}
