// tiles_check: the Go side of the tile and cosignature interop checks,
// an independent implementation of what forum writes, on
// golang.org/x/mod/sumdb/tlog and golang.org/x/mod/sumdb/note.
//
// Build (Debian golang-golang-x-mod-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o tiles_check tiles_check.go
//
// Modes:
//
//	tiles_check -dir TILES -vkey FILE [-old NOTE] [-index I]
//	    Opens TILES/checkpoint with the log's key (note.Open), reads every
//	    entry bundle, rebuilds the tree from the records with tlog, requires
//	    its root to be the checkpoint's and every tile file under TILES/tile
//	    to be byte for byte the tile tlog derives; then, reading only the
//	    tiles through tlog.TileHashReader (which checks each tile against
//	    the tree hash), proves and checks the inclusion of record I and,
//	    with -old, the consistency of the old checkpoint with the new.
//	tiles_check -url http://HOST:PORT/tlog -vkey FILE [-old NOTE] [-index I]
//	    The same over HTTP from a live log (forum's GET /tlog/): every
//	    resource fetched, the proofs made first (tlog.TileHashReader refuses
//	    a tile that does not hash to the signed root), then every tile of
//	    the checkpoint's size compared byte for byte with tlog's, and the
//	    cache headers the spec recommends checked.
//	tiles_check -kat N
//	    Prints the known-answer vector of a log whose record i is
//	    SHA-256("forum tile vector <i>"): the root, then one line per tile
//	    of tlog.NewTiles(8, 0, N), "<C2SP path> <SHA-256 of the tile>".
//	tiles_check -cosign-verify -note FILE -vkey LOGKEY -wkey WITNESSKEY
//	    Opens a note with the log key and a cosignature/v1 verifier written
//	    here from the C2SP spec (key id over 0x04, message
//	    "cosignature/v1\ntime T\n" + text, signature = u64 time || Ed25519).
//	tiles_check -cosign-sign -note FILE -vkey LOGKEY -seed HEX -name NAME -time T
//	    Prints the note with a cosignature made here by the Ed25519 key of
//	    that 32-byte seed at time T, and its verifier key on stderr.
//
// Exit 0 on success, 1 on any failure.
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "tiles_check: "+format+"\n", args...)
	os.Exit(1)
}

func readKey(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// c2spPath turns tlog's "tile/8/L/N[.p/W]" into C2SP's "tile/L/N[.p/W]"
// and its data tiles "tile/8/data/N" into "tile/entries/N".
func c2spPath(t tlog.Tile) string {
	p := t.Path()
	p = strings.Replace(p, "tile/8/data/", "tile/entries/", 1)
	return strings.Replace(p, "tile/8/", "tile/", 1)
}

type checkpoint struct {
	origin string
	size   int64
	root   tlog.Hash
}

func parseCheckpoint(text string) checkpoint {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 {
		fail("checkpoint: too few lines")
	}
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("checkpoint size: %v", err)
	}
	r, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(r) != 32 {
		fail("checkpoint root: %v", err)
	}
	var c checkpoint
	c.origin, c.size = lines[0], n
	copy(c.root[:], r)
	return c
}

func openCheckpoint(msg []byte, vkey string) checkpoint {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		fail("verifier key: %v", err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		fail("note.Open: %v", err)
	}
	return parseCheckpoint(n.Text)
}

type hashes map[int64]tlog.Hash

func (h hashes) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		v, ok := h[x]
		if !ok {
			return nil, fmt.Errorf("no hash %d", x)
		}
		out[i] = v
	}
	return out, nil
}

func build(records [][]byte) hashes {
	h := hashes{}
	for i, r := range records {
		s, err := tlog.StoredHashes(int64(i), r, h)
		if err != nil {
			fail("StoredHashes: %v", err)
		}
		base := tlog.StoredHashIndex(0, int64(i))
		for k, x := range s {
			h[base+int64(k)] = x
		}
	}
	return h
}

// source reads the log's resources by their C2SP path: a directory or a
// URL prefix.
type source interface {
	Read(rel string) ([]byte, error)
}

type dirSource string

func (d dirSource) Read(rel string) ([]byte, error) {
	return os.ReadFile(filepath.Join(string(d), rel))
}

type urlSource string

