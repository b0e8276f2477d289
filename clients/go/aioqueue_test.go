package aioqueue

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestGeneratedIDsHaveThePythonShape(t *testing.T) {
	before := time.Now().UnixMilli()
	id := newJobID()
	if len(id) != 20 || strings.Trim(id, idAlphabet) != "" {
		t.Fatalf("id %q is not 20 characters of the id alphabet", id)
	}
	var ms int64
	for _, c := range id[:8] { // 8 characters: 48 bits of milliseconds
		ms = ms*64 + int64(strings.IndexRune(idAlphabet, c))
	}
	if ms < before || ms > time.Now().UnixMilli() {
		t.Fatalf("id %q does not start with its millisecond (%d)", id, ms)
	}
	later := newJobID()
	if later == id || later[:8] < id[:8] { // the same millisecond: any order of the rest
		t.Fatalf("ids repeat or do not sort by time: %s then %s", id, later)
	}
}

func TestDoneSlotsMatchPython(t *testing.T) { // values from aioqueue.core.ids.done_slot
	for id, slot := range map[string]int{
		"0Pz3Nq7Yb2c_x~AaBbCc": 482, "order-42": 1466, "x": 120, "00000000000000000042": 638,
	} {
		if got := doneSlot(id); got != slot {
			t.Errorf("doneSlot(%q) = %d, Python says %d", id, got, slot)
		}
	}
}

func TestFingerprintsMatchPython(t *testing.T) { // values from aioqueue.core.ids.fingerprint
	for id, want := range map[string]string{
		"0Pz3Nq7Yb2c_x~AaBbCc": "603962094169323981", "order-42": "4896312827597028906",
		"x": "1294412771620432260", "été-2026": "6761565986704597491",
	} {
		if got := fingerprint(id); got != want {
			t.Errorf("fingerprint(%q) = %s, Python says %s", id, got, want)
		}
	}
}

func encode(t *testing.T, args Arguments, opts ...Option) ([]byte, error) {
	t.Helper()
	o, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	return encodePayload("t", args, o, 1<<20)
}

func TestPayloadIsPythonsJSON(t *testing.T) {
	raw, err := encode(t, Args("é", 1, 2.5, nil, map[string]any{"a": []any{true}}).Kwargs(map[string]any{"k": "v"}),
		WithTimeout(30*time.Second), WithHeaders(map[string]string{"h": "1"}), WithExpires(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	_ = json.Unmarshal(raw, &got)
	_ = json.Unmarshal([]byte(`{"t":"t","a":["é",1,2.5,null,{"a":[true]}],"k":{"k":"v"},"to":30.0,"h":{"h":"1"},"xp":1500}`), &want)
	gotText, _ := json.Marshal(got)
	wantText, _ := json.Marshal(want)
	if string(gotText) != string(wantText) {
		t.Fatalf("payload %s, Python writes %s", raw, wantText)
	}
	if raw, _ := encode(t, Args()); string(raw) != `{"t":"t"}` {
		t.Fatalf("a call with no arguments or options is %s, not {\"t\":\"t\"}", raw)
	}
}

func TestBadArgumentsAreRefused(t *testing.T) {
	tooBig, _ := new(big.Int).SetString("18446744073709551616", 10)
	tooSmall, _ := new(big.Int).SetString("-9223372036854775809", 10)
	for name, args := range map[string]Arguments{
		"NaN":           Args(math.NaN()),
		"infinity":      Args(map[string]any{"x": math.Inf(1)}),
		"a channel":     Args(make(chan int)),
		"a function":    Args(func() {}),
		"invalid UTF-8": Args("ok", []any{"\xff"}),
		"a bad key":     Args().Kwargs(map[string]any{"\xfe": 1}),
		"2**64":         Args(tooBig),
		"-2**63-1":      Args(tooSmall),
		"1e20":          Args(1e20), // encoding/json writes it as 21 digits
	} {
		if _, err := encode(t, args); !errors.Is(err, ErrSerialization) {
			t.Errorf("%s: got %v, want ErrSerialization", name, err)
		}
	}
	edge, _ := new(big.Int).SetString("18446744073709551615", 10)
	if _, err := encode(t, Args(edge, int64(math.MinInt64), uint64(math.MaxUint64), 1e21)); err != nil {
		t.Errorf("64-bit edges refused: %v", err)
	}
}

func TestOversizedPayloadsAreRefused(t *testing.T) {
	o, _ := resolve(nil)
	_, err := encodePayload("t", Args(strings.Repeat("x", 100)), o, 50)
	var tooLarge *PayloadTooLargeError
	if !errors.Is(err, ErrPayloadTooLarge) || !errors.As(err, &tooLarge) || tooLarge.Limit != 50 {
		t.Fatalf("got %v, want a PayloadTooLargeError with limit 50", err)
	}
}

func TestBadOptionsAreRefused(t *testing.T) {
	for name, opt := range map[string]Option{
		"priority 10":    WithPriority(10),
		"priority -1":    WithPriority(-1),
		"negative delay": WithDelay(-time.Second),
		"zero timeout":   WithTimeout(0),
		"zero attempts":  WithMaxAttempts(0),
		"zero expires":   WithExpires(0),
		"empty id":       WithID(""),
		"reserved id":    WithID("periodic:x"),
		"zero time":      WithAt(time.Time{}),
		"nil":            nil,
	} {
		if _, err := resolve([]Option{opt}); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
		}
	}
}

func TestQueueNamesAreChecked(t *testing.T) {
	for _, name := range []string{"", "a:b", "a{b}", "a b", strings.Repeat("q", 201)} {
		if _, err := newQueueKeys("aioqueue", name); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("queue name %q accepted", name)
		}
	}
	keys, _ := newQueueKeys("p", "emails")
	if keys.job("x") != "p:{emails}:job:x" || keys.ready(9) != "p:{emails}:ready:9" {
		t.Errorf("keys are not named <prefix>:{<queue>}:<role>: %s", keys.job("x"))
	}
}

func TestSettledMessagesParse(t *testing.T) {
	ids, ok := parseIDs([]byte("3:abc5:a:b:c0:"))
	if !ok || len(ids) != 3 || ids[0] != "abc" || ids[1] != "a:b:c" || ids[2] != "" {
		t.Fatalf("parsed %q %v", ids, ok)
	}
	for _, bad := range []string{"3:ab", "x:abc", "3abc"} {
		if _, ok := parseIDs([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestURLPasswordsAreMasked(t *testing.T) {
	if got := maskURL("redis://user:secret@host:6379/0"); strings.Contains(got, "secret") {
		t.Fatalf("masked URL %s shows the password", got)
	}
}
