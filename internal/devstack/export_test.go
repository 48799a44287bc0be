package devstack

// DatabaseURL is the store's URL, for tests that run a worker in a child process.
func DatabaseURL(d *Dev) string { return d.databaseURL() }
