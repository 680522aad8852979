// Package codeshape holds tests of the shape of the repository's own code,
// the rules a reviewer would otherwise check by hand:
//
//   - no non-test function is longer than MaxFuncLines lines unless the last
//     line of its doc comment says why, with "long: " and a reason
//     (TestFunctionLength);
//   - docs/architecture.md's folder table lists every package, and non-test
//     code imports only packages of its own row or below (TestFoldersTable),
//     with the rows of each top-level folder together
//     (TestTopLevelFoldersTogether);
//   - every relative link of every Markdown file names a file that exists
//     and, with an anchor, one of its headings (TestMarkdownLinks), and
//     README.md stays within MaxReadmeLines (TestReadmeFitsAFewScreens).
//
// Run them with
//
//	go test ./hack/codeshape/
//
// The package has no code of its own, only tests.
package codeshape
