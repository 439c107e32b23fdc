package train

import (
	"errors"

	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/internal/yamlconf"
)

// InputError is a problem with what the user gave mixtune (a dataset, a
// model or adapter directory, a task file, a run too large for the
// machine), found before any work was written: the command line reports it
// with exit status 2, like a bad recipe.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// inputError marks err as the user's input; nil stays nil.
func inputError(err error) error {
	if err == nil {
		return nil
	}
	return &InputError{Err: err}
}

// IsInputError reports whether err is about the user's input: a recipe
// (file, line, field), a dataset row (file:line, or a Parquet file's
// column, row group or row), or an InputError.
func IsInputError(err error) bool {
	var ie *InputError
	var le *data.LineError
	var pe *data.ParquetError
	return yamlconf.IsConfigError(err) || errors.As(err, &ie) || errors.As(err, &le) || errors.As(err, &pe)
}
