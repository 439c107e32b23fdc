// Package jsonfloat writes float64 values to JSON even when they are not
// finite. JSON has no NaN or infinity, and encoding/json refuses them; a
// training record must still be written when a loss overflows, so such a
// value is written as the string "NaN", "+Inf" or "-Inf" and read back.
package jsonfloat

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Float is a float64 that marshals to a JSON number, or to a string when
// it is not finite.
type Float float64

// MarshalJSON writes a number, or "NaN", "+Inf" or "-Inf".
func (f Float) MarshalJSON() ([]byte, error) {
	return json.Marshal(Value(float64(f)))
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *Float) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	x, ok := Parse(v)
	if !ok {
		return fmt.Errorf("jsonfloat: %s is not a number", b)
	}
	*f = Float(x)
	return nil
}

// Value is what to put in a JSON record for x: x itself when finite, else
// its string form.
func Value(x float64) any {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return x
}

// Parse reads a decoded JSON value written by Value: a number, or one of
// the strings "NaN", "+Inf", "-Inf".
func Parse(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case string:
		switch x {
		case "NaN", "+Inf", "-Inf":
			f, err := strconv.ParseFloat(x, 64)
			return f, err == nil
		}
	}
	return 0, false
}
