// Package yamlconf decodes a YAML document into a Go struct strictly, and
// remembers where each field came from, so that every error can name the
// file, the line and the dotted field: unknown keys (with a suggestion),
// wrong types, duplicate keys, and command-line overrides (--set a.b=v).
//
// Fields are matched by their `yaml:"name"` tags. Supported field kinds:
// string, bool, signed and unsigned integers, floats, structs, pointers to
// structs (allocated when the key is present, and filled by a SetDefaults
// method if the type has one), slices of those scalars, and
// any type implementing encoding.TextUnmarshaler, which is how a config is
// parsed into its types (formats, modes, kinds) once, here, with its errors
// located like any other.
//
// A config is one YAML document: a second one (after "---") is refused
// rather than ignored. YAML merge keys ("<<: *base") are honoured with
// YAML 1.1's semantics: keys written in the mapping win over merged ones,
// and earlier merged mappings win over later ones.
package yamlconf

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/mixtune/mixtune/internal/readlimit"
	"gopkg.in/yaml.v3"
)

// Error is one problem with a config, located as precisely as possible.
type Error struct {
	File  string // the config file, or "--set" for an override
	Line  int    // 1-based; 0 when unknown (a default, or an override)
	Field string // dotted path, e.g. "optimizer.lr"
	Msg   string
}

func (e *Error) Error() string {
	var loc string
	switch {
	case e.Line > 0:
		loc = fmt.Sprintf("%s:%d: ", e.File, e.Line)
	case e.File != "":
		loc = e.File + ": "
	}
	if e.Field != "" {
		return loc + e.Field + ": " + e.Msg
	}
	return loc + e.Msg
}

// Errors is every problem found in one pass, in document order.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Origin says where a field's value came from.
type Origin struct {
	File string
	Line int
	Set  string // the override, e.g. "train.steps=50", when it came from --set
}

// Doc is a decoded config: where each present field came from, so that
// validation can point at the line of the value it rejects.
type Doc struct {
	File    string
	origins map[string]Origin
}

// Errorf makes an Error at the field's origin; a field absent from the
// file (a default) is located at the file alone.
func (d *Doc) Errorf(field, format string, args ...any) *Error {
	o, ok := d.origins[field]
	e := &Error{File: d.File, Field: field, Msg: fmt.Sprintf(format, args...)}
	switch {
	case ok && o.Set != "":
		e.File, e.Line = "--set "+o.Set, 0
	case ok:
		e.Line = o.Line
	default:
		e.Msg += " (default)"
	}
	return e
}

// Has reports whether the field was given in the file or by --set.
func (d *Doc) Has(field string) bool {
	_, ok := d.origins[field]
	return ok
}

// DecodeFile reads path, applies overrides ("a.b=value", the value in YAML
// syntax) and decodes into dst, a pointer to a struct holding defaults.
func DecodeFile(path string, overrides []string, dst any) (*Doc, error) {
	src, err := readlimit.ReadFile(path, readlimit.Recipe)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	return Decode(path, src, overrides, dst)
}

// Decode is DecodeFile on bytes already read; name is used in errors.
func Decode(name string, src []byte, overrides []string, dst any) (*Doc, error) {
	root, err := oneDocument(src)
	if err != nil {
		return nil, locate(name, err)
	}
	var doc *yaml.Node
	switch {
	case root.Kind == 0: // empty file
		doc = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	case root.Kind == yaml.DocumentNode && len(root.Content) == 1:
		doc = root.Content[0]
	default:
		return nil, &Error{File: name, Line: root.Line, Msg: "expected one YAML document"}
	}
	if doc.Kind != yaml.MappingNode {
		return nil, &Error{File: name, Line: doc.Line, Msg: "the config must be a mapping of keys to values"}
	}
	d := &Doc{File: name, origins: map[string]Origin{}}
	setBy := map[*yaml.Node]string{}
	for _, o := range overrides {
		if err := applyOverride(doc, o, setBy); err != nil {
			return nil, err
		}
	}
	dec := decoder{doc: d, setBy: setBy}
	dec.value(doc, reflect.ValueOf(dst).Elem(), "")
	if len(dec.errs) > 0 {
		return d, dec.errs
	}
	return d, nil
}

