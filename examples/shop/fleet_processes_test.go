package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// headOfficeProcess is one `shop headoffice` process of several over one
// database and one data folder, at a fixed address so that it comes back
// there when restarted.
type headOfficeProcess struct {
	*program
	n    int
	addr string
	args []string
}

// startHeadOffices starts n head-office processes at once, over the
// database at dbURL and the data folder data, each on an address of its
// own, and waits until every one has handed out the registers' tokens.
func startHeadOffices(t *testing.T, bin, dbURL, data string, n int) []*headOfficeProcess {
	t.Helper()
	hos := make([]*headOfficeProcess, n)
	for i := range hos {
		addr := freeAddr(t)
		hos[i] = &headOfficeProcess{n: i + 1, addr: addr,
			args: []string{"headoffice", "-addr", addr, "-data", data, "-poll", "1s", "-v"}}
		hos[i].start(t, bin, dbURL)
	}
	for _, ho := range hos {
		ho.await(t, 0, fmt.Sprintf(`%s: its token is in `, registerNames[len(registerNames)-1]))
	}
	return hos
}

// start runs the head office (again).
func (ho *headOfficeProcess) start(t *testing.T, bin, dbURL string) {
	t.Helper()
	ho.program = startProgram(t, fmt.Sprintf("head office %d", ho.n), bin, []string{"DATABASE_URL=" + dbURL}, ho.args...)
}

// getNext asks the head office at base for register i's next message,
// without waiting, with token, and returns the answer's status code.
func getNext(ctx context.Context, base string, i int, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/sync/%s/next?wait=0", base, registerID(i)), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestHeadOfficesStartedTogetherHandOutOneToken starts three head-office
// programs at once over a new database and one data folder: each comes
// up, each says every register's token is in the same file, and the token
// in that file is the one the database holds — every head office accepts
// it — rather than each issuing its own and the last locking out the
// registers of the others.
func TestHeadOfficesStartedTogetherHandOutOneToken(t *testing.T) {
	t.Parallel()
	bin := buildShop(t)
	dbURL := pgtest.NewDatabase(t)
	data := t.TempDir()
	hos := startHeadOffices(t, bin, dbURL, data, 3)
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for i, name := range registerNames {
		path := tokenPath(data, i)
		for _, ho := range hos {
			if !strings.Contains(ho.out.String(), fmt.Sprintf("%s: its token is in %s\n", name, path)) {
				t.Errorf("head office %d did not hand out %s's token in %s:\n%s", ho.n, name, path, ho.out.String())
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		token := strings.TrimSpace(string(b))
		_, secret, _ := strings.Cut(token, ".")
		if ok, err := storedSecret(t.Context(), pool, registerID(i), secret); err != nil || !ok {
			t.Errorf("%s's token file holds a token the database does not (%v)", name, err)
		}
		for _, ho := range hos {
			code, err := getNext(t.Context(), "http://"+ho.addr, i, token)
			if err != nil || code >= 300 {
				t.Errorf("head office %d answers %s's token with %d (%v); want it accepted", ho.n, name, code, err)
			}
		}
	}
	tmp, err := filepathGlob(data)
	if err != nil || len(tmp) > 0 {
		t.Errorf("files left in the tokens' folder: %v (%v)", tmp, err)
	}
	for _, ho := range hos {
		ho.interrupt(t)
	}
}

// filepathGlob lists the temporary files a token's writing may leave
// behind in data's tokens folder.
func filepathGlob(data string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Dir(tokenPath(data, 0)))
	if err != nil {
		return nil, err
	}
	var left []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".token-") {
			left = append(left, e.Name())
		}
	}
	return left, nil
}