func (u urlSource) Read(rel string) ([]byte, error) {
	resp, err := http.Get(string(u) + "/" + rel)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: HTTP %d", rel, resp.StatusCode)
	}
	cc := resp.Header.Get("Cache-Control")
	if rel == "checkpoint" {
		if !strings.Contains(cc, "no-cache") && !strings.Contains(cc, "max-age=") {
			return nil, fmt.Errorf("checkpoint: Cache-Control %q", cc)
		}
		if resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			return nil, fmt.Errorf("checkpoint: Content-Type %q", resp.Header.Get("Content-Type"))
		}
	} else if !strings.Contains(cc, "immutable") {
		return nil, fmt.Errorf("%s: Cache-Control %q, want long-lived", rel, cc)
	}
	return b, nil
}

// srcTiles is a tlog.TileReader over a source of C2SP tiles.
type srcTiles struct {
	src   source
	reads int
}

func (d *srcTiles) Height() int { return 8 }
func (d *srcTiles) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		b, err := d.src.Read(c2spPath(t))
		if err != nil {
			return nil, err
		}
		d.reads++
		out[i] = b
	}
	return out, nil
}
func (d *srcTiles) SaveTiles(tiles []tlog.Tile, data [][]byte) {}

// wantTile is the tile t as tlog derives it from the records.
func wantTile(t tlog.Tile, records [][]byte, h hashes) ([]byte, error) {
	if t.L == -1 {
		var want []byte
		for i := t.N * 256; i < t.N*256+int64(t.W); i++ {
			want = append(want, byte(len(records[i])>>8), byte(len(records[i])))
			want = append(want, records[i]...)
		}
		return want, nil
	}
	return tlog.ReadTileData(t, h)
}