// errSecondDocument reports a stream of more than one YAML document.
type errSecondDocument struct{ line int }

func (e errSecondDocument) Error() string {
	return "a second YAML document (after \"---\") is not allowed: a config is one document"
}

// oneDocument parses src as exactly one YAML document (or none: an empty
// or comment-only input gives a zero node).
func oneDocument(src []byte) (yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var root, next yaml.Node
	if err := dec.Decode(&root); err != nil && err != io.EOF {
		return root, err
	}
	switch err := dec.Decode(&next); {
	case err == io.EOF:
		return root, nil
	case err != nil:
		return root, err
	}
	return root, errSecondDocument{line: next.Line}
}

// locate turns a parse error of oneDocument into an *Error of file name.
func locate(name string, err error) error {
	var sd errSecondDocument
	if errors.As(err, &sd) {
		return &Error{File: name, Line: sd.line, Msg: sd.Error()}
	}
	return syntaxError(name, err)
}

type decoder struct {
	doc   *Doc
	setBy map[*yaml.Node]string
	errs  Errors
}

func (dc *decoder) fail(n *yaml.Node, field, format string, args ...any) {
	e := &Error{File: dc.doc.File, Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...)}
	if s, ok := dc.setBy[n]; ok {
		e.File, e.Line = "--set "+s, 0
	}
	dc.errs = append(dc.errs, e)
}

func (dc *decoder) record(n *yaml.Node, field string) {
	o := Origin{File: dc.doc.File, Line: n.Line}
	if s, ok := dc.setBy[n]; ok {
		o = Origin{Set: s}
	}
	dc.doc.origins[field] = o
}

func (dc *decoder) value(n *yaml.Node, v reflect.Value, field string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if field != "" {
		dc.record(n, field)
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		dc.fail(n, field, "no value given")
		return
	}
	if v.CanAddr() {
		if tu, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
			if n.Kind != yaml.ScalarNode {
				dc.fail(n, field, "expected a single value, got %s", describe(n))
			} else if err := tu.UnmarshalText([]byte(n.Value)); err != nil {
				dc.fail(n, field, "%v", err)
			}
			return
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			if d, ok := v.Interface().(interface{ SetDefaults() }); ok {
				d.SetDefaults() // a section given in the file starts from its defaults
			}
		}
		dc.value(n, v.Elem(), field)
	case reflect.Struct:
		dc.mapping(n, v, field)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			dc.fail(n, field, "expected a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			dc.value(item, s.Index(i), fmt.Sprintf("%s[%d]", field, i))
		}
		v.Set(s)
	default:
		if n.Kind != yaml.ScalarNode {
			dc.fail(n, field, "expected %s, got %s", kindName(v.Kind()), describe(n))
			return
		}
		if err := setScalar(n, v); err != nil {
			dc.fail(n, field, "%v", err)
		}
	}
}

