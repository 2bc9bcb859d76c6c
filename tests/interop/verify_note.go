// verify_note: the Go side of the signed-note interop check. It opens a
// note that forum signed, using golang.org/x/mod/sumdb/note, and can also
// re-sign it with forum's signer key (Ed25519 is deterministic, so the bytes
// must match) and sign the same text with a fresh Go key for forum to open.
//
// Build (Debian golang-golang-x-mod-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o verify_note verify_note.go
//
// Usage:
//
//	verify_note -vkey FILE -note FILE [-skey FILE] [-out DIR]
//
// -skey re-signs the text with that key and requires the bytes of the note:
// give it only for a note signed by that one key.
//
// With -out it writes DIR/go.note (the text signed by a new key named
// go.example/interop), DIR/go.vkey (that key's verifier key) and, with
// -skey, DIR/go-cosigned.note (signed by the Go key and forum's key).
// Key files may end in one newline. Exit 0 on success, 1 on any failure.
package main

import (
	"bytes"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

func readKey(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "verify_note: "+format+"\n", args...)
	os.Exit(1)
}

func write(dir, name string, data []byte) {
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		fail("%v", err)
	}
}

func main() {
	vkeyPath := flag.String("vkey", "", "verifier key file")
	notePath := flag.String("note", "", "signed note file")
	skeyPath := flag.String("skey", "", "signer key file of the same key (optional)")
	outDir := flag.String("out", "", "directory for Go-signed notes (optional)")
	flag.Parse()
	if *vkeyPath == "" || *notePath == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}

	verifier, err := note.NewVerifier(readKey(*vkeyPath))
	if err != nil {
		fail("verifier key: %v", err)
	}
	msg, err := os.ReadFile(*notePath)
	if err != nil {
		fail("%v", err)
	}
	n, err := note.Open(msg, note.VerifierList(verifier))
	if err != nil {
		fail("open: %v", err)
	}
	fmt.Printf("verified: %d signature(s) by %s+%08x\n", len(n.Sigs),
		verifier.Name(), verifier.KeyHash())

	var ours note.Signer
	if *skeyPath != "" {
		ours, err = note.NewSigner(readKey(*skeyPath))
		if err != nil {
			fail("signer key: %v", err)
		}
		if ours.Name() != verifier.Name() || ours.KeyHash() != verifier.KeyHash() {
			fail("signer key %s+%08x is not the verifier key's", ours.Name(), ours.KeyHash())
		}
		again, err := note.Sign(&note.Note{Text: n.Text}, ours)
		if err != nil {
			fail("sign: %v", err)
		}
		if !bytes.Equal(again, msg) {
			fail("re-signed note differs:\n%s\nwant:\n%s", again, msg)
		}
		fmt.Println("re-signed: identical bytes")
	}

	if *outDir != "" {
		skey, vkey, err := note.GenerateKey(rand.Reader, "go.example/interop")
		if err != nil {
			fail("generate: %v", err)
		}
		signer, err := note.NewSigner(skey)
		if err != nil {
			fail("signer: %v", err)
		}
		signed, err := note.Sign(&note.Note{Text: n.Text}, signer)
		if err != nil {
			fail("sign: %v", err)
		}
		write(*outDir, "go.note", signed)
		write(*outDir, "go.vkey", []byte(vkey+"\n"))
		if ours != nil {
			both, err := note.Sign(&note.Note{Text: n.Text}, signer, ours)
			if err != nil {
				fail("cosign: %v", err)
			}
			write(*outDir, "go-cosigned.note", both)
		}
		fmt.Printf("wrote %s/go.note, go.vkey\n", *outDir)
	}
}
