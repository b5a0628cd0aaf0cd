// Package docs holds foundryq's documentation pages (the Markdown files in
// this folder) and nothing to import: its tests check that every relative
// link and #anchor in README.md, CONTRIBUTING.md, deploy/README.md and
// docs/*.md resolves, that each page opens with a contents list of its own
// headings, and that README.md stays short.
//
//	go test ./docs/
package docs