func (dc *decoder) mapping(n *yaml.Node, v reflect.Value, field string) {
	if n.Kind != yaml.MappingNode {
		dc.fail(n, field, "expected a mapping of keys to values, got %s", describe(n))
		return
	}
	fields := map[string]int{}
	var names []string
	for i := 0; i < v.NumField(); i++ {
		tag := strings.Split(v.Type().Field(i).Tag.Get("yaml"), ",")[0]
		if tag != "" && tag != "-" {
			fields[tag] = i
			names = append(names, tag)
		}
	}
	pairs, perr := mergedPairs(n)
	if perr != nil {
		dc.fail(perr.node, field, "%s", perr.msg)
		return
	}
	seen := map[string]int{}
	for _, p := range pairs {
		k, val := p.key, p.val
		if _, dup := seen[k.Value]; dup && p.merged {
			continue // written in the mapping itself, or by an earlier merge
		}
		sub := k.Value
		if field != "" {
			sub = field + "." + k.Value
		}
		if first, dup := seen[k.Value]; dup {
			dc.fail(k, sub, "duplicate key (first given on line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		idx, ok := fields[k.Value]
		if !ok {
			msg := fmt.Sprintf("unknown field %q", k.Value)
			if s := suggest(k.Value, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				sort.Strings(names)
				msg += " (known: " + strings.Join(names, ", ") + ")"
			}
			where := field
			if where == "" {
				where = "(top level)"
			}
			e := &Error{File: dc.doc.File, Line: k.Line, Field: where, Msg: msg}
			if s, ok := dc.setBy[val]; ok {
				e.File, e.Line = "--set "+s, 0
			}
			dc.errs = append(dc.errs, e)
			continue
		}
		dc.value(val, v.Field(idx), sub)
	}
}

// pair is one key and value of a mapping; merged marks one brought in by a
// merge key, which loses to the same key written in the mapping.
type pair struct {
	key, val *yaml.Node
	merged   bool
}

// mergeError is a malformed merge key.
type mergeError struct {
	node *yaml.Node
	msg  string
}

// mergedPairs lists a mapping's own keys first, then those its merge keys
// ("<<") bring in, in YAML 1.1's order of precedence.
func mergedPairs(n *yaml.Node) ([]pair, *mergeError) {
	var own, merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Tag != "!!merge" {
			own = append(own, pair{key: k, val: val})
			continue
		}
		sources := []*yaml.Node{val}
		if val.Kind == yaml.SequenceNode {
			sources = val.Content
		}
		for _, src := range sources {
			if src.Kind == yaml.AliasNode {
				src = src.Alias
			}
			if src.Kind != yaml.MappingNode {
				return nil, &mergeError{k, fmt.Sprintf("a merge key (<<) takes a mapping or a list of mappings, got %s", describe(src))}
			}
			inner, err := mergedPairs(src)
			if err != nil {
				return nil, err
			}
			for _, p := range inner {
				merged = append(merged, pair{key: p.key, val: p.val, merged: true})
			}
		}
	}
	return append(own, merged...), nil
}

func setScalar(n *yaml.Node, v reflect.Value) error {
	s := n.Value
	switch v.Kind() {
	case reflect.String:
		if n.Tag != "!!str" && n.Style == 0 && n.Tag != "" && n.Tag != "!!int" && n.Tag != "!!float" {
			return fmt.Errorf("expected a string, got %s", describe(n))
		}
		v.SetString(s)
	case reflect.Bool:
		if n.Tag != "!!bool" {
			return fmt.Errorf("expected true or false, got %s", describe(n))
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("expected true or false, got %s", describe(n))
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
		if n.Tag != "!!int" || err != nil || v.OverflowInt(i) {
			return fmt.Errorf("expected an integer, got %s", describe(n))
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(strings.ReplaceAll(s, "_", ""), 0, 64)
		if n.Tag != "!!int" || err != nil || v.OverflowUint(u) {
			return fmt.Errorf("expected a non-negative integer, got %s", describe(n))
		}
		v.SetUint(u)
	case reflect.Float32, reflect.Float64:
		if n.Tag != "!!float" && n.Tag != "!!int" {
			return fmt.Errorf("expected a number, got %s", describe(n))
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("expected a finite number, got %s", describe(n))
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("unsupported field kind %s", v.Kind())
	}
	return nil
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "an integer"
}

// describe shows a node the way the user wrote it.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!str":
		return strconv.Quote(n.Value)
	case "!!null":
		return "nothing"
	}
	return n.Value
}

// suggest returns the known name closest to an unknown key, if close enough.
func suggest(key string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(key), n); d < bestD || (d == bestD && d <= 2 && best == "") {
			best, bestD = n, d
		}
	}
	if bestD > 2 && !strings.Contains(best, key) {
		return ""
	}
	return best
}

