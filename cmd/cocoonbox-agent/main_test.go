package main

import "testing"

func TestMCPListenIsLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:7072": true,
		"[::1]:7072":     true,
		"localhost:7072": true,
		"0.0.0.0:7072":   false,
		":7072":          false,
		"10.0.0.2:7072":  false,
		"127.0.0.1":      false,
	} {
		if err := loopback(addr); (err == nil) != ok {
			t.Errorf("loopback(%q) = %v, want ok %v", addr, err, ok)
		}
	}
}
