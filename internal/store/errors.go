package store

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/loomhand/cocoonbox"
)

// Errors callers branch on. Every query error passes through mapErr, so these are the only
// database conditions anyone outside this file needs to know about. Each is a domain error with
// its code, so a store error reaching any caller carries the code it means (not "internal"),
// and callers may still branch on the sentinel with errors.Is.
var (
	// ErrNotFound means the row does not exist (or, for tokens, is revoked or expired), or a row
	// being written refers to one that does not.
	ErrNotFound error = &cocoonbox.Error{Code: cocoonbox.ENotFound, Message: "not found"}
	// ErrConflict means the write collides with an existing row, such as a taken name.
	ErrConflict error = &cocoonbox.Error{Code: cocoonbox.EConflict, Message: "conflicts with what is stored"}
	// ErrInvalid means the database rejected a value: a CHECK, NOT NULL or type constraint.
	ErrInvalid error = &cocoonbox.Error{Code: cocoonbox.EInvalid, Message: "invalid value"}
)

// SQLSTATE codes, from the PostgreSQL manual's appendix A.
const (
	uniqueViolation     = "23505"
	exclusionViolation  = "23P01"
	foreignKeyViolation = "23503"
	checkViolation      = "23514"
	notNullViolation    = "23502"
	stringTooLong       = "22001"
	invalidTextRep      = "22P02"
)

// mapErr translates a pgx error into a sentinel, keeping the original text for the logs; a lost
// or refused connection becomes an unavailable error naming PostgreSQL, and other errors (such
// as a context's) pass through unchanged.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if serverGone(err) {
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "the database (PostgreSQL) is not answering; try again", Err: err}
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case uniqueViolation, exclusionViolation:
		return fmt.Errorf("%w: %s", ErrConflict, pgErr.ConstraintName)
	case foreignKeyViolation:
		// Deletes here are soft or cascade, so this is an insert naming a missing row.
		return fmt.Errorf("%w: %s", ErrNotFound, pgErr.ConstraintName)
	case checkViolation, notNullViolation:
		return fmt.Errorf("%w: %s", ErrInvalid, pgErr.ConstraintName)
	case stringTooLong, invalidTextRep:
		return fmt.Errorf("%w: %s", ErrInvalid, pgErr.Message)
	}
	return err
}

// isForeignKeyViolation reports a statement refused because a row another row references would
// go (a RESTRICT reference, as a snapshot's base).
func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == foreignKeyViolation
}
