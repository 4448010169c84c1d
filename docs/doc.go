// Package docs holds the project's documentation. It has no code; its test keeps the pattern map of
// design.md pointing at code that exists.
package docs
