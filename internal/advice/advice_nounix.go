//go:build !unix

package advice

// For says what to do about the system error in err's chain (see
// advise); these systems' errors are not known here: "".
func For(error) string { return "" }

// blockedDir: these systems have no search bit to tell.
func blockedDir(string) string { return "" }

func dirDescription(string) string { return "" }

func unwritableDir(string) string { return "" }
