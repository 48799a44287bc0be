package config

import "time"

// Recordings is how long runs' desktop recordings are kept: each for MaxAge, and of each box's
// at most MaxBoxMB, its oldest going first. 0 is no bound of that kind.
type Recordings struct {
	MaxAge   time.Duration `yaml:"max_age" env:"COCOONBOX_RECORDINGS_MAX_AGE"`
	MaxBoxMB int           `yaml:"max_box_mb" env:"COCOONBOX_RECORDINGS_MAX_BOX_MB"`
}

// DefaultRecordings keeps a month of recordings, up to 2 GiB a box.
func DefaultRecordings() Recordings {
	return Recordings{MaxAge: 30 * 24 * time.Hour, MaxBoxMB: 2048}
}