// editDistance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and adjacent transpositions ("lora_alpah").
func editDistance(a, b string) int {
	pp := make([]int, len(b)+1) // row i-2
	p := make([]int, len(b)+1)  // row i-1
	for j := range p {
		p[j] = j
	}
	for i := 1; i <= len(a); i++ {
		c := make([]int, len(b)+1)
		c[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			c[j] = min(p[j]+1, c[j-1]+1, p[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				c[j] = min(c[j], pp[j-2]+1)
			}
		}
		pp, p = p, c
	}
	return p[len(b)]
}

// applyOverride sets a.b.c = value in the document, creating mappings as
// needed, and marks the new nodes as coming from --set.
func applyOverride(doc *yaml.Node, o string, setBy map[*yaml.Node]string) error {
	path, val, ok := strings.Cut(o, "=")
	if !ok || path == "" {
		return &Error{File: "--set " + o, Msg: "expected key.path=value"}
	}
	vn, err := oneDocument([]byte(val))
	var sd errSecondDocument
	switch {
	case errors.As(err, &sd):
		return &Error{File: "--set " + o, Msg: "the value holds a second YAML document (after \"---\"): give one value"}
	case err != nil || (vn.Kind == yaml.DocumentNode && len(vn.Content) != 1):
		return &Error{File: "--set " + o, Msg: "the value is not valid YAML"}
	}
	// key= with nothing after it sets an empty string (clearing a path),
	// which is what a shell user means; YAML would read it as null.
	value := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""}
	if vn.Kind == yaml.DocumentNode {
		value = vn.Content[0]
	}
	markAll(value, o, setBy)
	keys := strings.Split(path, ".")
	cur := doc
	for i, k := range keys {
		if k == "" {
			return &Error{File: "--set " + o, Msg: "empty key in " + strconv.Quote(path)}
		}
		var next *yaml.Node
		for j := 0; j+1 < len(cur.Content); j += 2 {
			if cur.Content[j].Value == k {
				next = cur.Content[j+1]
			}
		}
		last := i == len(keys)-1
		switch {
		case last && next != nil:
			*next = *value
			setBy[next] = o
			markAll(next, o, setBy)
		case last:
			cur.Content = append(cur.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, value)
		case next == nil:
			next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			setBy[next] = o
			cur.Content = append(cur.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, next)
		case next.Kind != yaml.MappingNode:
			return &Error{File: "--set " + o, Msg: fmt.Sprintf("%s is not a mapping", strings.Join(keys[:i+1], "."))}
		}
		cur = next
	}
	return nil
}

func markAll(n *yaml.Node, o string, setBy map[*yaml.Node]string) {
	setBy[n] = o
	for _, c := range n.Content {
		markAll(c, o, setBy)
	}
}

// syntaxError turns yaml.v3's "yaml: line 4: ..." into file:line form.
func syntaxError(name string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var line int
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if l, e := strconv.Atoi(num); e == nil {
				line, msg = l, tail
				if parserError(msg) {
					// yaml.v3 adds 1 to its 0-based line for scanner
					// errors only; parser errors come out a line early.
					line++
				}
			}
		}
	}
	return &Error{File: name, Line: line, Msg: "invalid YAML: " + msg}
}

// parserError reports the messages yaml.v3's parser (not its scanner)
// produces, the full set in its parserc.go. They are matched exactly: some
// scanner messages begin with the same "did not find expected ".
func parserError(msg string) bool {
	switch msg {
	case "did not find expected ',' or ']'", "did not find expected ',' or '}'",
		"did not find expected '-' indicator", "did not find expected <document start>",
		"did not find expected <stream-start>", "did not find expected key",
		"did not find expected node content",
		"found duplicate %TAG directive", "found duplicate %YAML directive",
		"found incompatible YAML document", "found undefined tag handle":
		return true
	}
	return false
}

// IsConfigError reports whether err came from a config (for exit status 2).
func IsConfigError(err error) bool {
	var e *Error
	var es Errors
	return errors.As(err, &e) || errors.As(err, &es)
}
