package main

import "testing"

func TestStatFields(t *testing.T) {
	// A command name with a space and a parenthesis, as /proc shows one.
	line := "4242 (odd) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 500 123456789 2048 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0"
	pgid, pages, ok := statFields(line)
	if !ok || pgid != 4240 || pages != 2048 {
		t.Fatalf("got pgid %d, pages %d, ok %v", pgid, pages, ok)
	}
	if _, _, ok := statFields("garbage"); ok {
		t.Fatal("a line without a command name was read")
	}
}