func checkTiles(src source, dir, vkeyPath, oldPath string, index int64) {
	msg, err := src.Read("checkpoint")
	if err != nil {
		fail("%v", err)
	}
	vkey := readKey(vkeyPath)
	cp := openCheckpoint(msg, vkey)

	// The records, from the entry bundles of the checkpoint's size.
	var records [][]byte
	for n := int64(0); n*256 < cp.size; n++ {
		w := cp.size - n*256
		if w > 256 {
			w = 256
		}
		t := tlog.Tile{H: 8, L: -1, N: n, W: int(w)}
		b, err := src.Read(c2spPath(t))
		if err != nil {
			fail("entry bundle: %v", err)
		}
		for len(b) > 0 {
			if len(b) < 2 {
				fail("%s: truncated length", c2spPath(t))
			}
			l := int(binary.BigEndian.Uint16(b))
			if len(b) < 2+l {
				fail("%s: truncated entry", c2spPath(t))
			}
			records = append(records, b[2:2+l])
			b = b[2+l:]
		}
	}
	if int64(len(records)) != cp.size {
		fail("bundles hold %d records, checkpoint says %d", len(records), cp.size)
	}
	h := build(records)
	root, err := tlog.TreeHash(cp.size, h)
	if err != nil {
		fail("TreeHash: %v", err)
	}
	if root != cp.root {
		fail("tlog's root %v is not the checkpoint's %v", root, cp.root)
	}

	// Proofs from the tiles alone.
	tr := &srcTiles{src: src}
	thr := tlog.TileHashReader(tlog.Tree{N: cp.size, Hash: cp.root}, tr)
	if index < 0 || index >= cp.size {
		index = cp.size / 2
	}
	rp, err := tlog.ProveRecord(cp.size, index, thr)
	if err != nil {
		fail("ProveRecord: %v", err)
	}
	if err := tlog.CheckRecord(rp, cp.size, cp.root, index, tlog.RecordHash(records[index])); err != nil {
		fail("CheckRecord: %v", err)
	}
	fmt.Printf("inclusion of record %d: ok (%d tile reads)\n", index, tr.reads)
	if oldPath != "" {
		om, err := os.ReadFile(oldPath)
		if err != nil {
			fail("%v", err)
		}
		old := openCheckpoint(om, vkey)
		tp, err := tlog.ProveTree(cp.size, old.size, thr)
		if err != nil {
			fail("ProveTree: %v", err)
		}
		if err := tlog.CheckTree(tp, cp.size, cp.root, old.size, old.root); err != nil {
			fail("CheckTree: %v", err)
		}
		fmt.Printf("consistency %d -> %d: ok\n", old.size, cp.size)
	}

	// Every tile must be the tile tlog derives: each file present in a
	// directory, each tile of the checkpoint's size from a URL.
	checked := 0
	if dir == "" {
		for _, t := range tlog.NewTiles(8, 0, cp.size) {
			if t.W < 256 && t.W != int((cp.size>>(8*uint(t.L)))%256) {
				continue // NewTiles lists every width up to the partial one
			}
			for _, tt := range []tlog.Tile{t, {H: 8, L: -1, N: t.N, W: t.W}} {
				if tt.L == -1 && t.L != 0 {
					continue
				}
				got, err := src.Read(c2spPath(tt))
				if err != nil {
					fail("%v", err)
				}
				want, err := wantTile(tt, records, h)
				if err != nil {
					fail("%s: %v", c2spPath(tt), err)
				}
				if !bytes.Equal(got, want) {
					fail("%s: differs from tlog's tile", c2spPath(tt))
				}
				checked++
			}
		}
		fmt.Printf("tiles: %d fetched, all match tlog; root %s at size %d\n", checked, root, cp.size)
		return
	}
	err = filepath.Walk(filepath.Join(dir, "tile"), func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		goPath := strings.Replace(rel, "tile/entries/", "tile/8/data/", 1)
		if !strings.HasPrefix(goPath, "tile/8/data/") {
			goPath = strings.Replace(goPath, "tile/", "tile/8/", 1)
		}
		t, err := tlog.ParseTilePath(goPath)
		if err != nil {
			return fmt.Errorf("%s: not a tile path: %v", rel, err)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		want, err := wantTile(t, records, h)
		if err != nil {
			return fmt.Errorf("%s: %v", rel, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s: differs from tlog's tile", rel)
		}
		checked++
		return nil
	})
	if err != nil {
		fail("%v", err)
	}
	for _, t := range tlog.NewTiles(8, 0, cp.size) {
		if t.W < 256 && t.W != int((cp.size>>(8*uint(t.L)))%256) {
			continue // NewTiles lists every width up to the partial one
		}
		if _, err := os.Stat(filepath.Join(dir, c2spPath(t))); err != nil {
			fail("missing tile %s", c2spPath(t))
		}
	}
	fmt.Printf("tiles: %d files match tlog; root %s at size %d\n", checked, root, cp.size)
}

func kat(n int64) {
	records := make([][]byte, n)
	for i := range records {
		s := sha256.Sum256([]byte(fmt.Sprintf("forum tile vector %d", i)))
		records[i] = s[:]
	}
	h := build(records)
	root, err := tlog.TreeHash(n, h)
	if err != nil {
		fail("%v", err)
	}
	fmt.Printf("size %d root %x\n", n, root[:])
	for _, t := range tlog.NewTiles(8, 0, n) {
		if t.W < 1<<8 && t.W != int((n>>(8*uint(t.L)))%256) {
			continue // only the partial tiles of size n
		}
		data, err := tlog.ReadTileData(t, h)
		if err != nil {
			fail("%v", err)
		}
		s := sha256.Sum256(data)
		fmt.Printf("%s %x\n", c2spPath(t), s[:])
		if t.L == 0 {
			var b []byte
			for i := t.N * 256; i < t.N*256+int64(t.W); i++ {
				b = append(b, 0, 32)
				b = append(b, records[i]...)
			}
			s := sha256.Sum256(b)
			d := t
			d.L = -1
			fmt.Printf("%s %x\n", c2spPath(d), s[:])
		}
	}
}

// cosigV1 is a note.Verifier and note.Signer for C2SP cosignature/v1.
type cosigV1 struct {
	name string
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
	hash uint32
	time uint64
}

func cosigKeyHash(name string, pub []byte) uint32 {
	h := sha256.Sum256(append(append([]byte(name+"\n"), 0x04), pub...))
	return binary.BigEndian.Uint32(h[:4])
}

func cosigMsg(t uint64, text []byte) []byte {
	return append([]byte(fmt.Sprintf("cosignature/v1\ntime %d\n", t)), text...)
}

func (c *cosigV1) Name() string    { return c.name }
func (c *cosigV1) KeyHash() uint32 { return c.hash }
func (c *cosigV1) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	return ed25519.Verify(c.pub, cosigMsg(t, msg), sig[8:])
}
func (c *cosigV1) Sign(msg []byte) ([]byte, error) {
	sig := make([]byte, 8)
	binary.BigEndian.PutUint64(sig, c.time)
	return append(sig, ed25519.Sign(c.priv, cosigMsg(c.time, msg))...), nil
}

