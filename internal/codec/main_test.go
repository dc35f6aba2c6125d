// This file holds TestMain, which stops the PostgreSQL cluster pgtest may
// start.

package codec_test

import (
	"testing"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// TestMain stops the PostgreSQL cluster pgtest may start for the tests.
func TestMain(m *testing.M) { pgtest.Main(m) }
