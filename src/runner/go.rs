//! `go test`.
//!
//! Sources: "go help environment" and "go help modules" (`go.work` and
//! `go.work.sum` change which module code a test builds against;
//! `go.mod`'s `replace`, `toolchain` and `godebug` directives — `go.mod`
//! is judged as a shared file, its requirements free to change;
//! `vendor/modules.txt` switches the build to the vendored copies (the
//! vendored code itself is the repository's code, judged like the rest);
//! `GOFLAGS` from `go env -w` lives in the
//! user's config, under a HOME the judge does not share).

use super::{base, Runner};

pub const RUNNER: Runner = Runner {
    name: "go test",
    docs: &[
        "https://pkg.go.dev/cmd/go#hdr-Environment_variables",
        "https://go.dev/ref/mod#go-work-file",
        "https://go.dev/doc/toolchain",
    ],
    files: &[
        "**/go.work",
        "**/go.work.sum",
        "**/vendor/modules.txt",
        "**/go.env",
    ],
    vars: &[
        "GOFLAGS",
        "GOENV",
        "GOTOOLCHAIN",
        "GOWORK",
        "GOPATH",
        "GOROOT",
        "GOPROXY",
        "GOEXPERIMENT",
        "GODEBUG",
        "CGO_ENABLED",
        "CGO_CFLAGS",
        "CGO_LDFLAGS",
    ],
    runs,
    probe,
};

fn runs(words: &[&str]) -> bool {
    words.first().is_some_and(|w| base(w) == "go") && words.get(1) == Some(&"test")
}

fn probe(words: &[&str]) -> Option<String> {
    Some(super::executable_probe(words.first()?))
}
