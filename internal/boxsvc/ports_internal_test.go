package boxsvc

import (
	"slices"
	"testing"
)

// TestListening reads /proc/net/tcp text as a box writes it, hostile lines included.
func TestListening(t *testing.T) {
	text := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1
   1: 00000000:170C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2
   2: 0100007F:1B9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3
   3: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4
   4: junk
   5: 0100007F:ZZZZ 00000000:0000 0A
   6: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 0
   7: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5
`
	// 8000 once (twice listed), 5900 (the desktop), 22 from tcp6; 7070 (the agent's) and the
	// established connection and the junk are not ports users open.
	if got := listening(text); !slices.Equal(got, []int{22, 5900, 8000}) {
		t.Errorf("listening = %v", got)
	}
}
