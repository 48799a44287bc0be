package devstack_test

import "testing"

// TestRoundOrder: every round of interleaved runs each call once, and over a period of rounds
// each call runs right after each other call equally often, so what one call leaves behind
// falls on every other alike.
func TestRoundOrder(t *testing.T) {
	for n := 1; n <= 6; n++ {
		period := n
		if n%2 == 1 {
			period = 2 * n
		}
		after := map[[2]int]int{}
		for r := range period {
			order := roundOrder(n, r)
			seen := map[int]bool{}
			for i, c := range order {
				if c < 0 || c >= n || seen[c] {
					t.Fatalf("n=%d round %d: %v is not an order of the %d calls", n, r, order, n)
				}
				seen[c] = true
				if i > 0 {
					after[[2]int{order[i-1], c}]++
				}
			}
		}
		for a := range n {
			for b := range n {
				if a != b && after[[2]int{a, b}] != after[[2]int{0, 1}] {
					t.Errorf("n=%d: call %d ran right after call %d %d times, call 1 after call 0 %d times",
						n, b, a, after[[2]int{a, b}], after[[2]int{0, 1}])
				}
			}
		}
	}
}
