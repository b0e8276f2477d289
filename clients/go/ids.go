package aioqueue

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"strconv"
	"strings"
	"time"
)

// idAlphabet is base64 in ASCII order, so generated ids sort by time.
const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"

const (
	doneSlots       = 4096
	generatedSince  = 1397
	generatedLength = 20
)

var reservedPrefixes = []string{"poison-", "periodic:", "debounce:"}

// newJobID makes a 20-character id: the Unix millisecond (48 bits), then 72 random bits,
// in base64 with idAlphabet: the shape of the Python producer's ids (docs/protocol.md).
func newJobID() string {
	var raw [15]byte
	var stamp [8]byte
	binary.BigEndian.PutUint64(stamp[:], uint64(time.Now().UnixMilli()))
	copy(raw[:6], stamp[2:])
	if _, err := rand.Read(raw[6:]); err != nil {
		panic("aioqueue: no randomness for a job id: " + err.Error())
	}
	out := make([]byte, 0, generatedLength)
	for i := 0; i < len(raw); i += 3 {
		n := uint32(raw[i])<<16 | uint32(raw[i+1])<<8 | uint32(raw[i+2])
		for shift := 18; shift >= 0; shift -= 6 {
			out = append(out, idAlphabet[(n>>uint(shift))&63])
		}
	}
	return string(out)
}

func checkJobID(id string) error {
	if id == "" {
		return invalid("id must not be empty (leave it out for a generated id)")
	}
	for _, prefix := range reservedPrefixes {
		if strings.HasPrefix(id, prefix) {
			return invalid("id %q: ids starting with %q are minted by aioqueue", id, prefix)
		}
	}
	return nil
}

func sextet(c byte) int {
	if i := strings.IndexByte(idAlphabet, c); i >= 0 {
		return i
	}
	return 63
}

// doneSlot is the done set an id goes to (core/ids.py: done_slot).
func doneSlot(id string) int {
	if len(id) == generatedLength && id[0] == '0' && sextet(id[1])*64+sextet(id[2]) >= generatedSince {
		return sextet(id[6])*64 + sextet(id[7])
	}
	start := len(id) - 6
	if start < 0 {
		start = 0
	}
	slot := 0
	for i := start; i < len(id); i++ {
		slot = (slot*31 + int(id[i])) % doneSlots
	}
	return slot
}

// fingerprint is what a done set keeps of an id (core/ids.py: fingerprint): the first 8
// bytes of its SHA-1, big-endian, less the top bit, in decimal.
func fingerprint(id string) string {
	sum := sha1.Sum([]byte(id))
	return strconv.FormatUint(binary.BigEndian.Uint64(sum[:8])&(1<<63-1), 10)
}
