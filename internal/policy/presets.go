package policy

// KnownPresets returns the preset names network.presets accepts, in a fixed order. It is a function
// rather than a variable so that no caller can change the list at run time.
func KnownPresets() []string {
	return []string{"claude", "github", "npm", "go", "pypi", "cargo", "maven", "apt"}
}
