package aioqueue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"regexp"
	"unicode/utf8"
)

// Arguments are a job's positional and keyword arguments, as the Python handler receives
// them: Args("a", 1) is handler("a", 1); Args("a").Kwargs(map[string]any{"n": 1}) is
// handler("a", n=1).
type Arguments struct {
	Positional []any
	Keywords   map[string]any
}

// Args makes positional arguments.
func Args(values ...any) Arguments { return Arguments{Positional: values} }

// Kwargs adds keyword arguments.
func (a Arguments) Kwargs(keywords map[string]any) Arguments {
	a.Keywords = keywords
	return a
}

// payload is the JSON a job carries (docs/protocol.md, Payload); empty fields are left out.
type payload struct {
	Task    string            `json:"t"`
	Args    []any             `json:"a,omitempty"`
	Kwargs  map[string]any    `json:"k,omitempty"`
	Timeout *float64          `json:"to,omitempty"`
	Headers map[string]string `json:"h,omitempty"`
	Expires *int64            `json:"xp,omitempty"`
}

var longNumber = regexp.MustCompile(`\d{19,}`)

var (
	minInt = new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 63))
	maxInt = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(1))
)

func encodePayload(task string, args Arguments, o jobOptions, maxBytes int) ([]byte, error) {
	if task == "" {
		return nil, invalid("a task name is needed")
	}
	if err := checkStrings(reflect.ValueOf(args.Positional), 0); err != nil {
		return nil, serialization(task, err)
	}
	if err := checkStrings(reflect.ValueOf(args.Keywords), 0); err != nil {
		return nil, serialization(task, err)
	}
	body := payload{Task: task, Args: args.Positional, Kwargs: args.Keywords, Headers: o.headers}
	if o.timeout > 0 {
		seconds := o.timeout.Seconds()
		body.Timeout = &seconds
	}
	if o.expires > 0 {
		ms := millis(o.expires)
		body.Expires = &ms
	}
	var out bytes.Buffer
	encoder := json.NewEncoder(&out)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(body); err != nil {
		return nil, serialization(task, err)
	}
	raw := bytes.TrimSuffix(out.Bytes(), []byte("\n"))
	if longNumber.Match(raw) {
		if err := checkIntegers(raw); err != nil {
			return nil, serialization(task, err)
		}
	}
	if len(raw) > maxBytes {
		return nil, &PayloadTooLargeError{Size: len(raw), Limit: maxBytes}
	}
	return raw, nil
}

func serialization(task string, err error) error {
	return fmt.Errorf("aioqueue: %w: task %q: %v", ErrSerialization, task, err)
}

// checkStrings refuses invalid UTF-8 in strings and map keys, which encoding/json would
// silently replace with U+FFFD: an argument arrives as sent, or the enqueue refuses it.
func checkStrings(v reflect.Value, depth int) error {
	if depth > 1000 {
		return fmt.Errorf("arguments nested over 1000 deep")
	}
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return fmt.Errorf("string %q is not valid UTF-8", v.String())
		}
	case reflect.Interface, reflect.Pointer:
		if !v.IsNil() {
			return checkStrings(v.Elem(), depth+1)
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // []byte: base64 text
		}
		for i := 0; i < v.Len(); i++ {
			if err := checkStrings(v.Index(i), depth+1); err != nil {
				return err
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			if err := checkStrings(iter.Key(), depth+1); err != nil {
				return err
			}
			if err := checkStrings(iter.Value(), depth+1); err != nil {
				return err
			}
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				if err := checkStrings(v.Field(i), depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkIntegers refuses integers beyond 64 bits (a *big.Int, a json.Number, a float64 of
// 1e20 that encoding/json writes as digits): a Python worker cannot read them exactly.
func checkIntegers(raw []byte) error {
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.UseNumber()
	for {
		token, err := decoder.Token()
		if err != nil {
			return nil // the end (the text is encoding/json's own: it parses)
		}
		number, ok := token.(json.Number)
		if !ok || bytes.ContainsAny([]byte(number), ".eE") {
			continue
		}
		value, ok := new(big.Int).SetString(string(number), 10)
		if ok && (value.Cmp(minInt) < 0 || value.Cmp(maxInt) > 0) {
			return fmt.Errorf("integer %.40s is beyond 64 bits", number)
		}
	}
}