func parseCosigVkey(vkey string) *cosigV1 {
	f := strings.SplitN(vkey, "+", 3)
	if len(f) != 3 {
		fail("witness key: bad form")
	}
	k, err := base64.StdEncoding.DecodeString(f[2])
	if err != nil || len(k) != 33 || k[0] != 0x04 {
		fail("witness key: not base64(0x04 || 32 bytes)")
	}
	c := &cosigV1{name: f[0], pub: ed25519.PublicKey(k[1:])}
	c.hash = cosigKeyHash(c.name, c.pub)
	if fmt.Sprintf("%08x", c.hash) != f[1] {
		fail("witness key: key id %s, want %08x", f[1], c.hash)
	}
	return c
}

func main() {
	dir := flag.String("dir", "", "tiles directory")
	url := flag.String("url", "", "tiles URL prefix (http://HOST:PORT/tlog)")
	vkey := flag.String("vkey", "", "log verifier key file")
	old := flag.String("old", "", "older checkpoint note file")
	index := flag.Int64("index", -1, "record to prove")
	katN := flag.Int64("kat", 0, "print the known-answer vector of size N")
	cv := flag.Bool("cosign-verify", false, "verify a cosignature")
	cs := flag.Bool("cosign-sign", false, "make a cosignature")
	notePath := flag.String("note", "", "note file")
	wkey := flag.String("wkey", "", "witness verifier key file")
	seed := flag.String("seed", "", "witness seed, 64 hex digits")
	name := flag.String("name", "", "witness name")
	ts := flag.Uint64("time", 0, "cosignature time")
	flag.Parse()
	switch {
	case *katN > 0:
		kat(*katN)
	case *cv:
		msg, err := os.ReadFile(*notePath)
		if err != nil {
			fail("%v", err)
		}
		logv, err := note.NewVerifier(readKey(*vkey))
		if err != nil {
			fail("%v", err)
		}
		w := parseCosigVkey(readKey(*wkey))
		n, err := note.Open(msg, note.VerifierList(logv, w))
		if err != nil {
			fail("note.Open: %v", err)
		}
		found := false
		for _, s := range n.Sigs {
			if s.Name == w.name && s.Hash == w.hash {
				found = true
			}
		}
		if !found {
			fail("no cosignature by %s", w.name)
		}
		fmt.Printf("cosignature by %s+%08x: ok (%d signatures verified)\n", w.name, w.hash, len(n.Sigs))
	case *cs:
		msg, err := os.ReadFile(*notePath)
		if err != nil {
			fail("%v", err)
		}
		logv, err := note.NewVerifier(readKey(*vkey))
		if err != nil {
			fail("%v", err)
		}
		n, err := note.Open(msg, note.VerifierList(logv))
		if err != nil {
			fail("note.Open: %v", err)
		}
		sd, err := hex.DecodeString(*seed)
		if err != nil || len(sd) != 32 {
			fail("seed: 64 hex digits")
		}
		priv := ed25519.NewKeyFromSeed(sd)
		c := &cosigV1{name: *name, priv: priv, pub: priv.Public().(ed25519.PublicKey), time: *ts}
		c.hash = cosigKeyHash(c.name, c.pub)
		out, err := note.Sign(n, c)
		if err != nil {
			fail("note.Sign: %v", err)
		}
		os.Stdout.Write(out)
		fmt.Fprintf(os.Stderr, "%s+%08x+%s\n", c.name, c.hash,
			base64.StdEncoding.EncodeToString(append([]byte{0x04}, c.pub...)))
		fmt.Fprintf(os.Stderr, "PRIVATE+KEY+%s+%08x+%s\n", c.name, c.hash,
			base64.StdEncoding.EncodeToString(append([]byte{0x04}, sd...)))
	case *dir != "" && *vkey != "":
		checkTiles(dirSource(*dir), *dir, *vkey, *old, *index)
	case *url != "" && *vkey != "":
		checkTiles(urlSource(strings.TrimSuffix(*url, "/")), "", *vkey, *old, *index)
	default:
		flag.Usage()
		os.Exit(2)
	}
}
